"""Online enforcement: what a pending call breaks now, and what waits for the run's end."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from callgate._errors import TemporalError
from callgate._model import Event
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import Monitor, Violation, compile_behavior


def _monitor(rule: str, enforce: str = "block") -> Monitor:
    return compile_behavior([BehaviorStatement(id="s", rule=rule, enforce=enforce)]).monitor()


def _ev(action: str, status: str = "ok", output: str = "", **args: Any) -> Event:
    return Event(action=action, args=args, status=status, output=output)  # type: ignore[arg-type]


def _run(monitor: Monitor, events: list[Event]) -> list[list[Violation]]:
    """Feed events like the kernel; return what check_pending said about each."""
    said = []
    for ev in events:
        said.append(monitor.check_pending(ev))
        monitor.commit(ev)
    return said


def test_prec_blocks_the_pending_consumer_and_names_it() -> None:
    monitor = _monitor("prec(action = warp and transform = $x, action = validate and target = $x)")
    _run(monitor, [_ev("estimate", output="M"), _ev("validate", target="N")])
    found = monitor.check_pending(_ev("warp", transform="M"))
    assert [(v.statement, v.enforce, v.events, v.kind) for v in found] == [
        ("s", "block", (3,), "violation")]
    assert monitor.check_pending(_ev("warp", transform="N")) == []


def test_enforcement_mode_is_carried_on_the_violation() -> None:
    monitor = _monitor("abs(action = rm)", enforce="quarantine")
    assert monitor.check_pending(_ev("rm"))[0].enforce == "quarantine"


def test_value_flow_with_contains_ties_a_send_to_an_earlier_read() -> None:
    monitor = _monitor(
        "prec(action = send and body = $x, action = read_file and output contains $x)")
    _run(monitor, [_ev("read_file", output="token=abc123; user=u")])
    assert monitor.check_pending(_ev("send", body="abc123")) == []
    assert monitor.check_pending(_ev("send", body="zzz"))[0].events == (2,)


def test_until_denies_a_bad_event_inside_an_open_interval_naming_the_trigger() -> None:
    monitor = _monitor("until(action = lock and id = $k, action = unlock and id = $k,"
                       " action = write and id = $k)")
    _run(monitor, [_ev("lock", id=1), _ev("lock", id=2), _ev("unlock", id=2)])
    assert monitor.check_pending(_ev("write", id=2)) == []
    assert monitor.check_pending(_ev("write", id=1))[0].events == (1,)
    assert monitor.finish() == []


def test_until_resolver_must_come_strictly_before_the_bad_event() -> None:
    # A checked write resolves the interval, but not for itself.
    monitor = _monitor("until(action = open, action = write and checked = 1, action = write)")
    _run(monitor, [_ev("open")])
    assert monitor.check_pending(_ev("write", checked=1))[0].events == (1,)
    monitor.commit(_ev("write", checked=1))
    assert monitor.check_pending(_ev("write")) == []


def test_bresp_fails_at_the_lth_event_after_the_trigger_without_a_response() -> None:
    monitor = _monitor("bresp[2](action = alarm, action = ack)")
    said = _run(monitor, [_ev("alarm"), _ev("noise")])
    assert said == [[], []]
    assert monitor.check_pending(_ev("ack")) == []
    assert monitor.check_pending(_ev("noise"))[0].events == (1,)


def test_bresp_window_open_at_run_end_is_judged_by_finish() -> None:
    monitor = _monitor("bresp[3](action = alarm, action = ack)")
    _run(monitor, [_ev("noise"), _ev("alarm"), _ev("noise")])
    assert [v.events for v in monitor.finish()] == [(2,)]


def test_resp_never_blocks_online_and_names_the_trigger_at_run_end() -> None:
    monitor = _monitor("resp(action = open and f = $f, action = close and f = $f)")
    said = _run(monitor, [_ev("open", f="a"), _ev("open", f="b"), _ev("close", f="a")])
    assert said == [[], [], []]
    assert [v.events for v in monitor.finish()] == [(2,)]


def test_rslv_judges_only_the_last_state_of_each_binding() -> None:
    monitor = _monitor("rslv(action = edit and file = $f, action = save and file = $f)")
    _run(monitor, [_ev("edit", file="a"), _ev("edit", file="a"), _ev("save", file="a"),
                   _ev("edit", file="b"), _ev("edit", file="b")])
    assert [v.events for v in monitor.finish()] == [(5,)]


def test_not_eventually_is_caught_online_when_the_future_event_is_pending() -> None:
    monitor = _monitor(
        "always(not (action = read_secret and eventually(action = http_post)))")
    _run(monitor, [_ev("read_secret"), _ev("ls"), _ev("read_secret")])
    found = monitor.check_pending(_ev("http_post"))
    assert found[0].events == (1, 3)
    assert monitor.finish() == []


def test_eventually_obligation_is_judged_at_run_end() -> None:
    monitor = _monitor("always(not action = deploy or eventually(action = verify))")
    said = _run(monitor, [_ev("deploy"), _ev("verify"), _ev("deploy")])
    assert said == [[], [], []]
    assert [v.events for v in monitor.finish()] == [(3,)]


def test_bounded_once_sees_the_n_events_before_never_the_event_itself() -> None:
    monitor = _monitor("always(not (action = send and once[2](taint has web)))")
    web = Event(action="fetch", taint=frozenset({"web"}))
    _run(monitor, [web, _ev("x")])
    assert monitor.check_pending(_ev("send"))[0].events == (3,)
    monitor.commit(_ev("y"))
    assert monitor.check_pending(_ev("send")) == []
    tainted_send = Event(action="send", taint=frozenset({"web"}))
    assert monitor.check_pending(tainted_send) == []


def test_denied_calls_are_events_with_their_status() -> None:
    monitor = _monitor("always(not (action = retry and once[1](status = denied)))")
    _run(monitor, [_ev("rm", status="denied")])
    assert monitor.check_pending(_ev("retry"))[0].events == (2,)


def test_commit_with_the_wrong_sequence_number_is_an_error() -> None:
    monitor = _monitor("abs(action = x)")
    monitor.commit(Event(action="a", seq=1))
    with pytest.raises(TemporalError, match="seq 5 committed at position 2"):
        monitor.commit(Event(action="a", seq=5))
    monitor.commit(Event(action="a"))  # seq 0: the next position
    assert len(monitor) == 2


class _Exploding(Mapping[str, Any]):
    """Arguments that fail when read: an internal error on the decision path."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("unreadable argument")

    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("unreadable argument")

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_an_internal_error_fails_closed_as_an_unknown_violation() -> None:
    monitor = _monitor("prec(action = a and x = $v, action = b and x = $v)")
    bad = Event(action="a", args=_Exploding())
    found = monitor.check_pending(bad)
    assert [(v.kind, v.events) for v in found] == [("unknown", (1,))]
    assert "unreadable argument" in found[0].message


def test_a_statement_whose_state_broke_keeps_failing_closed() -> None:
    monitor = _monitor("resp(action = b and x = $v, action = c and x = $v)")
    monitor.commit(Event(action="b", args=_Exploding()))
    assert monitor.check_pending(_ev("c", x=1))[0].kind == "unknown"
    assert monitor.finish()[0].kind == "unknown"


def test_statements_are_skipped_only_for_actions_they_cannot_be_affected_by() -> None:
    from callgate.temporal._monitor import interest
    from callgate.temporal._parser import parse_statement

    def actions(rule: str) -> set[str] | None:
        found = interest(parse_statement(rule))
        return None if found is None else set(found)

    assert actions("prec(action = a and x = $v, action in {b, c} and x = $v)") == {"a", "b", "c"}
    assert actions("abs(status = denied)") is None
    assert actions("bresp[2](action = a, action = b)") is None  # every event moves the window
    assert actions("always(not (action = s and not (fps = 6)))") == {"s"}
    # once's operand names no action: every event may update its state.
    assert actions("always(not (action = p and once[3](taint has web)))") is None
    # a body false when its leaves are false must see every event.
    assert actions("always(action = a)") is None


def test_a_violation_becomes_a_decision_witness() -> None:
    monitor = _monitor("abs(action = rm)")
    witness = monitor.check_pending(_ev("rm"))[0].witness()
    assert (witness.statement, witness.events) == ("s", (1,))
    assert "forbidden" in witness.detail


def test_merging_many_offending_events_keeps_them_all_and_bounds_the_message() -> None:
    from callgate.temporal import Violation, merge_violations

    many = [Violation("s", "block", (i,), f"event {i} matches a forbidden pattern")
            for i in range(12_800, 0, -1)]
    (merged,) = merge_violations(many, ["s"])
    assert merged.events == tuple(range(1, 12_801))
    assert len(merged.message) < 2_000 and merged.message.endswith("and 12780 more")
    unknown = Violation("s", "block", (5,), "solver gave up", "unknown")
    (decided,) = merge_violations([*many[:3], unknown], ["s"])
    assert decided.kind == "unknown" and decided.events == (5, 12_798, 12_799, 12_800)


def test_kinds_of_event_keep_true_apart_from_one() -> None:
    # True == 1 to Python, but the language's number 1 is not the boolean: a body specialised
    # for the first kind must not be reused for the other.
    monitor = _monitor("always(not (action = set and x = 1))")
    said = _run(monitor, [_ev("set", x=True), _ev("set", x=1), _ev("set", x=True),
                          _ev("set", x=1.0)])
    assert [bool(s) for s in said] == [False, True, False, True]


def test_an_argument_of_many_values_leaves_the_kind_and_verdicts_stay() -> None:
    monitor = _monitor('always(not (action = read and path in {"/a", "/b"}))')
    events = [_ev("read", path=f"/f{i}") for i in range(40)] + [_ev("read", path="/b"),
                                                                _ev("read", path="/c")]
    said = _run(monitor, events)
    assert [i for i, s in enumerate(said) if s] == [40]


def test_a_part_of_the_body_without_a_nested_future_still_blocks_online() -> None:
    monitor = _monitor("always(not (action = send and once(action = read)) "
                       "and not (action = z and once(eventually(action = q))))")
    for action in ("read", "other"):
        assert monitor.check_pending(Event(seq=0, action=action)) == []
        monitor.commit(Event(seq=0, action=action))
    refused = monitor.check_pending(Event(seq=3, action="send"))
    assert [v.statement for v in refused] == ["s"] and refused[0].events == (3,)
    # the nested-future part is judged when the run ends: z at 3 had a q after an earlier event
    monitor.commit(Event(seq=3, action="z"))
    assert monitor.check_pending(Event(seq=4, action="q")) == []
    monitor.commit(Event(seq=4, action="q"))
    assert [v.events for v in monitor.finish()] == [(3,)]


@pytest.mark.parametrize(("quiet", "loud"), [
    (Event("x", {}, "ok", taint=frozenset()), Event("x", {}, "ok", taint=frozenset({"web"}))),
    (Event("x", {"mode": "r"}), Event("x", {"mode": "w"})),
    (Event("x", {"mode": 1}), Event("x", {"mode": "1"})),
    (Event("x", {}, "ok"), Event("x", {}, "denied")),
])
def test_a_kind_quiet_for_every_body_is_told_apart_from_one_that_is_not(
    quiet: Event, loud: Event
) -> None:
    # Each pair differs only in what one body reads: the first event is quiet for both bodies,
    # the second is what the first body's ``once`` waits for.
    monitor = compile_behavior([
        BehaviorStatement(id="after", rule='always(not (action = b and once(action = x and '
                                            '(taint has web or mode = "w" or mode = "1" '
                                            'or status = denied))))'),
        BehaviorStatement(id="other", rule="always(not (action = c and once(action = d)))"),
    ]).monitor()
    for event in (quiet, quiet, loud):
        assert monitor.check_pending(event) == []
        monitor.commit(event)
    found = monitor.check_pending(Event("b", {}))
    assert [(v.statement, v.events) for v in found] == [("after", (4,))]


def test_an_event_whose_arguments_are_no_mapping_is_judged_closed_not_raised() -> None:
    monitor = compile_behavior([BehaviorStatement(
        id="s", rule='always(not (action = send and mode = "w"))')]).monitor()
    odd = Event("send", ["not", "a", "mapping"])  # type: ignore[arg-type]
    found = monitor.check_pending(odd)
    assert [(v.statement, v.kind) for v in found] == [("s", "unknown")]

"""Every error path of the kernel is an audited deny or an error result, and a decision has a
deadline: nothing escapes ``check``, ``mediate``, ``execute`` (other than ``Denied``),
``issue_token`` (other than ``Denied``) or ``end_run``, and the run's state stays consistent."""

from __future__ import annotations

import fcntl
import os
import resource
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate import Denied, Reason, ToolCall, ToolResult
from callgate.audit import AuditStore
from callgate.audit._log import LOCK_TIMEOUT
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy, load_policy
from callgate.testing import call, reason_ids
from tests.conftest import EXAMPLE

EXAMPLE_POLICY = load_policy(EXAMPLE)  # one shared load: hypothesis prints short examples

GET = call("http", "get", url="https://api.github.com/repos")
POST = call("http", "post", url="https://x.com")


def decisions_in(db: Path, run_id: str) -> list[dict[str, Any]]:
    with AuditStore.open(db) as store:
        return [r.payload for r in store.records(run_id) if r.kind == "decision"]


def kinds_in(db: Path, run_id: str) -> list[str]:
    with AuditStore.open(db) as store:
        assert store.verify().ok
        return [r.kind if r.kind != "system" else "system:" + r.payload["kind"]
                for r in store.records(run_id)]


@contextmanager
def locked_out(kernel: Kernel, db: Path) -> Iterator[None]:
    """A second writer holds the log: every append of the kernel fails for real."""
    store = kernel._audit
    assert store is not None and store._segment is not None
    store._segment.lock_timeout = 0.05
    blocker = os.open(f"{db}.log", os.O_RDONLY)
    fcntl.flock(blocker, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(blocker)
        store._segment.lock_timeout = LOCK_TIMEOUT


@contextmanager
def disk_full(kernel: Kernel, db: Path) -> Iterator[None]:
    """The log cannot grow, as on a full disk: a file size limit at the segment's length."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (Path(f"{db}.log").stat().st_size, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)


FAILURES: dict[str, Callable[[Kernel, Path], Any]] = {"second-writer": locked_out,
                                                      "disk-full": disk_full}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_the_quarantining_deny_on_a_failing_store_is_returned_not_raised(
        example_policy: LoadedPolicy, workdir: Path, failure: str) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    with FAILURES[failure](k, db):
        decisions = [k.check(POST) for _ in range(7)]
        assert [d.verdict for d in decisions] == ["deny"] * 7
        assert all("audit.write-failed" in reason_ids(d) for d in decisions)
        # the run state moved as the verdicts say: five denials quarantine the run
        assert k.run_state.counters.denied_actions == 7
        assert k.run_state.quarantined
        assert "audit.write-failed" in reason_ids(decisions[4])
        assert any(r.message.startswith("the quarantine record could not be audited")
                   for r in decisions[4].reasons if r.id == "audit.write-failed")
    # the store works again: the next call is decided and audited (a GET is read-only, so it
    # passes the quarantine)
    assert k.check(GET).verdict == "allow"
    k.close()
    assert [d["decision"]["verdict"] for d in decisions_in(db, k.run_id)] == ["allow"]


def test_a_write_blocked_store_denies_even_an_allowed_call_and_recovers(
        example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    with locked_out(k, db):
        assert reason_ids(k.check(GET)) == ["audit.write-failed"]
    after = k.check(GET)
    assert after.verdict == "allow"
    k.close()
    assert [d["decision"]["verdict"] for d in decisions_in(db, k.run_id)] == ["allow"]


def test_a_full_disk_denies_every_call_and_never_raises(example_policy: LoadedPolicy,
                                                        workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    k.register_executor("http", lambda c: "x" * 100_000)
    with disk_full(k, db):
        seen = [k.check(POST) for _ in range(6)]
        decision, result = k.mediate(GET)
        assert decision.verdict == "deny" and result is None
        with pytest.raises(Denied):
            k.execute(GET)
    assert all(d.verdict == "deny" for d in seen)
    assert k.run_state.quarantined
    k.close()


def test_issue_token_and_end_run_on_a_failing_store_raise_nothing_but_denied(
        example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    with locked_out(k, db):
        for _ in range(6):
            with pytest.raises(Denied) as info:
                k.issue_token("database", actions=["write"])
        assert info.value.decision.verdict == "deny"
        assert k.run_state.counters.denied_capability_requests == 6
        assert k.run_state.quarantined
        assert k.end_run() == []
        k.close()


# -- results the audit cannot record ------------------------------------------------------------


def deep_list(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("output", [
    "lone \udcff surrogate",
    {"key \ud800": "v"},
    deep_list(1_000),
    deep_list(5_000),
    object(),
], ids=["surrogate-text", "surrogate-key", "1000-deep", "5000-deep", "object"])
def test_any_result_comes_back_audited_or_withheld_never_raised(
        example_policy: LoadedPolicy, workdir: Path, output: Any) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    k.register_executor("http", lambda c: output)
    decision, result = k.mediate(GET)
    assert decision.verdict == "allow"
    assert result is not None
    if result.status != "ok":  # what the log could not hold is not handed back
        assert result.status == "error" and result.output is None
        assert result.error is not None and result.error.startswith("audit.write-failed")
    assert k.execute(GET).status == result.status
    k.close()
    assert kinds_in(db, k.run_id).count("result") == 2


def test_a_result_the_store_cannot_record_is_withheld_as_an_error(
        example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    lock = locked_out(k, db)

    def tool_then_the_store_fails(c: ToolCall) -> str:
        lock.__enter__()
        return "secret page"

    k.register_executor("http", tool_then_the_store_fails)
    decision, result = k.mediate(GET)
    lock.__exit__(None, None, None)
    assert decision.verdict == "allow"
    assert result is not None and result.status == "error" and result.output is None
    assert result.error is not None and result.error.startswith("audit.write-failed")
    # the next decision still works, and the log holds the decision without a result
    assert k.check(GET).verdict == "allow"
    k.close()
    assert kinds_in(db, k.run_id).count("result") == 0


def test_a_guard_whose_observe_raises_is_a_deny_in_check_and_an_error_result_in_mediate(
        example_policy: LoadedPolicy, workdir: Path) -> None:
    class Broken:
        def check(self, c: ToolCall, taint: frozenset[str]) -> Reason | None:
            return None

        def observe(self, c: ToolCall, result: ToolResult | None) -> None:
            raise RuntimeError("observer down")

    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db, guards=[Broken()])
    k.register_executor("http", lambda c: "page")
    d = k.check(GET)
    assert d.verdict == "deny"
    assert reason_ids(d)[-1] == "guard.observe-failed"
    assert "observer down" in d.reasons[-1].message
    _, result = k.mediate(GET)
    assert result is not None and result.status == "error" and result.output is None
    assert result.error is not None and "guard.observe-failed" in result.error
    assert k.run_state.counters.denied_actions == 1
    k.close()
    kinds = kinds_in(db, k.run_id)
    assert kinds.count("system:kernel-error") == 2
    assert kinds.count("result") == 1


def test_an_allowed_call_with_no_executor_is_an_audited_error_result(
        example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    decision, result = k.mediate(GET)
    assert decision.verdict == "allow"
    assert result is not None and result.status == "error"
    assert result.error is not None and result.error.startswith("executor.missing")
    k.close()
    assert "result" in kinds_in(db, k.run_id)


@pytest.mark.parametrize("raw", [None, [1, 2], "a call", 42, {1: 2}, {"tool": "\udcff"},
                                 {"tool": "x", "taint": deep_list(900)}])
def test_a_value_that_is_not_a_call_is_an_audited_deny(example_policy: LoadedPolicy,
                                                      workdir: Path, raw: Any) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    d = k.check(raw)
    assert d.verdict == "deny"
    decision, result = k.mediate(raw)
    assert decision.verdict == "deny" and result is None
    k.close()
    assert len(decisions_in(db, k.run_id)) == 2


# Anything an agent can put on the wire: lone surrogates, odd types, deep nesting.
_text = st.text(st.sampled_from(["a", "/", ".", "~", "\x00", "\u0130", "\udcff", "\ud800"])
                | st.characters(codec=None, exclude_categories=())
                | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"]),
                max_size=12)
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=20)
_calls = st.fixed_dictionaries({}, optional={
    "tool": _text | _json, "tool_class": st.sampled_from(["http", "file", "shell"]) | _text,
    "action": st.sampled_from(["get", "read", "exec"]) | _text,
    "parameters": st.dictionaries(st.sampled_from(["url", "path", "argv"]) | _text, _json)
    | _json, "taint": _json, "token": _json})


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raws=st.lists(_calls, min_size=1, max_size=4))
def test_every_call_whatever_its_content_is_decided_and_audited_exactly_once(
        workdir: Path, raws: list[dict[str, Any]]) -> None:
    with Kernel(EXAMPLE_POLICY, working_dir=workdir, audit=workdir / "audit.db") as k:
        for raw in raws:
            decision = k.check(raw)
            assert decision.verdict in ("allow", "deny", "require-approval")
        run = k.run_id
    assert len(decisions_in(workdir / "audit.db", run)) == len(raws)


# -- the decision deadline --------------------------------------------------------------------


class Ticking:
    """A timer that moves on by ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reads = 0.0, step, 0

    def __call__(self) -> float:
        self.now += self.step
        self.reads += 1
        return self.now


class SlowGuard:
    """A guard whose check takes ``seconds`` on the kernel's timer."""

    def __init__(self, timer: Ticking, seconds: float) -> None:
        self.timer, self.seconds = timer, seconds

    def check(self, c: ToolCall, taint: frozenset[str]) -> Reason | None:
        self.timer.now += self.seconds
        return None

    def observe(self, c: ToolCall, result: ToolResult | None) -> None:
        return None


def test_a_decision_that_passes_its_deadline_is_an_audited_deny(example_policy: LoadedPolicy,
                                                                workdir: Path) -> None:
    timer = Ticking(0.0)
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db, timer=timer,
               decision_deadline_s=2.0, guards=[SlowGuard(timer, 1.5), SlowGuard(timer, 1.0)])
    d = k.check(GET)
    assert d.verdict == "deny"
    assert reason_ids(d) == ["decision.deadline"]
    assert d.reasons[0].check == "deadline"
    ran: list[str] = []
    k.register_executor("http", lambda c: ran.append(c.tool) or "page")
    with pytest.raises(Denied):
        k.execute(GET)
    assert ran == []
    k.close()
    assert [p["decision"]["reasons"][0]["id"] for p in decisions_in(db, k.run_id)] == [
        "decision.deadline"] * 2


def test_a_decision_within_its_deadline_is_decided_as_usual(example_policy: LoadedPolicy,
                                                            workdir: Path) -> None:
    timer = Ticking(0.0)
    k = Kernel(example_policy, working_dir=workdir, timer=timer, decision_deadline_s=2.0,
               guards=[SlowGuard(timer, 1.9)])
    assert reason_ids(k.check(GET)) == ["allow-reads"]


@pytest.mark.parametrize("budget_reads", range(1, 8))
def test_the_deadline_is_checked_between_every_step(example_policy: LoadedPolicy,
                                                    workdir: Path, budget_reads: int) -> None:
    # Each reading of the timer is one second later: a deadline of n - 0.5 seconds passes at
    # the n-th check, whichever step that follows. An allowed call reads it at least 7 times.
    unlimited = Ticking(1.0)
    k = Kernel(example_policy, working_dir=workdir, timer=unlimited, decision_deadline_s=1e9)
    assert k.check(GET).verdict == "allow"
    reads = unlimited.reads
    assert reads >= 8
    timer = Ticking(1.0)
    k = Kernel(example_policy, working_dir=workdir, timer=timer,
               decision_deadline_s=budget_reads - 0.5)
    assert reason_ids(k.check(GET)) == ["decision.deadline"]
    assert timer.reads == budget_reads + 1


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_a_deadline_that_is_not_positive_is_refused(example_policy: LoadedPolicy,
                                                    bad: float) -> None:
    from callgate import CallgateError

    with pytest.raises(CallgateError, match="deadline"):
        Kernel(example_policy, decision_deadline_s=bad)


@pytest.mark.interpreted
def test_an_internal_error_in_issue_token_is_a_counted_denied_request(
        example_policy: LoadedPolicy, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)

    def broken(*_: object) -> None:
        raise RuntimeError("monitor down")

    monkeypatch.setattr(k._behavior, "check", broken)
    with pytest.raises(Denied) as info:
        k.issue_token("http", actions=["get"])
    assert reason_ids(info.value.decision) == ["internal.error"]
    assert "monitor down" in info.value.decision.reasons[0].message
    assert k.run_state.counters.denied_capability_requests == 1
    k.close()
    assert "system:kernel-error" in kinds_in(db, k.run_id)


@pytest.mark.interpreted
def test_a_monitor_that_cannot_finish_ends_the_run_with_an_undecided_violation(
        example_policy: LoadedPolicy, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = Kernel(example_policy, working_dir=workdir)

    def broken() -> None:
        raise RuntimeError("cannot finish")

    monkeypatch.setattr(k._behavior, "finish", broken)
    [violation] = k.end_run()
    assert violation.kind == "unknown"
    assert "cannot finish" in violation.message


_lone = st.sampled_from(["./data/\udcff.txt", "\ud800", "a\udfffb"])
_with_lone = st.recursive(_lone, lambda inner: st.lists(inner, min_size=1, max_size=2)
                          | st.dictionaries(st.sampled_from(["path", "x"]), inner, min_size=1,
                                            max_size=2), max_leaves=4)


@given(params=st.builds(lambda key, value: {key: value}, st.sampled_from(["path", "x"]),
                        _with_lone) | st.just({"path \udcff": "./data/notes.txt"}))
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_lone_surrogate_anywhere_in_the_parameters_is_one_audited_invalid_deny(
        workdir: Path, params: dict[str, Any]) -> None:
    # Lone surrogates are not Unicode text: no pattern engine or log can judge them faithfully.
    with Kernel(EXAMPLE_POLICY, working_dir=workdir, audit=workdir / "audit.db") as k:
        d = k.check({"tool": "read", "tool_class": "file", "action": "read",
                      "parameters": params})
        run = k.run_id
    assert reason_ids(d) == ["input.invalid"]
    assert len(decisions_in(workdir / "audit.db", run)) == 1

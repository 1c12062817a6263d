"""The Z3 reference engine: verdicts, minimal cores, fail-closed unknowns, isolation of z3."""

from __future__ import annotations

from pathlib import Path

from callgate._model import Event
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import compile_behavior
from callgate.temporal._monitor import CompiledStatement
from callgate.temporal._smt import check_statement

SRC = Path(__file__).parent.parent.parent / "src" / "callgate"


def _statement(rule: str) -> CompiledStatement:
    return compile_behavior([BehaviorStatement(id="s", rule=rule)]).statements[0]


def _events(*actions: str, **args: object) -> list[Event]:
    return [Event(action=a, args=dict(args), seq=i) for i, a in enumerate(actions, start=1)]


def test_core_is_minimal_one_failing_event_among_several() -> None:
    found = check_statement(_statement("abs(action = rm)"), _events("ls", "rm", "cat", "rm"))
    assert found is not None
    assert found.kind == "violation"
    assert len(found.events) == 1
    assert found.events[0] in (2, 4)


def test_variables_are_compared_by_the_solver() -> None:
    rule = "prec(action = use and k = $v, action = make and k = $v)"
    events = [Event(action="make", args={"k": 1}, seq=1), Event(action="use", args={"k": 1.0},
                                                                 seq=2)]
    assert check_statement(_statement(rule), events) is None
    events.append(Event(action="use", args={"k": "1"}, seq=3))
    found = check_statement(_statement(rule), events)
    assert found is not None
    assert found.events == (3,)


def test_until_core_names_the_trigger() -> None:
    rule = "until(action = open, action = close, action = write)"
    found = check_statement(_statement(rule), _events("ls", "open", "read", "write"))
    assert found is not None
    assert found.events == (2,)


def test_solver_resource_limit_gives_an_unknown_that_fails_closed() -> None:
    events = [Event(action="use" if i % 2 else "make", args={"k": i % 7}, seq=i)
              for i in range(1, 200)]
    rule = "prec(action = use and k = $v, action = make and k = $v)"
    found = check_statement(_statement(rule), events, rlimit=1)
    assert found is not None
    assert found.kind == "unknown"
    assert "unknown" in found.message


def test_a_statement_nothing_can_trigger_needs_no_query() -> None:
    assert check_statement(_statement("resp(action = never, action = x)"), _events("a")) is None


def test_only_the_smt_module_imports_z3() -> None:
    importers = sorted(
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if any(line.strip().startswith(("import z3", "from z3"))
               for line in path.read_text(encoding="utf-8").splitlines())
    )
    assert importers == ["temporal/_smt.py"]


def test_unknown_engine_is_an_error() -> None:
    import pytest

    from callgate._errors import TemporalError

    behavior = compile_behavior([BehaviorStatement(id="s", rule="abs(action = a)")])
    with pytest.raises(TemporalError, match="unknown engine"):
        behavior.check_trace([], engine="magic")  # type: ignore[arg-type]


def test_an_unknown_wins_over_violations_when_merging() -> None:
    from callgate.temporal import Violation, merge_violations

    merged = merge_violations(
        [Violation("s", "block", (2,), "m"), Violation("s", "block", (1,), "u", "unknown"),
         Violation("t", "alert", (3,), "m")],
        ["t", "s"],
    )
    assert [(v.statement, v.kind, v.events) for v in merged] == [
        ("t", "violation", (3,)), ("s", "unknown", (1, 2))]

"""Differential properties: incremental monitor vs the direct semantics vs the Z3 reference.

Thousands of small cases (short traces, random statements of every form, each form equally
often). The incremental engine must report exactly the events whose requirement fails; the Z3
engine must agree on the verdict and name only failing events.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate._model import Event
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import compile_behavior
from callgate.temporal._behavior import BehaviorSet

from .reference import failing_events
from .strategies import FORMS, always_statement, events, statement

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOLVER = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ONLINE = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _compile(rule: str) -> BehaviorSet:
    return compile_behavior([BehaviorStatement(id="s", rule=rule)])


def _incremental_events(behavior: BehaviorSet, trace: list[Event]) -> set[int]:
    found = behavior.check_trace(trace)
    assert all(v.kind == "violation" for v in found)
    return set(found[0].events) if found else set()


@pytest.mark.parametrize("form", FORMS)
@FAST
@given(data=st.data(), trace=events())
def test_incremental_reports_exactly_the_events_whose_requirement_fails(
    form: str, data: st.DataObject, trace: list[Event]
) -> None:
    behavior = _compile(data.draw(statement(form), label="rule"))
    expected = failing_events(behavior.statements[0].statement, trace)
    assert _incremental_events(behavior, trace) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(rule=always_statement(), trace=events(max_size=60, wide=True))
def test_bodies_specialised_by_kind_judge_as_the_direct_semantics(
    rule: str, trace: list[Event]
) -> None:
    # Long traces where ``x`` and the taint take many values: the monitor specialises the body
    # to each kind of event, then drops ``x`` (or the taint) from the kind once it has seen too
    # many of its values.
    behavior = _compile(rule)
    expected = failing_events(behavior.statements[0].statement, trace)
    assert _incremental_events(behavior, trace) == expected


@pytest.mark.parametrize("form", FORMS)
@SOLVER
@given(data=st.data(), trace=events(max_size=6))
def test_smt_and_incremental_agree_and_the_core_names_failing_events(
    form: str, data: st.DataObject, trace: list[Event]
) -> None:
    behavior = _compile(data.draw(statement(form), label="rule"))
    incremental = _incremental_events(behavior, trace)
    smt = behavior.check_trace(trace, engine="smt")
    assert bool(smt) == bool(incremental)
    if smt:
        assert smt[0].kind == "violation"
        assert smt[0].events
        assert set(smt[0].events) <= incremental


@pytest.mark.parametrize("form", FORMS)
@ONLINE
@given(data=st.data(), trace=events())
def test_check_pending_changes_nothing_and_only_commits_count(
    form: str, data: st.DataObject, trace: list[Event]
) -> None:
    behavior = _compile(data.draw(statement(form), label="rule"))
    monitor = behavior.monitor()
    online: set[int] = set()
    for ev in trace:
        # Asking about other calls first (then refusing them) must not change any verdict.
        for other in data.draw(events(max_size=2), label="refused calls"):
            monitor.check_pending(other)
        first = monitor.check_pending(ev)
        assert monitor.check_pending(ev) == first
        online.update(e for v in first for e in v.events)
        monitor.commit(ev)
    online.update(e for v in monitor.finish() for e in v.events)
    assert online == _incremental_events(behavior, trace)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules=st.lists(always_statement(), min_size=2, max_size=4),
       trace=events(max_size=40, wide=True))
def test_bodies_in_one_set_each_judge_as_the_direct_semantics(
    rules: list[str], trace: list[Event]
) -> None:
    # Several bodies in one monitor: the statements an event's kind is quiet on are skipped for
    # every later event of that kind, so a kind must be told apart by everything one body reads.
    behavior = compile_behavior(
        [BehaviorStatement(id=f"s{i}", rule=rule) for i, rule in enumerate(rules)])
    found: dict[str, set[int]] = {}
    for v in behavior.check_trace(trace):
        assert v.kind == "violation"
        found.setdefault(v.statement, set()).update(v.events)
    for i, compiled in enumerate(behavior.statements):
        assert found.get(f"s{i}", set()) == failing_events(compiled.statement, trace)

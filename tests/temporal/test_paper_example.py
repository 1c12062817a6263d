"""The paper's running example (dashcam perception, R0 to R3) with both engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate._model import Event
from callgate.policy._loader import load_policy
from callgate.temporal import BehaviorSet, compile_behavior, load_trace

DATA = Path(__file__).parent.parent / "data" / "temporal"
ENGINES = ("incremental", "smt")


@pytest.fixture(scope="module")
def behavior() -> BehaviorSet:
    return compile_behavior(load_policy(DATA / "dashcam_policy.yaml").policy.behavior)


def _check(
    behavior: BehaviorSet, events: list[Event], engine: str, expected: dict[str, tuple[int, ...]]
) -> None:
    """The incremental engine names every failing event; the SMT core names some of them."""
    found = behavior.check_trace(events, engine=engine)  # type: ignore[arg-type]
    assert all(v.kind == "violation" for v in found)
    got = {v.statement: v.events for v in found}
    assert set(got) == set(expected)
    for ident, witness in got.items():
        if engine == "incremental":
            assert witness == expected[ident]
        else:
            assert witness
            assert set(witness) <= set(expected[ident])


@pytest.mark.parametrize("engine", ENGINES)
def test_warp_consuming_unvalidated_m_is_unsafe_with_the_warp_as_witness(
    behavior: BehaviorSet, engine: str
) -> None:
    events = load_trace(DATA / "dashcam_unsafe.jsonl")
    _check(behavior, events, engine, {"validate-before-consume": (5,)})


@pytest.mark.parametrize("engine", ENGINES)
def test_validating_m_first_is_safe(behavior: BehaviorSet, engine: str) -> None:
    events = load_trace(DATA / "dashcam_safe.jsonl")
    _check(behavior, events, engine, {})


def _safe_run() -> list[Event]:
    return load_trace(DATA / "dashcam_safe.jsonl")


def _with(events: list[Event], index: int, ev: Event) -> list[Event]:
    return [*events[:index], ev, *events[index:]]


@pytest.mark.parametrize("engine", ENGINES)
def test_mask_before_any_warp_breaks_r2(behavior: BehaviorSet, engine: str) -> None:
    events = _with(_safe_run(), 1, Event(action="emit_mask", args={"file": "early.csr"}))
    _check(behavior, events, engine, {"masks-after-alignment": (2,)})


@pytest.mark.parametrize("engine", ENGINES)
def test_release_of_a_csr_before_any_validation_breaks_r1(
    behavior: BehaviorSet, engine: str
) -> None:
    release = Event(action="release_artifact", args={"file": "out/early_0.csr"})
    other = Event(action="release_artifact", args={"file": "notes.txt"})
    events = _with(_with(_safe_run(), 0, other), 0, release)
    _check(behavior, events, engine, {"validated-handoff": (1,)})


@pytest.mark.parametrize("engine", ENGINES)
def test_sampling_at_another_rate_or_without_a_rate_breaks_r0(
    behavior: BehaviorSet, engine: str
) -> None:
    events = _safe_run()
    events.append(Event(action="sample", args={"fps": 30}))
    events.append(Event(action="sample", args={"video": "b.mp4"}))
    events.append(Event(action="sample", args={"fps": 6.0}))
    _check(behavior, events, engine, {"fixed-sample-rate": (9, 10)})


@pytest.mark.parametrize("engine", ENGINES)
def test_mail_after_reading_a_key_breaks_the_alert_statement(
    behavior: BehaviorSet, engine: str
) -> None:
    events = _safe_run()
    events.append(Event(action="send_email", args={"to": "a@b"}))
    events.append(Event(action="read_file", args={"path": "/home/u/.ssh/id_ed25519"}))
    events.append(Event(action="send_email", args={"to": "a@b"}))
    _check(behavior, events, engine, {"no-mail-after-key-read": (11,)})
    alert = next(s for s in behavior.statements if s.id == "no-mail-after-key-read")
    assert alert.enforce == "alert"


def test_online_the_warp_is_blocked_before_it_runs(behavior: BehaviorSet) -> None:
    monitor = behavior.monitor()
    events = load_trace(DATA / "dashcam_unsafe.jsonl")
    for ev in events[:4]:
        assert monitor.check_pending(ev) == []
        monitor.commit(ev)
    found = monitor.check_pending(events[4])
    assert [(v.statement, v.events, v.enforce) for v in found] == [
        ("validate-before-consume", (5,), "block")]

"""The value types of ``callgate._model`` that are not pydantic models."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from callgate._model import Event, Flow


def _distinct_values() -> dict[str, object]:
    """A value for every field of ``Event``, no two alike and none its default."""
    return {"action": "fetch", "args": {"url": "u"}, "status": "denied", "output": "out",
            "taint": frozenset({"web"}), "seq": 7, "line": 3, "derived": True,
            "flows": (Flow(arg="url", source_event=2, taint=frozenset({"web"})),),
            "provenance": {"url": (frozenset({"web"}),)}, "source": frozenset({"email"})}


def test_the_event_constructor_sets_every_field_to_its_own_value() -> None:
    values = _distinct_values()
    assert list(values) == [f.name for f in dataclasses.fields(Event)]  # a new field is seen
    for event in (Event(**values), Event(*values.values())):
        assert {name: getattr(event, name) for name in values} == values


def test_an_event_left_to_its_defaults_gets_fresh_mappings() -> None:
    first, second = Event("a"), Event("a")
    assert (first.args, first.provenance, first.status, first.seq) == ({}, {}, "ok", 0)
    assert first.args is not second.args and first.provenance is not second.provenance


def test_an_event_stays_frozen_comparable_and_picklable() -> None:
    event = Event(**_distinct_values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.status = "ok"  # assigning must fail
    assert dataclasses.replace(event, status="ok").status == "ok"
    assert pickle.loads(pickle.dumps(event)) == event
    assert Event("a", {"x": 1}) == Event("a", {"x": 1}) != Event("a", {"x": 2})

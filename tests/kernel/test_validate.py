"""Validation: one well-formed call from a mapping or a typed call, and the kernel's stamp."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._model import Reason, ToolCall
from callgate.kernel._registry import ToolRegistry
from callgate.kernel._validate import Stamp, now_iso, validate
from callgate.policy._schema import Policy


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.floats(min_value=-3e10, max_value=4e10, allow_nan=False),
                 st.integers(min_value=0, max_value=4_000_000_000).map(float),
                 st.integers(min_value=0, max_value=4_000_000_000).map(lambda s: s + 0.9999996)))
def test_timestamps_are_written_as_datetime_writes_them(ts: float) -> None:
    assert now_iso(ts) == datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _registry(tmp_path: Path) -> ToolRegistry:
    return ToolRegistry(Policy.model_validate({"name": "p", "version": 1}), str(tmp_path))


_PARAMETERS = st.dictionaries(
    st.text(max_size=8),
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
              st.lists(st.text(max_size=6), max_size=3)),
    max_size=4)


@settings(max_examples=300, deadline=None)
@given(parameters=_PARAMETERS, tool_class=st.sampled_from(["http", "file", "shell", "x"]))
def test_a_mapping_and_a_typed_call_validate_to_the_same_call(
        tmp_path_factory: Any, parameters: dict[str, Any], tool_class: str) -> None:
    work = tmp_path_factory.mktemp("w")
    registry = _registry(work)
    stamp = Stamp("run", 3, "agent", 1_700_000_000.25)
    raw = {"tool": "t", "tool_class": tool_class, "action": "read", "parameters": parameters}
    from_mapping = validate(raw, stamp, registry, frozenset())
    from_typed = validate(ToolCall.model_validate(raw), stamp, registry, frozenset())
    assert from_mapping == from_typed
    if isinstance(from_mapping, ToolCall):
        assert (from_mapping.id, from_mapping.sequence, from_mapping.principal) == \
            ("run:3", 3, "agent")
        assert from_mapping.timestamp == "2023-11-14T22:13:20.250000Z"


def test_a_relative_path_of_a_file_call_is_made_canonical_once(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    call = validate({"tool": "read", "tool_class": "file", "action": "read",
                     "parameters": {"path": "link/../real/x"}},
                    Stamp("r", 1, "a", 0.0), _registry(tmp_path), frozenset())
    assert isinstance(call, ToolCall)
    # "link/.." climbs from the link's target (the kernel's own resolution), not lexically
    assert call.parameters["path"] == str(tmp_path / "real" / "x")


def test_bounds_and_types_are_refused_before_any_model_is_built(tmp_path: Path) -> None:
    registry, stamp = _registry(tmp_path), Stamp("r", 1, "a", 0.0)

    def reason(raw: object) -> str:
        found = validate(raw, stamp, registry, frozenset())
        assert isinstance(found, Reason)
        return found.id

    base = {"tool": "t", "tool_class": "x", "action": "a"}
    assert reason([1]) == "input.invalid"
    assert reason({**base, "parameters": {"k": "\ud800"}}) == "input.invalid"
    assert reason({**base, "parameters": {"k": "x" * (1 << 20)}}) == "input.too-large"
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    assert reason({**base, "parameters": {"k": deep}}) == "input.too-deep"
    assert reason({**base, "parameters": {"k": 1}, "extra": 1}) == "input.invalid"
    assert reason({**base, "tool": ""}) == "input.invalid"
    assert reason({**base, "parameters": {1: "x"}}) == "input.invalid"
    assert reason({**base, "tool_class": "file", "parameters": {"path": "a\x00b"}}) == \
        "path.rejected"

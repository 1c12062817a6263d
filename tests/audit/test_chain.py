"""The pure chain: canonical JSON, record sealing and the columns derived from a record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate import AuditError
from callgate.audit import _chain
from callgate.audit._chain import (
    EVENT_COLUMNS,
    GENESIS_HASH,
    canonical_json,
    config_hash,
    event_row,
    make_record,
    seal,
    sha256_hex,
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(value=JSON)
def test_canonical_json_round_trips_and_is_a_fixed_point_of_parsing(value: Any) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text
    assert json.loads(text) == value


@settings(max_examples=100, deadline=None)
@given(pairs=st.dictionaries(st.text(), st.integers(), max_size=8))
def test_canonical_json_does_not_depend_on_key_order(pairs: dict[str, int]) -> None:
    reversed_pairs = dict(reversed(list(pairs.items())))
    assert canonical_json(pairs) == canonical_json(reversed_pairs)


def test_canonical_json_is_compact_sorted_and_keeps_unicode() -> None:
    assert canonical_json({"b": [1, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {"x": object()}, {1j: 2}])
def test_values_that_are_not_json_raise_audit_error(value: Any) -> None:
    with pytest.raises(AuditError, match="not JSON"):
        canonical_json(value)


def test_the_hash_covers_every_field_of_the_envelope() -> None:
    base = dict(
        seq=3, event_id="e", run_id="r", run_seq=2, kind="decision",
        timestamp="2026-01-01T00:00:00+00:00", prev=GENESIS_HASH, payload={"a": 1},
    )  # fmt: skip
    _, digest = seal(make_record(**base))  # type: ignore[arg-type]
    changes = {
        "seq": 4,
        "event_id": "f",
        "run_id": "s",
        "run_seq": 3,
        "kind": "result",
        "timestamp": "2026-01-01T00:00:01+00:00",
        "prev": "1" * 64,
        "payload": {"a": 2},
    }
    for key, other in changes.items():
        _, changed = seal(make_record(**(base | {key: other})))  # type: ignore[arg-type]
        assert changed != digest, key
    assert len(digest) == 64 and digest == sha256_hex(seal(make_record(**base))[0])  # type: ignore[arg-type]


def test_decision_columns_are_derived_from_the_record() -> None:
    payload = {
        "call": {
            "tool": "Bash",
            "tool_class": "shell",
            "action": "exec",
            "id": "c1",
            "taint": [{"source": "web"}, {"source": "email"}, {"source": "web"}],
        },
        "decision": {"verdict": "deny", "call_id": "c1"},
    }
    record = make_record(
        seq=1,
        event_id="e",
        run_id="r",
        run_seq=2,
        kind="decision",
        timestamp="t",
        prev=GENESIS_HASH,
        payload=payload,
    )
    _, digest = seal(record)
    row = dict(zip(EVENT_COLUMNS, event_row(record, digest, 120, 40), strict=True))
    assert row["tool"] == "Bash" and row["tool_class"] == "shell" and row["action"] == "exec"
    assert (row["verdict"], row["call_id"], row["status"]) == ("deny", "c1", None)
    assert row["taint"] == "email,web"
    assert (row["log_offset"], row["log_length"]) == (120, 40)
    assert (row["hash"], row["prev_hash"]) == (digest, GENESIS_HASH)


def test_system_events_use_the_system_tool_class() -> None:
    record = make_record(
        seq=1,
        event_id="e",
        run_id="r",
        run_seq=2,
        kind="system",
        timestamp="t",
        prev=GENESIS_HASH,
        payload={"kind": "quarantine"},
    )
    row = dict(zip(EVENT_COLUMNS, event_row(record, seal(record)[1], 0, 1), strict=True))
    assert (row["tool"], row["tool_class"], row["action"]) == (
        "_system.quarantine",
        "_system",
        "quarantine",
    )


def test_config_hash_is_order_independent() -> None:
    assert config_hash({"a": 1, "b": [2]}) == config_hash({"b": [2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


# -- the fast encoder writes the reference text ---------------------------------------------------

class _Text(str):
    """A string that sorts backwards: only the reference encoder honours that."""

    def __lt__(self, other: object) -> bool:
        return isinstance(other, str) and str.__gt__(self, other)


_ANY_FLOAT = st.floats() | st.sampled_from(
    [1e-4, 9.999999999999999e-05, 1e16, 9999999999999998.0, -0.0, 5e-324, 1e-05, 1e-7])
_EDGE_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=())) | st.sampled_from(
    ["\ud800", "a\udcff", "\x00\x1f\x7f", "\u2028\u2029", '"\\/', "é😀\uffff"])
_HOSTILE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62, max_value=2**80)
    | st.integers(max_value=-(2**62), min_value=-(2**80)) | _ANY_FLOAT | _EDGE_TEXT
    | _EDGE_TEXT.map(_Text),
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_EDGE_TEXT, inner, max_size=4)
    | st.dictionaries(st.integers() | _EDGE_TEXT.map(_Text), inner, max_size=2),
    max_leaves=25,
)


def _reference(value: Any) -> str | None:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _encoded(value: Any) -> str | None:
    try:
        return canonical_json(value)
    except AuditError:
        return None


def test_the_fast_encoder_is_installed_where_the_tests_run() -> None:
    assert _chain._orjson is not None, "the tests compare the fast encoder with the reference"


@settings(max_examples=400, deadline=None)
@given(value=_HOSTILE)
def test_canonical_json_writes_exactly_the_reference_text_or_refuses_alike(value: Any) -> None:
    assert _encoded(value) == _reference(value)


@pytest.mark.parametrize("number", [
    1e-4, 9.999999999999999e-05, 1e-05, 1.5e-07, 1e16, 9999999999999998.0, 1.2345678901234568e+20,
    -1e-05, 0.0, -0.0, 5e-324, 1.7976931348623157e308, 0.1, 1795810414.22594,
])
def test_floats_at_the_edges_of_the_fast_range_are_spelled_as_python_does(number: float) -> None:
    assert canonical_json({"x": number}) == '{"x":' + repr(number) + "}"


def test_every_ascii_and_separator_character_is_escaped_as_the_reference_does() -> None:
    for code in [*range(0x80), 0x2028, 0x2029, 0xFEFF]:
        text = {chr(code): chr(code) * 2}
        assert canonical_json(text) == _reference(text), hex(code)


@pytest.mark.parametrize("value", [
    float("nan"), [float("inf")], {"x": float("-inf")}, {"x": [1, (2, {"y": float("nan")})]},
    {"x": _Text("t"), "y": float("nan")},
])
def test_non_finite_numbers_are_refused_on_every_path(value: Any) -> None:
    with pytest.raises(AuditError, match="not JSON"):
        canonical_json(value)


def test_a_cycle_is_refused_and_not_walked_forever() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = [loop]
    with pytest.raises(AuditError, match="not JSON"):
        canonical_json(loop)


def test_without_orjson_the_reference_encoder_writes_the_same_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    value = {"b": [1, 2.5, None, True], "a": "é\x00", "c": {"z": 1e-05, "y": 2**70}}
    fast = canonical_json(value)
    monkeypatch.setattr(_chain, "_orjson", None)
    assert canonical_json(value) == fast == _reference(value)

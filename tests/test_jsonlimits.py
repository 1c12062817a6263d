"""Untrusted JSON is read with a bound on nesting, wherever it comes from, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate._errors import TraceError
from callgate._jsonlimits import MAX_JSON_DEPTH, JSONTooDeepError, loads_bounded, nesting_depth
from callgate.manifest import ManifestError
from callgate.policy._manifest import parse_manifest

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text", [DEEP, '{"a":' * 5_000 + "1" + "}" * 5_000,
                                  "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)])
def test_nesting_past_the_limit_is_refused_as_a_value_error(text: str) -> None:
    with pytest.raises(JSONTooDeepError, match="nests deeper than"):
        loads_bounded(text)


def test_nesting_at_the_limit_is_read() -> None:
    text = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert nesting_depth(loads_bounded(text), MAX_JSON_DEPTH) == MAX_JSON_DEPTH


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=20)


@given(_JSON)
def test_bounded_read_is_json_loads_for_shallow_values(value: object) -> None:
    text = json.dumps(value)
    assert loads_bounded(text) == json.loads(text)


def test_tool_call_arguments_nested_too_deep_are_a_trace_problem(tmp_path: Path) -> None:
    from callgate.abstraction import load_raw_trace

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"function": {"name": "Bash", "arguments": DEEP}}) + "\n")
    with pytest.raises(TraceError, match=r"t.jsonl:1: arguments of Bash .*nests deeper"):
        load_raw_trace(trace)


def test_a_deep_trace_line_is_a_trace_problem_naming_its_line(tmp_path: Path) -> None:
    from callgate.temporal import load_trace

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"action": "a"}\n' + DEEP + "\n")
    with pytest.raises(TraceError, match=":2"):
        load_trace(trace)


@pytest.mark.parametrize("text", ["{" + '"a":' * 0 + DEEP[:20_000] + "}",
                                  "a:\n" + "".join("  " * i + "- \n" for i in range(1, 2)) +
                                  "[" * 20_000 + "]" * 20_000])
def test_a_deep_manifest_is_a_manifest_error(text: str) -> None:
    with pytest.raises(ManifestError):
        parse_manifest(text)

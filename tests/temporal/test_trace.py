"""Reading JSONL traces: typed events, line numbers, and every malformed line reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from callgate._errors import TraceError
from callgate.temporal import MAX_TRACE_PROBLEMS, OBSERVATION_LIMIT, load_trace


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_events_are_numbered_from_one_and_keep_their_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        json.dumps({"action": "read", "args": {"path": "a"}}),
        "",
        json.dumps({"action": "send", "status": "denied", "output": "x",
                    "taint": ["web", {"source": "email", "origin": "inbox"}]}),
    )
    first, second = load_trace(path)
    assert (first.seq, first.line, first.status, dict(first.args)) == (1, 1, "ok", {"path": "a"})
    assert (second.seq, second.line, second.status) == (2, 3, "denied")
    assert second.taint == frozenset({"web", "email"})


def test_a_line_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"action": "a"}), "{not json")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    (problem,) = caught.value.problems
    assert (problem.source, problem.line) == (str(path), 2)
    assert problem.message.startswith("not JSON")


def test_unknown_event_fields_are_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"action": "a", "argz": {}, "when": 1}))
    with pytest.raises(TraceError, match=r"trace.jsonl:1: unknown event fields argz, when"):
        load_trace(path)


def test_every_malformed_line_is_reported(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        json.dumps({"args": {}}),
        json.dumps({"action": "a", "status": "maybe"}),
        json.dumps({"action": "a", "args": [1]}),
        json.dumps(["a"]),
        json.dumps({"action": "a", "taint": "web"}),
    )
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert [p.line for p in caught.value.problems] == [1, 2, 3, 4, 5]


def test_problems_are_capped(tmp_path: Path) -> None:
    path = _write(tmp_path, *(["nope"] * (MAX_TRACE_PROBLEMS + 10)))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert len(caught.value.problems) == MAX_TRACE_PROBLEMS + 1
    assert "and 10 more" in caught.value.problems[-1].message


def test_huge_outputs_are_cut_to_the_observation_bound(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"action": "cat", "output": "x" * (3 * OBSERVATION_LIMIT)}))
    (event,) = load_trace(path)
    assert len(event.output) == OBSERVATION_LIMIT


def test_non_string_outputs_are_kept_as_json_text(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"action": "q", "output": {"rows": [1, 2]}}))
    assert load_trace(path)[0].output == '{"rows":[1,2]}'


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(tmp_path / "absent.jsonl")


def test_a_byte_that_is_not_utf8_is_named_by_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b'{"action": "a"}\n{"action": "b\xff"}\n')
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    (problem,) = caught.value.problems
    assert (problem.line, problem.column, problem.message) == (2, 14, "not valid UTF-8")


def test_a_line_separator_inside_a_json_string_does_not_cut_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"action": "a", "output": "x\u2028y\u0085z"},
                                       ensure_ascii=False), json.dumps({"action": "b"}))
    first, second = load_trace(path)
    assert (first.output, second.line) == ("x\u2028y\u0085z", 2)

"""Reading AgentDojo run files: both published variants, gzipped or not, every bad line named."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from callgate import TraceError
from callgate.abstraction import message_text
from callgate.evaluation import _runs, read_runs
from tests.evaluation.conftest import DEV, LATER, run


def test_both_variants_are_read_with_their_labels() -> None:
    dev, later = list(read_runs(DEV)), list(read_runs(LATER))
    assert len(dev) == len(later) == 12
    for runs in (dev, later):
        assert {r.suite for r in runs} == {"banking", "slack", "travel", "workspace"}
        assert sum(r.violation for r in runs) == 4 and sum(not r.attacked for r in runs) == 4
    first = later[0].data["messages"][1]["content"]
    assert isinstance(first, list) and message_text(first)  # blocks, read as text


def test_a_plain_and_a_gzipped_file_give_the_same_runs(tmp_path: Path) -> None:
    zipped = tmp_path / "dev.jsonl.gz"
    with gzip.open(zipped, "wb") as handle:
        handle.write(DEV.read_bytes())
    assert [r.data for r in read_runs(zipped)] == [r.data for r in read_runs(DEV)]


@pytest.mark.parametrize(("change", "words"), [
    (lambda r: r.update(surprise=1), "unknown field surprise"),
    (lambda r: r.update(messages="none"), "messages must be a list"),
    (lambda r: r.update(security="yes"), "security has the wrong type"),
    (lambda r: r.update(duration=True), "duration has the wrong type"),
    (lambda r: r["messages"].append({"role": "robot", "content": "x"}), "role must be one of"),
    (lambda r: r["messages"].append({"role": "user", "content": "x", "name": "n"}),
     "unknown field name for a user message"),
    (lambda r: r["messages"].append({"role": "user", "content": [{"type": "image"}]}),
     "must be a block of type"),
    (lambda r: r["messages"].append({"role": "assistant", "content": None, "tool_calls": [
        {"function": "f", "args": {}, "id": "1", "extra": 1}]}), "unknown field extra"),
    (lambda r: r["messages"].append({"role": "assistant", "content": None, "tool_calls": [
        {"function": "", "args": {}}]}), "function must be a non-empty string"),
])
def test_a_malformed_run_is_named_by_its_line(write_runs: Any, change: Any, words: str) -> None:
    bad = run()
    change(bad)
    path = write_runs(run(), bad)
    with pytest.raises(TraceError) as caught:
        list(read_runs(path))
    (problem,) = caught.value.problems
    assert problem.line == 2 and words in problem.message and problem.source == str(path)


def test_every_bad_line_is_reported_and_good_lines_before_them_are_not_lost(
        write_runs: Any, tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps(run()), "not json", json.dumps(run()), "[1, 2]", ""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen = []
    with pytest.raises(TraceError) as caught:
        seen.extend(read_runs(path))
    assert len(seen) == 1
    assert [p.line for p in caught.value.problems] == [2, 4]
    assert "not JSON" in caught.value.problems[0].message


def test_a_file_that_is_not_there_or_not_gzip_inside_is_one_problem(tmp_path: Path) -> None:
    corrupt = tmp_path / "x.jsonl.gz"
    damaged = bytearray(gzip.compress(json.dumps(run()).encode() * 50))
    for at in range(12, 40):  # the deflate stream damaged: zlib's own error
        damaged[at] ^= 0x5A
    corrupt.write_bytes(bytes(damaged))
    for path in (corrupt, tmp_path / "missing.jsonl"):
        with pytest.raises(TraceError) as caught:
            list(read_runs(path))
        assert "cannot read the file" in caught.value.problems[0].message


def test_a_line_that_is_not_utf8_is_named_and_the_lines_around_it_are_read(
        tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(json.dumps(run()).encode() + b"\n\xff\xfe\x00garbage\n"
                     + json.dumps(run()).encode() + b"\n")
    with pytest.raises(TraceError) as caught:
        list(read_runs(path))
    (problem,) = caught.value.problems
    assert problem.line == 2 and "not UTF-8" in problem.message


def test_a_line_over_the_bound_is_named_without_being_held_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runs, "MAX_LINE_BYTES", 4096)
    path = tmp_path / "x.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(json.dumps(run()).encode() + b"\n" + b"x" * 3_000_000 + b"\n"
                     + json.dumps(run()).encode() + b"\n")
    with pytest.raises(TraceError) as caught:
        list(read_runs(path))
    (problem,) = caught.value.problems
    assert problem.line == 2 and "longer than 4096 bytes" in problem.message


def test_a_run_nested_beyond_the_bound_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 500 + "]" * 500 + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        list(read_runs(path))
    assert caught.value.problems[0].line == 1

"""AgentDojo's published runs: every result matched, types kept, injected outputs untrusted."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate import TraceError
from callgate._model import UNTRUSTED_SOURCES
from callgate.abstraction import abstract_agentdojo_run

DATA = Path(__file__).parents[2] / ".." / "shared" / "data" / "agentdojo"
FILES = ["claude-3-5-sonnet-20240620", "gpt-4-0125-preview", "gpt-4o-mini-2024-07-18"]
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"AgentDojo data not found at {DATA}")


def _runs(name: str) -> Iterator[dict[str, Any]]:
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _injected_lines(run: dict[str, Any]) -> list[str]:
    """Distinctive lines of the injected text (tools re-wrap whitespace, so lines are compared)."""
    return [_norm(line)[:60] for text in run["injections"].values()
            for line in text.split("\n") if len(line.strip()) >= 20]


@pytest.mark.parametrize("name", FILES)
def test_every_run_abstracts_with_every_result_matched(name: str) -> None:
    for run in _runs(name):
        calls = sum(len(m.get("tool_calls") or []) for m in run["messages"]
                    if m["role"] == "assistant")
        results = [m for m in run["messages"] if m["role"] == "tool"]
        events = abstract_agentdojo_run(run)
        # a run cut short leaves calls without a result: they come last, as errors
        assert len(events) == calls >= len(results)
        for event, result in zip(events, results, strict=False):
            assert event.action == result["tool_call"]["function"]
            assert dict(event.args) == (result["tool_call"]["args"] or {})
        assert all(e.status == "error" and e.output == "" for e in events[len(results):])


@pytest.mark.parametrize("name", FILES)
def test_every_output_holding_injected_text_is_labelled_untrusted(name: str) -> None:
    checked = 0
    for run in _runs(name):
        keys = _injected_lines(run)
        if not keys:
            continue
        results = [m for m in run["messages"] if m["role"] == "tool"]
        for event, result in zip(abstract_agentdojo_run(run), results, strict=False):
            if any(k in _norm(result["content"] or "") for k in keys):
                checked += 1
                assert event.taint & UNTRUSTED_SOURCES, (run["path"], event.action)
    assert checked > 500


def test_argument_types_are_kept() -> None:
    run = next(r for r in _runs(FILES[2]) if any(
        isinstance(v, int | float) and not isinstance(v, bool)
        for m in r["messages"] if m["role"] == "assistant"
        for c in m.get("tool_calls") or [] for v in c["args"].values()))
    events = abstract_agentdojo_run(run)
    assert any(isinstance(v, int | float) for e in events for v in e.args.values())


def test_a_result_for_an_unknown_call_is_an_error() -> None:
    run = {"path": "x", "messages": [
        {"role": "tool", "tool_call_id": "nope", "content": "", "tool_call": {}}]}
    with pytest.raises(TraceError):
        abstract_agentdojo_run(run)


def test_repeated_ids_match_the_latest_unanswered_call() -> None:
    call = {"function": "get_webpage", "args": {"url": "a"}, "id": "same"}
    call2 = {"function": "read_file", "args": {"file_path": "b"}, "id": "same"}
    run = {"messages": [
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "same", "content": "page", "tool_call": call},
        {"role": "assistant", "tool_calls": [call2]},
        {"role": "tool", "tool_call_id": "same", "content": "file", "tool_call": call2},
    ]}
    events = abstract_agentdojo_run(run)
    assert [(e.action, e.output, e.taint) for e in events] == [
        ("get_webpage", "page", frozenset({"web"})),
        ("read_file", "file", frozenset({"retrieved-doc"}))]


def test_injected_recipient_flows_from_an_untrusted_output_in_successful_attacks() -> None:
    """The injected IBAN reaches ``send_money`` through value flow, carrying its taint."""
    flagged = 0
    for run in _runs(FILES[0]):
        if run["suite_name"] != "banking" or not run["security"] or not run["injections"]:
            continue
        for event in abstract_agentdojo_run(run):
            if event.action != "send_money" or event.args.get("recipient") != (
                    "US133000000121212121212"):
                continue
            flows = [f for f in event.flows if f.arg == "recipient"]
            assert flows and event.taint & UNTRUSTED_SOURCES, run["path"]
            flagged += 1
    assert flagged >= 5

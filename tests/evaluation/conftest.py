"""Shared pieces of the evaluation tests: the sample runs and a run built inline."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "agentdojo"
DEV = DATA / "dev-sample.jsonl"
LATER = DATA / "v1_2-sample.jsonl.gz"


def sample_runs(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def run(*messages: dict[str, Any], suite: str = "banking", **fields: Any) -> dict[str, Any]:
    """A run of the development format with the given messages (after system and user)."""
    return {"suite_name": suite, "pipeline_name": "test", "user_task_id": "user_task_0",
            "injection_task_id": None, "attack_type": None, "injections": {},
            "messages": [{"role": "system", "content": "You are an assistant."},
                         {"role": "user", "content": fields.pop("prompt", "Pay my rent.")},
                         *messages],
            "utility": True, "security": True, "error": None, "duration": 1.0,
            "path": "test/run.json", **fields}


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"function": name, "args": args, "id": call_id}]}


def result(name: str, call_id: str, content: str, **args: Any) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id,
            "tool_call": {"function": name, "args": args, "id": call_id}, "error": None}


@pytest.fixture
def write_runs(tmp_path: Path) -> Any:
    def write(*runs: dict[str, Any], name: str = "runs.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
        return path
    return write

"""``--store URL``: the commands that write or read an audit log, on a PostgreSQL store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.postgres import Cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "research-agent.yaml"
CLI = [sys.executable, "-m", "callgate.cli"]
CALLS = "".join(json.dumps({"tool": "fetch", "tool_class": "http", "action": "get",
                            "parameters": {"url": url}}) + "\n"
                for url in ("https://api.github.com/repos/x/y", "https://evil.example.com/"))


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=False, cwd=ROOT)


@pytest.fixture
def store(postgres: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database's URL; the commands keep their signing key under the test's
    ``XDG_DATA_HOME``."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return postgres.new_database("cli")


def decided(store: str) -> str:
    """Decide the two calls into ``store``; the run's id."""
    done = run("decide", "--policy", str(EXAMPLE), "--store", store, stdin=CALLS)
    assert done.returncode == 0, done.stderr
    verdicts = [json.loads(line)["verdict"] for line in done.stdout.splitlines()]
    assert verdicts == ["allow", "deny"]
    runs = run("audit", "runs", "--store", store, "--json")
    assert runs.returncode == 0, runs.stderr
    (only,) = [json.loads(line) for line in runs.stdout.splitlines()]
    return str(only["run_id"])


def test_decide_writes_to_the_store_and_every_reader_reads_it_back(store: str,
                                                                   tmp_path: Path) -> None:
    run_id = decided(store)
    verified = run("audit", "verify", "--store", store)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "chain intact; anchor at sequence 4; signatures checked" in verified.stdout
    shown = run("audit", "show", "--store", store, run_id, "--json")
    assert [c["verdict"] for c in json.loads(shown.stdout)["calls"]] == ["allow", "deny"]
    tail = run("audit", "tail", "--store", store, "--json")
    assert [json.loads(line)["seq"] for line in tail.stdout.splitlines()] == [2, 3]
    spans = tmp_path / "spans.jsonl"
    assert run("audit", "export", "--store", store, "--output", str(spans)).returncode == 0
    checked = run("audit", "check-export", "--store", store, str(spans))
    assert checked.returncode == 0 and "ok: 2 spans match" in checked.stdout, checked.stderr
    replayed = run("replay", "--store", store, "--run", run_id)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_verify_on_a_store_exits_1_naming_the_edited_row(store: str) -> None:
    decided(store)
    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute("ALTER TABLE callgate.events DISABLE TRIGGER events_no_change")
        conn.execute("UPDATE callgate.events SET verdict = 'allow' WHERE seq = 3")
        conn.execute("ALTER TABLE callgate.events ENABLE TRIGGER events_no_change")
    verified = run("audit", "verify", "--store", store)
    assert verified.returncode == 1
    assert verified.stdout.startswith("BROKEN at events row 3: column verdict")


@pytest.mark.parametrize("args", [
    ["decide", "--preset", "safe-research", "--audit", "x.db", "--store", "postgresql://h/d"],
    ["audit", "verify", "x.db", "--store", "postgresql://h/d"],
    ["audit", "runs", "--store", "not-a-url"],
    ["audit", "runs"],
])
def test_a_store_and_a_file_together_or_neither_exit_2(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error:" in done.stderr

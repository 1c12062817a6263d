"""The ``callgate`` command line, run as a real subprocess."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLE

CLI = [sys.executable, "-m", "callgate.cli"]


def run(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)


CALLS = [
    {"tool": "fetch", "tool_class": "http", "action": "get",
     "parameters": {"url": "https://api.github.com/repos"}},
    {"tool": "fetch", "tool_class": "http", "action": "get",
     "parameters": {"url": "https://api.github.com.evil.com/"}},
    {"tool": "read", "tool_class": "file", "action": "read",
     "parameters": {"path": "./data/../../etc/passwd"}},
    {"tool": "write", "tool_class": "file", "action": "write", "parameters": {"path": "./out/r"}},
    {"tool": "sh", "tool_class": "shell", "action": "exec", "parameters": {"argv": ["ls"]},
     "taint": ["web"]},
]


def test_decide_prints_one_decision_per_line_and_exits_zero(workdir: Path) -> None:
    stdin = "\n".join(json.dumps(c) for c in CALLS) + "\nnot json\n"
    proc = run("decide", "--policy", str(EXAMPLE), "--audit", "a.db", stdin=stdin, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [d["verdict"] for d in lines] == ["allow", "deny", "deny", "require-approval", "deny",
                                             "deny"]
    assert lines[0]["reasons"][0]["id"] == "allow-reads"
    assert lines[4]["reasons"][0]["id"] == "deny-tainted-shell"
    assert lines[5]["reasons"][0]["id"] == "input.not-json"
    verify = run("audit", "verify", "a.db", cwd=workdir)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "chain intact" in verify.stdout


def test_audit_verify_names_the_tampered_row(workdir: Path) -> None:
    stdin = "\n".join(json.dumps(c) for c in CALLS)
    assert run("decide", "--policy", str(EXAMPLE), "--audit", "a.db", stdin=stdin,
               cwd=workdir).returncode == 0
    conn = sqlite3.connect(workdir / "a.db")
    # An attacker with the file drops the append-only triggers, edits, and puts them back.
    triggers = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("UPDATE events SET verdict = 'allow' WHERE verdict = 'deny' AND rowid = "
                  "(SELECT min(rowid) FROM events WHERE verdict = 'deny')")
    for _, sql in triggers:
        conn.execute(sql)
    conn.commit()
    conn.close()
    proc = run("audit", "verify", "a.db", cwd=workdir)
    assert proc.returncode == 1
    assert "BROKEN" in proc.stdout
    assert "events" in proc.stdout


def test_audit_verify_of_a_file_that_is_not_a_log_exits_2(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"\x00garbage" * 100)
    proc = run("audit", "verify", str(tmp_path / "junk.db"))
    assert proc.returncode == 2
    assert "error" in proc.stderr


def test_a_policy_load_error_exits_2_naming_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: 1\nrules:\n  - id: r\n    decision: maybe\n")
    proc = run("decide", "--policy", str(bad), stdin="")
    assert proc.returncode == 2
    assert f"{bad}:5:" in proc.stderr
    assert "decision" in proc.stderr


def test_policy_lint_accepts_the_example_and_warns_about_catch_alls(tmp_path: Path) -> None:
    ok = run("policy", "lint", str(EXAMPLE))
    assert ok.returncode == 0
    assert "ok:" in ok.stdout
    loose = tmp_path / "loose.yaml"
    loose.write_text(
        "name: x\nversion: 1\nprincipal: {name: a, capabilities: [{tool_class: shell}]}\n"
        "rules:\n  - {id: all, decision: allow}\n  - {id: never, decision: deny}\n")
    proc = run("policy", "lint", str(loose))
    assert proc.returncode == 0
    assert "without any constraint" in proc.stdout
    assert "never reached" in proc.stdout


def test_demo_tells_the_story_and_verifies_the_chain(tmp_path: Path) -> None:
    proc = run("demo", "--audit", str(tmp_path / "demo.db"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Traceback" not in out + proc.stderr
    assert "run quarantined" in out
    assert "chain verified" in out
    assert "deny" in out and "allow" in out


def test_decide_with_an_unreadable_audit_log_exits_2_and_leaves_it_alone(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 64)
    before = junk.read_bytes()
    proc = run("decide", "--policy", str(EXAMPLE), "--audit", str(junk),
               stdin=json.dumps(CALLS[0]) + "\n")
    assert proc.returncode == 2
    assert "error" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert junk.read_bytes() == before


def test_policy_lint_reports_a_bad_behaviour_statement_at_its_place(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: 1\nbehavior:\n  - id: s\n    rule: abs(action = )\n")
    proc = run("policy", "lint", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:5:" in proc.stderr

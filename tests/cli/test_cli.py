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


def test_policy_lint_reports_a_bad_behavior_statement_at_its_place(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: 1\nbehavior:\n  - id: s\n    rule: abs(action = )\n")
    proc = run("policy", "lint", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:5:" in proc.stderr


DEEP = 100_000


def deep_call(levels: int = DEEP) -> str:
    """A call whose parameters nest ``levels`` arrays deep, as raw JSON text."""
    return ('{"tool": "fetch", "tool_class": "http", "action": "get", "parameters": {"x": '
            + "[" * levels + "]" * levels + "}}")


def run_bytes(*args: str | bytes, stdin: bytes, cwd: Path | None = None
              ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, cwd=cwd, timeout=60,
                          check=False)


def audited_decisions(db: Path) -> list[dict[str, object]]:
    from callgate.audit import AuditStore

    with AuditStore.open(db) as store:
        assert store.verify().ok
        return [r.payload for run in store.run_ids() for r in store.records(run)
                if r.kind == "decision"]


def test_decide_denies_a_line_nested_too_deep_and_decides_the_lines_after_it(
        workdir: Path) -> None:
    lines = [json.dumps(CALLS[0]), deep_call(), "[" * DEEP + "]" * DEEP, json.dumps(CALLS[0])]
    proc = run("decide", "--policy", str(EXAMPLE), "--audit", "a.db",
               stdin="\n".join(lines) + "\n", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [d["verdict"] for d in out] == ["allow", "deny", "deny", "allow"]
    for denied, number in ((out[1], 2), (out[2], 3)):
        assert denied["reasons"][0]["id"] == "input.too-deep"
        assert denied["reasons"][0]["message"].startswith(f"line {number}: ")
    assert len(audited_decisions(workdir / "a.db")) == 4


def test_decide_denies_paths_with_invalid_utf8_audits_them_and_goes_on(workdir: Path) -> None:
    raw = (b'{"tool": "read", "tool_class": "file", "action": "read", '
           b'"parameters": {"path": "./data/\xff\xfe.txt"}}\n')
    escaped = (b'{"tool": "read", "tool_class": "file", "action": "read", '
               b'"parameters": {"path": "./data/\\udcff.txt"}}\n')
    good = json.dumps({"tool": "read", "tool_class": "file", "action": "read",
                       "parameters": {"path": "./data/notes.txt"}}).encode() + b"\n"
    proc = run_bytes("decide", "--policy", str(EXAMPLE), "--audit", "a.db",
                     stdin=raw + escaped + good, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(out) == 3
    assert out[0]["verdict"] == "deny"
    assert out[0]["reasons"][0]["id"] == "input.not-utf8"
    assert out[0]["reasons"][0]["message"].startswith("line 1: ")
    assert [r["id"] for r in out[1]["reasons"]] == ["input.invalid"]   # a lone surrogate
    assert out[2]["verdict"] == "allow"
    assert len(audited_decisions(workdir / "a.db")) == 3


def test_decide_denies_an_overlong_line_without_reading_it_whole(workdir: Path) -> None:
    from callgate.cli._common import MAX_LINE_BYTES

    huge = '{"tool": "x", "parameters": {"x": "' + "a" * MAX_LINE_BYTES + '"}}'
    proc = run("decide", "--policy", str(EXAMPLE), stdin=huge + "\n" + json.dumps(CALLS[0]),
               cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [d["verdict"] for d in out] == ["deny", "allow"]
    assert out[0]["reasons"][0]["id"] == "input.too-large"


def test_decide_with_a_deadline_no_decision_can_meet_denies_every_call(workdir: Path) -> None:
    proc = run("decide", "--policy", str(EXAMPLE), "--deadline", "1e-9",
               stdin=json.dumps(CALLS[0]) + "\n", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "deny"
    assert out["reasons"][0]["id"] == "decision.deadline"


def test_decide_refuses_a_deadline_that_is_not_positive(workdir: Path) -> None:
    proc = run("decide", "--policy", str(EXAMPLE), "--deadline", "0", stdin="", cwd=workdir)
    assert proc.returncode == 2
    assert "must be a positive number of seconds" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_exec_with_an_argument_that_is_not_utf8_is_denied_not_a_traceback(tmp_path: Path) -> None:
    builder = EXAMPLE.parent / "builder.yaml"
    proc = subprocess.run([*CLI, "exec", "--policy", str(builder), "--tool", "builder",
                           "--audit", "a.db", "--", "cat", b"/root/.ssh/\xff"],
                          capture_output=True, cwd=tmp_path, timeout=60, check=False)
    assert b"Traceback" not in proc.stderr
    assert proc.returncode == 126
    assert b"deny" in proc.stderr
    assert audited_decisions(tmp_path / "a.db")


def test_decide_refuses_a_working_directory_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "wd\udcff").mkdir()
    proc = run_bytes("decide", "--policy", str(EXAMPLE), "--working-dir", b"wd\xff",
                     stdin=json.dumps(CALLS[0]).encode() + b"\n", cwd=tmp_path)
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr
    assert b"not a UTF-8 path" in proc.stderr

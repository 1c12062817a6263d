"""``callgate run`` as a real subprocess: calls in, one JSON line out per call, exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from callgate.cli._run import MAX_OUTPUT_CHARS, bounded
from callgate.sandbox import available_backends

POLICY = """
name: runner
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: file
      actions: [read, write]
      constraints: {allowed_paths: ["./**"]}
    - tool_class: shell
      actions: [exec]
      constraints: {allowed_commands: [cat, ls]}
    - tool_class: http
      actions: [get]
rules:
  - {id: allow-all, decision: allow, reason: test}
run_state: {behavioral_rules: false}
executors:
  http: {system_dns: false}
"""


def run(tmp: Path, calls: list[Any], *extra: str, policy: str = POLICY) -> list[dict[str, Any]]:
    (tmp / "policy.yaml").write_text(policy)
    lines = "\n".join(c if isinstance(c, str) else json.dumps(c) for c in calls) + "\n"
    done = subprocess.run(
        [sys.executable, "-c", "from callgate.cli._run import run_command; run_command()",
         "--policy", str(tmp / "policy.yaml"), "--working-dir", str(tmp), *extra],
        input=lines, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_each_call_gets_one_line_with_verdict_status_and_output(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    out = run(tmp_path, [
        {"tool": "read", "tool_class": "file", "action": "read", "parameters": {"path": "a.txt"}},
        {"tool": "read", "tool_class": "file", "action": "read",
         "parameters": {"path": "/etc/passwd"}},
        "not json",
        {"tool": "get", "tool_class": "http", "action": "get",
         "parameters": {"url": "http://169.254.169.254/latest/"}},
    ])
    assert [o["line"] for o in out] == [1, 2, 3, 4]
    assert out[0]["verdict"] == "allow" and out[0]["status"] == "ok"
    assert out[0]["output"]["content"] == "hello"
    assert out[1]["verdict"] == "deny" and out[1]["status"] == "denied"
    assert out[2]["reasons"][0]["id"] == "input.not-json"
    assert out[3]["verdict"] == "deny" and out[3]["reasons"][0]["id"] == "ssrf.private-address"


def test_guards_deny_with_their_reason(tmp_path: Path) -> None:
    out = run(tmp_path, [{"tool": "get", "tool_class": "http", "action": "get",
                          "parameters": {"url": "http://" + "ab" * 12 + ".x.example/"}}])
    assert out[0]["reasons"][0]["id"] == "guard.egress.dns-label"


def test_state_file_carries_secrets_into_the_next_run(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("API_TOKEN=Zq8xK2mW9pL4vR7t\n")
    state = str(tmp_path / "state.db")
    first = run(tmp_path, [{"tool": "read", "tool_class": "file", "action": "read",
                            "parameters": {"path": ".env"}}], "--state", state)
    assert first[0]["status"] == "ok"
    second = run(tmp_path, [{"tool": "write", "tool_class": "file", "action": "write",
                             "parameters": {"path": "leak.txt", "content": "Zq8xK2mW9pL4vR7t"}}],
                 "--state", state)
    assert second[0]["reasons"][0]["id"] == "guard.secrets.fingerprint"
    assert not (tmp_path / "leak.txt").exists()


@pytest.mark.skipif(not available_backends(), reason="no bwrap or firejail on this host")
def test_shell_runs_in_the_sandbox_and_a_confined_run_is_a_deny(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hi\n")
    out = run(tmp_path, [
        {"tool": "sh", "tool_class": "shell", "action": "exec",
         "parameters": {"command": "cat a.txt"}},
        {"tool": "sh", "tool_class": "shell", "action": "exec",
         "parameters": {"command": "cat /etc/shadow"}},
    ])
    assert out[0]["status"] == "ok" and out[0]["output"]["stdout"] == "hi\n"
    assert out[1]["verdict"] == "deny" and out[1]["reasons"][0]["id"] == "sandbox.read"


def test_audit_log_records_the_run(tmp_path: Path) -> None:
    audit = tmp_path / "audit.db"
    run(tmp_path, [{"tool": "ls", "tool_class": "file", "action": "list",
                    "parameters": {"path": "."}}], "--audit", str(audit))
    assert audit.exists() and audit.stat().st_size > 0


def test_output_is_bounded_and_marked_truncated() -> None:
    shown, cut = bounded({"body": "x" * 10_000})
    assert cut and isinstance(shown, str) and len(shown) == MAX_OUTPUT_CHARS
    assert bounded({"a": 1}) == ({"a": 1}, False)


def test_a_policy_that_does_not_load_exits_2(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: x\nversion: 1\nguards: {egress: {nope: 1}}\n")
    done = subprocess.run(
        [sys.executable, "-c", "from callgate.cli._run import run_command; run_command()",
         "--policy", str(tmp_path / "bad.yaml")],
        input="", capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "nope" in done.stderr


def test_a_line_nested_too_deep_is_denied_and_the_next_line_still_runs(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    deep = 100_000
    read = {"tool": "read", "tool_class": "file", "action": "read",
            "parameters": {"path": "a.txt"}}
    lines = run(tmp_path, [read, '{"tool": "read", "parameters": {"x": ' + "[" * deep
                           + "]" * deep + "}}", read], "--audit", str(tmp_path / "a.db"))
    assert [line["line"] for line in lines] == [1, 2, 3]
    assert [line["verdict"] for line in lines] == ["allow", "deny", "allow"]
    assert lines[1]["reasons"][0]["id"] == "input.too-deep"
    assert lines[2]["status"] == "ok"


def test_an_allowed_call_without_an_executor_is_an_error_line(tmp_path: Path) -> None:
    lines = run(tmp_path, [{"tool": "q", "tool_class": "database", "action": "query",
                            "parameters": {"database": "x", "query": "select 1"}}],
                policy=POLICY.replace("    - tool_class: http\n",
                                      "    - tool_class: database\n    - tool_class: http\n"))
    assert lines[0]["verdict"] == "allow"
    assert lines[0]["status"] == "error"
    assert lines[0]["error"].startswith("executor.missing")

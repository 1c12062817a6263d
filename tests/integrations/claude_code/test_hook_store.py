"""The Claude Code hook with its audit log in PostgreSQL: ``--store URL`` (or ``CALLGATE_STORE``)
through the hook, its resident process and the service, read back by ``callgate audit``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from callgate.integrations.claude_code import hook_command, install
from tests.postgres import Cluster

CALLGATE = str(Path(sys.executable).parent / "callgate")


@pytest.fixture
def store(postgres: Cluster) -> str:
    """The URL of a fresh database of this test's own."""
    return postgres.new_database("hook")


def _env(proj: Path, **extra: str) -> dict[str, str]:
    (proj.parent / "run").mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CALLGATE_STORE"}
    return {**env, "XDG_RUNTIME_DIR": str(proj.parent / "run"),
            "XDG_DATA_HOME": str(proj.parent / "data"), "CALLGATE_HOOK_IDLE_S": "60", **extra}


def _hook(proj: Path, payload: dict[str, Any], *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CALLGATE, "hook", "claude-code", "--policy",
                           str(proj / ".callgate" / "policy.yaml"), "--state",
                           str(proj / ".callgate"), "--dir", str(proj), *extra],
                          input=json.dumps(payload), env=env or _env(proj), capture_output=True,
                          text=True, timeout=60, check=False)


def _pre(session: str, use: str, tool: str, **tool_input: Any) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": "", "cwd": "/", "tool_use_id": use,
            "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input}


def _verdict(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"])


def _audit(proj: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CALLGATE, "audit", *args], env=_env(proj), capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_hook_session_with_store_is_logged_in_postgresql_and_verifies(proj: Path,
                                                                        store: str) -> None:
    assert _verdict(_hook(proj, _pre("s1", "t1", "Bash", command="git status"),
                          "--store", store)) == "allow"
    assert _verdict(_hook(proj, _pre("s1", "t2", "Read", file_path="~/.aws/credentials"),
                          "--store", store)) == "deny"
    ended = _hook(proj, {"session_id": "s1", "transcript_path": "", "cwd": "/",
                         "hook_event_name": "SessionEnd", "reason": "other"}, "--store", store)
    assert ended.returncode == 0, ended.stderr
    assert not (proj / ".callgate" / "audit.db").exists()
    verified = _audit(proj, "verify", "--store", store)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "chain intact" in verified.stdout
    runs = _audit(proj, "runs", "--store", store, "--json")
    assert runs.returncode == 0, runs.stderr
    (run,) = [json.loads(line) for line in runs.stdout.splitlines()]
    shown = _audit(proj, "show", "--store", store, str(run["run_id"]), "--json")
    assert [c["verdict"] for c in json.loads(shown.stdout)["calls"]] == ["allow", "deny"]


def test_callgate_store_in_the_environment_stands_for_the_flag(proj: Path, store: str) -> None:
    env = _env(proj, CALLGATE_STORE=store)
    assert _verdict(_hook(proj, _pre("s2", "t1", "Glob", pattern="*.md"), env=env)) == "allow"
    runs = _audit(proj, "runs", "--store", store, "--json")
    assert runs.returncode == 0 and len(runs.stdout.splitlines()) == 1, runs.stderr


def test_the_store_password_stays_out_of_the_resident_process_title_and_its_log(
        proj: Path, store: str) -> None:
    secret = store.replace("postgres@", "postgres:pw-sekret-42@")  # the cluster trusts anyway
    env = _env(proj, CALLGATE_STORE=secret)
    assert _verdict(_hook(proj, _pre("s3", "t1", "Glob", pattern="*"), env=env)) == "allow"
    pid = (proj / ".callgate" / "daemon.pid").read_text().strip()
    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert "postgresql://" not in title
    log = (proj / ".callgate" / "hook.log").read_text()
    assert "audit log in postgresql://postgres@" in log and "sekret" not in log


def test_a_hook_naming_another_store_than_its_resident_process_is_denied(
        proj: Path, store: str) -> None:
    assert _verdict(_hook(proj, _pre("s4", "t1", "Glob", pattern="*"), "--store", store)) \
        == "allow"
    other = _hook(proj, _pre("s4", "t2", "Glob", pattern="*"))  # no store: the file log
    assert other.returncode == 2
    assert json.loads(other.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "another store" in other.stderr
    assert not (proj / ".callgate" / "audit.db").exists()


def test_a_store_that_is_not_a_postgresql_url_is_denied(proj: Path) -> None:
    done = _hook(proj, _pre("s5", "t1", "Glob", pattern="*"), "--store", "audit.db")
    assert done.returncode == 2 and "postgresql:// URL" in done.stderr


def test_an_unreachable_store_denies_the_call(proj: Path, postgres: Cluster) -> None:
    url = postgres.url.rsplit("/", 1)[0] + "/no_such_database"
    done = _hook(proj, _pre("s6", "t1", "Glob", pattern="*"), "--store", url)
    assert done.returncode == 2, done.stdout
    assert json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_init_writes_the_store_into_the_hook_command_and_warns_of_a_password(
        tmp_path: Path) -> None:
    entry = hook_command(tmp_path / "p.yaml", tmp_path / "s", None, "postgresql://db/x")
    assert entry["args"][-2:] == ["--store", "postgresql://db/x"]
    report = install(tmp_path / "settings.json", tmp_path / "state", tmp_path, policy=None,
                     store="postgresql://u:hunter2@db/x")
    assert any("password" in w for w in report.warnings)
    assert not any("hunter2" in line for line in report.lines + report.warnings)
    settings = json.loads((tmp_path / "settings.json").read_text())
    args = settings["hooks"]["PreToolUse"][0]["hooks"][0]["args"]
    assert args[args.index("--store") + 1] == "postgresql://u:hunter2@db/x"

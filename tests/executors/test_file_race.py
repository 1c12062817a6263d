"""The check-to-open race: a directory swapped for a symlink after the kernel decided.

The kernel judges the canonical path of a call; the file executor must open exactly that path.
A separate process flips a directory component of an allowed path between a real directory and
a symlink to a rule-denied directory while the kernel and the real file executor serve reads.
Every read either returns the decoy the kernel judged or is refused; the secret never comes back,
and the audit log agrees with what was returned.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate._errors import Denied
from callgate.audit import AuditStore
from callgate.executors._file import FileExecutor
from callgate.kernel._kernel import Kernel
from callgate.policy._schema import Policy

SECRET = "ssh-secret-0f9c1"
DECOY = "decoy-content"
CALLS = 3000
SECONDS = 5.0
HARD_SECONDS = 15.0
WRITE_SECONDS = 1.5

# Flips <base>/project/sw between a real directory and a symlink to <base>/home/.ssh by
# renaming whole names, so the path is always one or the other (or briefly absent).
FLIPPER = """
import os, sys
project = os.path.join(sys.argv[1], "project")
sw, held, link = (os.path.join(project, n) for n in ("sw", "sw.dir", "sw.link"))
while True:
    os.rename(sw, held)
    os.rename(link, sw)
    os.rename(sw, link)
    os.rename(held, sw)
"""


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """home/.ssh/config (the secret) and project/sw/config (the decoy), plus the flip link."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text(SECRET)
    sw = tmp_path / "project" / "sw"
    sw.mkdir(parents=True)
    (sw / "config").write_text(DECOY)
    (tmp_path / "project" / "sw.link").symlink_to(ssh)
    return tmp_path.resolve()


@pytest.fixture
def flipper(base: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The flipping process, stopped (by its own handle) when the test ends."""
    proc = subprocess.Popen([sys.executable, "-c", FLIPPER, str(base)])
    time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait(5)


def _policy(base: Path) -> Policy:
    return Policy.model_validate({
        "name": "race", "version": 1,
        "principal": {"name": "agent", "capabilities": [
            {"tool_class": "file", "actions": ["read", "write"],
             "constraints": {"allowed_paths": [f"{base}/**"]}}]},
        "rules": [
            {"id": "deny-ssh", "priority": 10, "decision": "deny",
             "match": {"tool_class": "file",
                       "parameters": {"path": {"pattern": r"(^|/)\.ssh(/|$)"}}}},
            {"id": "allow-files", "priority": 100, "decision": "allow",
             "match": {"action": ["read", "write"]}}],
        "run_state": {"behavioral_rules": False, "quarantine_after_denials": 1_000_000}})


def _read_loop(kernel: Kernel, files: FileExecutor) -> dict[str, int]:
    """Issue reads until CALLS or SECONDS; count outcomes, fail at once on the secret.

    The loop runs on (up to a hard limit) until the executor has stopped at least one call the
    kernel allowed, so the race window is known to have been hit.
    """
    counts = {"ok": 0, "denied": 0, "error": 0, "stopped": 0}
    started = time.monotonic()
    for _ in range(CALLS):
        elapsed = time.monotonic() - started
        if elapsed > HARD_SECONDS or (elapsed > SECONDS and counts["stopped"]):
            break
        call = {"tool": "read", "tool_class": "file", "action": "read",
                "parameters": {"path": "project/sw/config"}}
        try:
            result = kernel.execute(call, executor=files)
        except Denied as exc:
            assert SECRET not in str(exc.result.output if exc.result else "")
            counts["stopped" if exc.result is not None else "denied"] += 1
            continue
        assert SECRET not in str(result.output), "the rule-denied secret was read"
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status == "ok":
            assert result.output["content"] == DECOY
    return counts


def _audited_reads(db: Path, run_id: str) -> tuple[dict[str, dict[str, Any]], list[Any]]:
    with AuditStore.open(db) as store:
        records = store.records(run_id)
        assert store.verify().ok
    decisions: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.kind == "decision":
            # A call stopped while running is audited twice: allow, then the executor's deny.
            decisions.setdefault(record.payload["call"]["id"], {})[
                record.payload["decision"]["verdict"]] = record.payload
    results = [r.payload["result"] for r in records if r.kind == "result"]
    return decisions, results


def test_a_directory_swapped_for_a_symlink_never_reads_the_denied_secret(
    base: Path, flipper: subprocess.Popen[bytes]
) -> None:
    db = base / "audit.db"
    files = FileExecutor(working_dir=str(base), allowed_read=["**"], allowed_write=[])
    with Kernel(_policy(base), working_dir=base, audit=db, guards=[]) as kernel:
        counts = _read_loop(kernel, files)
        run_id = kernel.run_id
    assert flipper.poll() is None, "the flipper stopped early"
    # Reads of the decoy, decisions that saw the symlink, and allowed calls the executor stopped.
    assert counts["ok"] and counts["denied"] and counts["stopped"], counts
    decisions, results = _audited_reads(db, run_id)
    # The decoy directory has two names in turn (``sw``, and ``sw.dir`` while the flipper holds
    # it aside): an existing path is judged by the name its file has when the kernel resolves
    # it, which may be either; the executor opens the very name judged.
    decoy_paths = {f"{base}/project/sw/config", f"{base}/project/sw.dir/config"}
    returned = [r for r in results if r["status"] == "ok"]
    assert len(returned) == counts["ok"]
    for result in returned:
        assert result["output"]["content"] == DECOY
        assert result["output"]["path"] in decoy_paths
        verdicts = decisions[result["call_id"]]
        assert set(verdicts) == {"allow"}
        assert verdicts["allow"]["call"]["parameters"]["path"] == result["output"]["path"]
    for result in results:
        assert SECRET not in str(result.get("output"))
    stopped = [v for v in decisions.values() if set(v) == {"allow", "deny"}]
    assert len(stopped) == counts["stopped"]
    for verdicts in stopped:
        (reason,) = verdicts["deny"]["decision"]["reasons"]
        assert (reason["check"], reason["id"]) in {("executor", "path.symlink"),
                                                   ("executor", "path.changed")}


def test_a_write_never_lands_in_the_denied_directory_swapped_in(
    base: Path, flipper: subprocess.Popen[bytes]
) -> None:
    files = FileExecutor(working_dir=str(base), allowed_read=[], allowed_write=["**"])
    written = 0
    with Kernel(_policy(base), working_dir=base, guards=[]) as kernel:
        deadline = time.monotonic() + WRITE_SECONDS
        while time.monotonic() < deadline:
            for name in ("config", "new.txt"):  # overwrite the secret, or plant a file beside it
                call = {"tool": "write", "tool_class": "file", "action": "write",
                        "parameters": {"path": f"project/sw/{name}", "content": "PWNED"}}
                with contextlib.suppress(Denied):
                    written += kernel.execute(call, executor=files).status == "ok"
            assert (base / "home" / ".ssh" / "config").read_text() == SECRET
    assert flipper.poll() is None, "the flipper stopped early"
    assert written, "no write reached the decoy: the test did not exercise the race"
    assert sorted(p.name for p in (base / "home" / ".ssh").iterdir()) == ["config"]

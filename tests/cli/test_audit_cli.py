"""``callgate audit verify | checkpoint | keygen``, run as a real subprocess."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from callgate.audit import AuditStore
from callgate.audit._keys import read_public_key

CLI = [sys.executable, "-m", "callgate.cli", "audit"]


def run(*args: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=60,
                          check=False, errors="backslashreplace")


def two_runs(path: Path, kit: Any) -> None:
    with AuditStore.open(path) as store:
        for run_id in ("a", "b"):
            kit.start(store, run_id)
            call = kit.make_call(run_id, 1)
            store.record_decision(run_id, call, kit.allow(call))
            store.end_run(run_id)


def test_verify_with_no_flags_checks_the_anchor_and_the_signatures(
    tmp_path: Path, kit: Any
) -> None:
    two_runs(tmp_path / "a.db", kit)
    proc = run("verify", str(tmp_path / "a.db"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "chain intact; anchor at sequence 6; signatures checked" in proc.stdout


def test_verify_with_no_flags_finds_a_deleted_last_run(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    # run "b" deleted from the segment and the index alike, with the stored checkpoints
    kit.rewrite(path, [r for r in kit.records(path) if r["run_id"] != "b"])
    kit.execute(path, "DELETE FROM checkpoints")
    proc = run("verify", str(path))
    assert proc.returncode == 1
    assert "BROKEN at checkpoints row anchor" in proc.stdout
    assert "2 runs" in proc.stdout and "truncated" in proc.stdout


def test_verify_without_the_anchor_file_fails_unless_told(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    os.rename(f"{path}.anchor", tmp_path / "kept")
    assert run("verify", str(path)).returncode == 1
    assert run("verify", str(path), "--anchor", str(tmp_path / "kept")).returncode == 0
    assert run("verify", str(path), "--no-anchor").returncode == 0


def test_verify_with_another_public_key_fails(tmp_path: Path, kit: Any) -> None:
    two_runs(tmp_path / "a.db", kit)
    assert run("keygen", str(tmp_path / "other.key")).returncode == 0
    proc = run("verify", str(tmp_path / "a.db"), "--public-key", str(tmp_path / "other.key.pub"))
    assert proc.returncode == 1 and "not the given key" in proc.stdout


def test_keygen_creates_a_private_key_only_its_owner_reads_and_prints_the_public_key(
    tmp_path: Path,
) -> None:
    key = tmp_path / "signing.key"
    proc = run("keygen", str(key))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert proc.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    assert proc.stdout == Path(f"{key}.pub").read_text()
    before = key.read_bytes()
    again = run("keygen", str(key))
    assert again.returncode == 0 and "exists, kept" in again.stderr
    assert key.read_bytes() == before and again.stdout == proc.stdout
    assert len(read_public_key(f"{key}.pub")) == 32


def test_checkpoint_moves_the_anchor_and_refuses_a_tampered_log(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "a")
    proc = run("checkpoint", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint at sequence 1 (1 runs)" in proc.stdout
    kit.rewrite(path, [])  # every event gone, from the segment and the index
    refused = run("checkpoint", str(path))
    assert refused.returncode == 2 and "does not match its anchor" in refused.stderr


def test_a_log_whose_name_is_not_utf8_is_verified_and_named_without_a_traceback(
    tmp_path: Path, kit: Any
) -> None:
    name = os.fsdecode(b"log-\xff.db")
    two_runs(tmp_path / name, kit)
    proc = run("verify", name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    missing = run("verify", os.fsdecode(b"nope-\xfe.db"), cwd=tmp_path)
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr and "nope-" in missing.stderr


def test_an_export_holding_line_separators_checks_against_its_log(
        tmp_path: Path, kit: Any) -> None:
    # U+2028 and U+0085 are line ends to str.splitlines, not to a JSON Lines file
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "a")
        call = kit.make_call("a", 1, tool="fetch\u2028evil\x85x").model_copy(
            update={"parameters": {"url": "https://example.org/\u2028\u2029"}})
        store.record_decision("a", call, kit.allow(call))
        store.end_run("a")
    spans = tmp_path / "spans.jsonl"
    exported = run("export", str(path), "--include-arguments", "--output", str(spans))
    assert exported.returncode == 0, exported.stderr
    assert "\u2028" in spans.read_text(encoding="utf-8")
    checked = run("check-export", str(path), str(spans))
    assert checked.returncode == 0, checked.stdout + checked.stderr

"""Checkpoints by default: a deleted tail or a deleted run is found by a plain verify.

The attacker here can write the database (drops the triggers, deletes, puts them back) and the
segment, but not the anchor file beside them, which is the threat model of docs/audit.md.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from callgate import AuditError
from callgate.audit import AuditStore, verify_file
from callgate.audit._anchor import advance_anchor, read_anchor


def two_runs(path: Path, kit: Any, *, end_b: bool = True) -> None:
    """Run "a" (5 events, ended) then run "b" (4 events, ended unless told otherwise)."""
    with AuditStore.open(path) as store:
        for run in ("a", "b"):
            kit.start(store, run)
            for n in range(3 if run == "a" else 2):
                call = kit.make_call(run, n)
                store.record_decision(run, call, kit.allow(call))
            if run == "a" or end_b:
                store.end_run(run)


def delete_run(kit: Any, path: Path, run: str, *, checkpoints: bool = False) -> None:
    """Delete a run from the segment and the index alike, leaving both consistent."""
    kit.rewrite(path, [r for r in kit.records(path) if r["run_id"] != run])
    if checkpoints:
        kit.execute(path, "DELETE FROM checkpoints")


def test_a_new_log_has_a_private_key_a_public_key_and_an_anchor(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    AuditStore.open(path).close()
    key, public, anchor = (Path(f"{path}{s}") for s in (".key", ".key.pub", ".anchor"))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes() and b"PUBLIC KEY" in public.read_bytes()
    found = read_anchor(anchor)
    assert found is not None and found.seq == 0


def test_deleting_the_last_run_is_found_by_a_plain_verify(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    delete_run(kit, path, "b")
    report = verify_file(path)
    assert not report.ok and report.table == "checkpoints"
    assert "truncated" in str(report.problem) and "2 runs" in str(report.problem)


def test_deleting_the_last_run_and_every_checkpoint_is_found_by_the_anchor(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    delete_run(kit, path, "b", checkpoints=True)
    report = verify_file(path)
    assert (report.ok, report.table, report.row) == (False, "checkpoints", "anchor")
    assert "truncated" in str(report.problem)


def test_truncating_the_last_events_is_found(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    records = kit.records(path)
    kit.rewrite(path, records[:-2])  # drop b's last decision and its run-end, fix the index
    kit.execute(path, "DELETE FROM checkpoints WHERE seq > 7")
    report = verify_file(path)
    assert (report.ok, report.row) == (False, "anchor")


def test_deleting_a_whole_earlier_run_and_rehashing_is_found(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    kit.rewrite(path, [r for r in kit.records(path) if r["run_id"] != "a"])
    kit.execute(path, "DELETE FROM checkpoints")
    report = verify_file(path)
    assert (report.ok, report.row) == (False, "anchor")
    assert "2 runs" in str(report.problem)


def test_an_older_anchor_put_back_is_reported(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    anchor = Path(f"{path}.anchor")
    with AuditStore.open(path) as store:
        kit.start(store, "a")
        store.end_run("a")
        old = anchor.read_bytes()
        kit.start(store, "b")
        store.end_run("b")
    anchor.write_bytes(old)
    report = verify_file(path)
    assert (report.ok, report.row) == (False, "anchor")
    assert "older" in str(report.problem)


def test_the_anchor_never_moves_back(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "a")
        first = store.checkpoint()
        store.end_run("a")
        newest = read_anchor(f"{path}.anchor")
        assert newest is not None and newest.seq == 2
        assert not advance_anchor(f"{path}.anchor", first, lambda seq: None)
    assert read_anchor(f"{path}.anchor") == newest


def test_concurrent_checkpoints_leave_the_newest_anchor(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    stores = [AuditStore.open(path, checkpoint_every=3) for _ in range(3)]
    barrier = threading.Barrier(3)

    def agent(index: int) -> None:
        store, run = stores[index], f"r{index}"
        barrier.wait()
        kit.start(store, run)
        for n in range(30):
            call = kit.make_call(run, n)
            store.record_decision(run, call, kit.allow(call))
        store.end_run(run)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    head = stores[0].head()[0]
    for store in stores:
        store.close()
    anchor = read_anchor(f"{path}.anchor")
    assert anchor is not None and anchor.seq == head == 3 * 32
    assert verify_file(path).ok


def test_a_writer_refuses_a_log_that_no_longer_matches_its_anchor(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    delete_run(kit, path, "b", checkpoints=True)
    anchor = Path(f"{path}.anchor").read_bytes()
    with pytest.raises(AuditError, match="does not match its anchor"):
        AuditStore.open(path)
    assert Path(f"{path}.anchor").read_bytes() == anchor  # the evidence stays


def test_a_missing_anchor_fails_verify_unless_not_required(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    two_runs(path, kit)
    os.unlink(f"{path}.anchor")
    report = verify_file(path)
    assert (report.ok, report.row) == (False, "anchor")
    assert "no anchor" in str(report.problem)
    assert verify_file(path, require_anchor=False).ok


def test_an_anchor_kept_elsewhere_is_used_by_path(tmp_path: Path, kit: Any) -> None:
    path, safe = tmp_path / "a.db", tmp_path / "safe"
    safe.mkdir()
    with AuditStore.open(path, anchor_path=safe / "anchor", key_path=safe / "key") as store:
        kit.start(store, "a")
        store.end_run("a")
    assert not Path(f"{path}.anchor").exists() and not Path(f"{path}.key").exists()
    delete_run(kit, path, "a", checkpoints=True)
    report = verify_file(path, anchor_path=safe / "anchor")
    assert (report.ok, report.row) == (False, "anchor")


def test_a_signing_key_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    AuditStore.open(path).close()
    os.chmod(f"{path}.key", 0o644)
    with pytest.raises(AuditError, match="chmod 600"):
        AuditStore.open(path)


def test_stores_created_at_once_share_one_key(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    barrier = threading.Barrier(4)
    keys: list[bytes | None] = []

    def opener() -> None:
        barrier.wait()
        with AuditStore.open(path) as store:
            keys.append(store.public_key())

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 4 and len(set(keys)) == 1
    assert verify_file(path).ok


def test_checkpoints_off_writes_no_key_and_no_anchor(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path, checkpoints=False) as store:
        kit.start(store, "a")
        store.end_run("a")
        assert store.checkpoints() == []
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) \
        == ["a.db", "a.db.log"]
    shutil.copyfile(path, tmp_path / "b.db")
    shutil.copyfile(f"{path}.log", tmp_path / "b.db.log")
    assert verify_file(tmp_path / "b.db", require_anchor=False).ok

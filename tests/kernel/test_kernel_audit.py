"""The kernel and its audit log: decisions written before execution, failures deny."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from callgate import Denied
from callgate.audit import AuditStore
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy
from callgate.testing import call, reason_ids


def test_the_decision_is_in_the_log_before_the_executor_runs(example_policy: LoadedPolicy,
                                                             workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    seen_kinds: list[list[str]] = []

    def executor(_: object) -> str:
        with AuditStore.open(db) as reader:
            seen_kinds.append([r.kind for r in reader.records(k.run_id)])
        return "page"

    k.register_executor("http", executor)
    k.execute(call("http", "get", url="https://api.github.com/"))
    k.close()
    assert seen_kinds == [["run-start", "decision"]]
    with AuditStore.open(db) as store:
        kinds = [r.kind for r in store.records(k.run_id)]
        assert kinds == ["run-start", "decision", "result", "run-end"]
        assert store.verify().ok


def test_denials_and_quarantine_are_audited(example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    with Kernel(example_policy, working_dir=workdir, audit=db) as k:
        for _ in range(5):
            k.check(call("http", "post", url="https://x.com"))
        run = k.run_id
    with AuditStore.open(db) as store:
        records = store.records(run)
    decisions = [r for r in records if r.kind == "decision"]
    assert len(decisions) == 5
    systems = [r.payload for r in records if r.kind == "system"]
    assert any("run.denial-threshold" in str(p) for p in systems)


def test_a_failed_audit_write_denies(example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    k.register_executor("http", lambda c: "page")
    # Another connection holds the write lock: the kernel cannot append, so it must deny.
    blocker = sqlite3.connect(db, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        store = k._audit
        assert store is not None
        store._conn.execute("PRAGMA busy_timeout = 0")
        with pytest.raises(Denied) as info:
            k.execute(call("http", "get", url="https://api.github.com/"))
        assert reason_ids(info.value.decision) == ["audit.write-failed"]
    finally:
        blocker.rollback()
        blocker.close()
    with AuditStore.open(db) as store:
        assert store.verify().ok


def test_every_audit_event_carries_the_manifest_in_force(example_policy: LoadedPolicy,
                                                         workdir: Path) -> None:
    from callgate import ToolPolicy

    db = workdir / "audit.db"
    with Kernel(example_policy, working_dir=workdir, audit=db) as k:
        first = k.manifest_hash
        k.check(call("http", "get", url="https://api.github.com/"))

        @k.tool(policy=ToolPolicy(filesystem={"read": ["./data/**"]}))  # type: ignore[arg-type]
        def peek(path: str) -> str:
            return "x"

        second = k.manifest_hash
        k.check(call("http", "get", url="https://api.github.com/"))
        run = k.run_id
    assert first != second
    with AuditStore.open(db) as store:
        hashes = [r.payload["manifest_hash"] for r in store.records(run)]
    assert hashes[:2] == [first, first]
    assert hashes[2:] == [second] * (len(hashes) - 2)

"""The SQLite audit store: round trips, runs, atomic writes, bad files, crashes, threads."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from callgate import AuditError, ToolResult
from callgate.audit import GENESIS_HASH, AuditStore, verify_file


def count_events(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


def test_appended_events_read_back_in_order_with_their_payloads(tmp_path: Path, kit: Any) -> None:
    with AuditStore.open(tmp_path / "a.db") as store:
        kit.start(store, "r1")
        call = kit.make_call("r1", 1, taint=("web",))
        seq = store.record_decision("r1", call, kit.allow(call))
        result_seq = store.record_result("r1", ToolResult(call_id=call.id, status="ok", output=7))
        sys_seq = store.record_system("r1", "quarantine", {"rule": "x", "at": (1, 2)})
        store.end_run("r1")
        records = store.records("r1")
    assert (seq, result_seq, sys_seq) == (2, 3, 4)
    assert [r.kind for r in records] == ["run-start", "decision", "result", "system", "run-end"]
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert records[0].payload["principal"] == "agent"
    assert records[1].payload["call"]["parameters"] == {"url": "https://example.org/1", "n": 1}
    assert records[1].payload["decision"]["verdict"] == "allow"
    assert records[2].payload["result"]["output"] == 7
    assert records[3].payload == {"kind": "quarantine", "data": {"rule": "x", "at": [1, 2]},
                                  "manifest_hash": records[0].payload["manifest_hash"]}
    assert all(len(r.hash) == 64 and len(r.id) == 32 for r in records)
    assert len({r.id for r in records}) == 5


def test_every_event_carries_the_manifest_in_force_across_a_reopen(tmp_path: Path,
                                                                   kit: Any) -> None:
    with AuditStore.open(tmp_path / "a.db") as store:
        kit.start(store, "r1")
        first = store.records("r1")[0].payload["manifest_hash"]
        store.record_system("r1", "manifest", {"sha256": "f" * 64})
    with AuditStore.open(tmp_path / "a.db") as store:
        call = kit.make_call("r1", 1)
        store.record_decision("r1", call, kit.allow(call))
        records = store.records("r1")
        assert store.verify().ok
    # the manifest event itself already speaks under the manifest it announces
    assert [r.payload["manifest_hash"] for r in records] == [first, "f" * 64, "f" * 64]


def test_denormalised_columns_are_queryable(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT tool, tool_class, action, verdict, call_id, taint FROM events"
        " WHERE kind = 'decision' ORDER BY seq"
    ).fetchall()
    system = conn.execute("SELECT tool, tool_class, action FROM events WHERE kind = 'system'")
    run = conn.execute(
        "SELECT principal, event_count, ended_at IS NOT NULL FROM runs WHERE run_id = 'a'"
    ).fetchone()
    assert rows[0] == ("fetch", "http", "get", "allow", "a-c1", "rag,web")
    assert rows[1][3:5] == ("deny", "b-c2")
    assert system.fetchall() == [("_system.quarantine", "_system", "quarantine")]
    assert run == ("agent", 6, 1)
    conn.close()


def test_run_ids_lists_runs_in_start_order(tmp_path: Path, kit: Any) -> None:
    with AuditStore.open(tmp_path / "a.db") as store:
        kit.populate(store)
        assert store.run_ids() == ["a", "b"]
        assert store.records("nope") == []


def test_events_for_unknown_ended_or_duplicate_runs_are_refused(tmp_path: Path, kit: Any) -> None:
    with AuditStore.open(tmp_path / "a.db") as store:
        call = kit.make_call("r1", 1)
        with pytest.raises(AuditError, match="never started"):
            store.record_decision("r1", call, kit.allow(call))
        kit.start(store, "r1")
        with pytest.raises(AuditError, match="already started"):
            kit.start(store, "r1")
        with pytest.raises(AuditError, match="belongs to run"):
            store.record_decision("r2", call, kit.allow(call))
        store.end_run("r1")
        with pytest.raises(AuditError, match="has ended"):
            store.record_decision("r1", call, kit.allow(call))
        assert store.head()[0] == 2
        assert store.verify().ok


def test_reopening_continues_the_chain_and_open_runs(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
        head = store.head()
    with AuditStore.open(path) as store:
        assert store.head() == head
        call = kit.make_call("b", 9)
        assert store.record_decision("b", call, kit.allow(call)) == head[0] + 1
        store.end_run("b")
        with pytest.raises(AuditError, match="has ended"):
            store.end_run("a")
        assert store.verify().ok


def test_an_empty_log_has_the_genesis_head_and_verifies(tmp_path: Path) -> None:
    with AuditStore.open(tmp_path / "a.db", durability="fsync") as store:
        assert store.head() == (0, GENESIS_HASH)
        report = store.verify()
    # the two meta rows and the checkpoint of the empty chain made at creation
    assert report.ok and report.checked == 3
    assert report.anchor == 0 and report.signatures


def test_a_failure_inside_the_transaction_rolls_back_the_whole_append(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "r1")
        head = store.head()
        # The event INSERT succeeds, then the runs UPDATE of the same transaction fails.
        saboteur = sqlite3.connect(path, isolation_level=None)
        saboteur.execute(
            "CREATE TRIGGER boom BEFORE UPDATE ON runs"
            " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        call = kit.make_call("r1", 1)
        with pytest.raises(AuditError, match="disk on fire") as info:
            store.record_decision("r1", call, kit.allow(call))
        assert isinstance(info.value.__cause__, sqlite3.Error)
        assert count_events(path) == 1
        assert store.head() == head
        saboteur.execute("DROP TRIGGER boom")
        saboteur.close()
        assert store.record_decision("r1", call, kit.allow(call)) == 2
        assert store.verify().ok


def test_a_read_only_file_refuses_writes_and_stays_intact(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
        head = store.head()
    with AuditStore.open(path, read_only=True) as store:
        call = kit.make_call("b", 9)
        with pytest.raises(AuditError, match="readonly"):
            store.record_decision("b", call, kit.allow(call))
        assert store.head() == head
        assert len(store.records("b")) == 3
    assert count_events(path) == head[0]
    assert verify_file(path).ok


def test_two_stores_on_one_file_interleave_into_one_unforked_chain(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as first, AuditStore.open(path) as second:
        kit.start(first, "r1")
        kit.start(second, "r2")  # second was behind: it catches up instead of failing
        for n in range(1, 7):
            store, run = (first, "r1") if n % 2 else (second, "r2")
            call = kit.make_call(run, n)
            assert store.record_decision(run, call, kit.allow(call)) == n + 2
        first.end_run("r1")
        second.end_run("r2")
        assert first.head() == second.head()
        report = first.verify()
        runs = {run: [r.kind for r in first.records(run)] for run in ("r1", "r2")}
    assert report.ok, str(report)
    assert runs == {run: ["run-start", "decision", "decision", "decision", "run-end"]
                    for run in ("r1", "r2")}


def test_a_writer_that_was_behind_still_refuses_events_of_a_run_another_ended(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as first, AuditStore.open(path) as second:
        kit.start(first, "r1")
        first.end_run("r1")
        call = kit.make_call("r1", 1)
        with pytest.raises(AuditError, match="has ended"):
            second.record_decision("r1", call, kit.allow(call))
        with pytest.raises(AuditError, match="already started"):
            kit.start(second, "r1")
        assert second.verify().ok


def test_a_full_disk_raises_audit_error_and_the_store_works_again_afterwards(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "r1")
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is now full
        head = store.head()
        big = ToolResult(call_id="c", status="ok", output="x" * 200_000)
        for _ in range(5):  # the fifth failure is no different from the first
            with pytest.raises(AuditError, match="full"):
                store.record_result("r1", big)
            with pytest.raises(AuditError, match="full"):
                store.record_system("r1", "quarantine", {"rule": "r", "pad": "y" * 100_000})
        assert store.head() == head
        store._conn.execute("PRAGMA max_page_count = 1073741823")  # space again
        assert store.record_result("r1", big) == head[0] + 1
        store.end_run("r1")
        assert store.verify().ok


_APPENDER = textwrap.dedent(
    """
    import sys
    from callgate import Decision, ToolCall
    from callgate.audit import AuditStore

    path, run, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with AuditStore.open(path, checkpoint_every=7) as store:
        store.start_run(run, principal="p", policy_name="x", manifest_hash="m", config={})
        for n in range(count):
            call = ToolCall(tool="t", tool_class="file", action="read", id=f"{run}-{n}",
                            run_id=run)
            store.record_decision(run, call, Decision(verdict="deny", call_id=call.id))
        store.end_run(run)
    """
)


def test_writer_processes_appending_to_one_file_leave_one_verified_chain(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    AuditStore.open(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), f"p{i}", "60"],
                         stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], errors
    report = verify_file(path)
    assert report.ok, str(report)
    with AuditStore.open(path, read_only=True) as store:
        assert store.head()[0] == 3 * 62
        assert sorted(store.run_ids()) == ["p0", "p1", "p2"]
        assert all(len(store.records(f"p{i}")) == 62 for i in range(3))
        newest = max(cp.seq for cp in store.checkpoints())
    assert newest == 3 * 62 and report.anchor == newest  # the last run's end moved the anchor


def test_the_triggers_refuse_edits_through_plain_sql(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
    conn = sqlite3.connect(path)
    for sql in ("UPDATE events SET verdict = 'allow'", "DELETE FROM events WHERE seq = 3"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql)
    conn.close()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is a text file, not a database" * 200, "not a SQLite database"),
        (b"SQLite format 3\x00" + b"\xff" * 8000, "is unreadable or corrupt"),
    ],
)
def test_a_file_that_is_not_an_audit_log_raises_audit_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(content)
    with pytest.raises(AuditError, match=message):
        AuditStore.open(path)
    with pytest.raises(AuditError):
        verify_file(path)


def test_another_sqlite_database_is_not_taken_for_an_audit_log(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE events (x)")
    conn.commit()
    conn.close()
    with pytest.raises(AuditError, match="not a callgate audit log"):
        AuditStore.open(path)


def test_a_log_with_corrupt_pages_raises_audit_error(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
    data = bytearray(path.read_bytes())
    data[4096:] = b"\x5a" * (len(data) - 4096)  # every page after the schema page
    path.write_bytes(bytes(data))
    with pytest.raises(AuditError, match="is unreadable or corrupt: database disk image"):
        AuditStore.open(path)
    with pytest.raises(AuditError, match="malformed"):
        verify_file(path)


def test_a_directory_or_missing_file_raises_audit_error(tmp_path: Path) -> None:
    with pytest.raises(AuditError):
        AuditStore.open(tmp_path)
    with pytest.raises(AuditError, match="no audit log"):
        verify_file(tmp_path / "missing.db")
    with pytest.raises(AuditError, match="durability"):
        AuditStore.open(tmp_path / "a.db", durability="sometimes")  # type: ignore[arg-type]


def test_a_closed_store_refuses_use(tmp_path: Path, kit: Any) -> None:
    store = AuditStore.open(tmp_path / "a.db")
    store.close()
    store.close()
    with pytest.raises(AuditError, match="closed"):
        kit.start(store, "r1")
    with pytest.raises(AuditError, match="closed"):
        store.verify()


def test_concurrent_threads_get_distinct_consecutive_sequences(tmp_path: Path, kit: Any) -> None:
    seen: list[int] = []
    guard = threading.Lock()
    with AuditStore.open(tmp_path / "a.db") as store:

        def agent(name: str) -> None:
            kit.start(store, name)
            for n in range(40):
                call = kit.make_call(name, n)
                seq = store.record_decision(name, call, kit.allow(call))
                with guard:
                    seen.append(seq)
            store.end_run(name)

        threads = [threading.Thread(target=agent, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        report = store.verify()
        lengths = {run: len(store.records(run)) for run in store.run_ids()}
    assert report.ok, str(report)
    assert len(set(seen)) == 160
    assert store.head()[0] == 4 * 42
    assert lengths == {f"t{i}": 42 for i in range(4)}


_WRITER = textwrap.dedent(
    """
    import sys
    from callgate import Decision, ToolCall
    from callgate.audit import AuditStore

    store = AuditStore.open(sys.argv[1], durability=sys.argv[2])
    store.start_run("crash", principal="p", policy_name="x", manifest_hash="m", config={})
    n = 0
    while True:
        n += 1
        call = ToolCall(tool="t", tool_class="file", action="read", id=f"c{n}", run_id="crash")
        seq = store.record_decision("crash", call, Decision(verdict="deny", call_id=call.id))
        print(seq, flush=True)
    """
)


@pytest.mark.parametrize("durability", ["normal", "fsync"])
def test_a_killed_writer_leaves_every_committed_decision_readable(
    tmp_path: Path, durability: str
) -> None:
    path = tmp_path / "a.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), durability],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acknowledged = [int(proc.stdout.readline()) for _ in range(60)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    with AuditStore.open(path) as store:
        report = store.verify()
        stored = {r.seq for r in store.records("crash") if r.kind == "decision"}
        assert report.ok, str(report)
        assert set(acknowledged) <= stored
        store.end_run("crash")  # the run can still be closed after the crash
        assert store.verify().ok


def test_stores_opening_a_new_file_at_once_agree_on_one_schema(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        barrier.wait()
        try:
            AuditStore.open(path).close()
        except BaseException as exc:  # collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert verify_file(path).ok

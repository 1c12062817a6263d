"""The audit store: round trips, runs, the segment and its index, bad files, crashes, threads."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate import AuditError, ToolResult
from callgate.audit import GENESIS_HASH, AuditStore, _store, verify_file


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
    # the two meta rows, the index's position and the checkpoint of the empty chain
    assert report.ok and report.checked == 4
    assert report.anchor == 0 and report.signatures


def test_an_index_batch_that_fails_loses_nothing_and_the_next_one_catches_up(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path, index_every=1) as store:
        kit.start(store, "r1")
        # The batch's event INSERT succeeds, then its runs UPDATE fails: none of it is kept.
        saboteur = sqlite3.connect(path, isolation_level=None)
        saboteur.execute(
            "CREATE TRIGGER boom BEFORE UPDATE ON runs"
            " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        call = kit.make_call("r1", 1)
        # the segment has the decision: the append succeeds, the index lags behind
        assert store.record_decision("r1", call, kit.allow(call)) == 2
        assert count_events(path) == 1
        with pytest.raises(AuditError, match="disk on fire") as info:
            store.records("r1")  # a read indexes first, and says why it cannot
        if _store.__file__.endswith(".py"):  # the compiled build chains no cause (docs/kernel.md)
            assert isinstance(info.value.__cause__, sqlite3.Error)
        assert count_events(path) == 1
        saboteur.execute("DROP TRIGGER boom")
        saboteur.close()
        assert [r.seq for r in store.records("r1")] == [1, 2]
        assert count_events(path) == 2
        assert store.verify().ok


def test_a_segment_that_cannot_grow_fails_the_append_and_keeps_the_chain(
    tmp_path: Path, kit: Any
) -> None:
    import resource

    path = tmp_path / "a.db"
    segment = Path(f"{path}.log")
    with AuditStore.open(path) as store:
        kit.start(store, "r1")
        head, size = store.head(), segment.stat().st_size
        limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        big = ToolResult(call_id="c", status="ok", output="x" * 200_000)
        try:
            # a file may not grow past its size now: the disk is full for the segment
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, limits[1]))
            for _ in range(3):  # the third failure is no different from the first
                with pytest.raises(AuditError, match="cannot append"):
                    store.record_result("r1", big)
            assert store.head() == head
            assert segment.stat().st_size == size  # the partial line was cut back
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limits)
            signal.signal(signal.SIGXFSZ, previous)
        assert store.record_result("r1", big) == head[0] + 1
        store.end_run("r1")
        assert store.verify().ok


def test_a_short_write_is_completed_and_the_line_is_whole(tmp_path: Path, kit: Any) -> None:
    real = os.write
    shorts: list[int] = []

    def short_first(fd: int, data: Any) -> int:
        if not shorts:  # the first write of the append takes 7 bytes only
            shorts.append(len(data))
            return real(fd, bytes(data[:7]))
        return real(fd, data)

    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "r1")
        with mock.patch.object(os, "write", short_first):
            seq = store.record_result("r1", ToolResult(call_id="c", status="ok", output="x" * 99))
        assert shorts and shorts[0] > 7
        assert [r.seq for r in store.records("r1")][-1] == seq
        store.end_run("r1")
        assert store.verify().ok
    assert verify_file(path).ok


def test_a_read_only_file_refuses_writes_and_stays_intact(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
        head = store.head()
    with AuditStore.open(path, read_only=True) as store:
        call = kit.make_call("b", 9)
        with pytest.raises(AuditError, match="read-only"):
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


def test_a_full_disk_for_the_index_fails_no_append_and_the_index_catches_up(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path, index_every=1) as store:
        kit.start(store, "r1")
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the index's disk is full
        head = store.head()
        result = ToolResult(call_id="c", status="ok", output="x")
        for n in range(1, 301):  # the index rows fill the pages left; no append fails
            assert store.record_result("r1", result) == head[0] + n
        with pytest.raises(AuditError, match="full"):
            store.run_ids()
        store._conn.execute("PRAGMA max_page_count = 1073741823")  # space again
        store.end_run("r1")
        assert len(store.records("r1")) == 302
        assert store.verify().ok


@pytest.mark.interpreted
def test_a_long_unindexed_tail_is_indexed_in_bounded_stretches(
    tmp_path: Path, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "_READ_BACK_BYTES", 2048)  # a few records per transaction
    monkeypatch.setattr(_store, "_MAX_PENDING", 4)  # most records must be read back
    path = tmp_path / "a.db"
    reads: list[int] = []
    with AuditStore.open(path, index_every=10_000) as store:
        real = store._read_back

        def counted(start: int, stop: int) -> Any:
            reads.append(stop - start)
            return real(start, stop)

        monkeypatch.setattr(store, "_read_back", counted)
        kit.start(store, "r1")
        result = ToolResult(call_id="c", status="ok", output="x" * 5000)  # longer than a stretch
        for _ in range(3):
            store.record_result("r1", result)
        for _ in range(60):
            store.record_result("r1", ToolResult(call_id="c", status="ok", output="y"))
        assert len(store.records("r1")) == 64  # the read indexes everything first
        assert store.verify().ok
    assert len(reads) > 3 and min(reads) <= 2048  # several stretches, not one read of the tail


@pytest.mark.interpreted
def test_a_failing_index_is_retried_once_a_batch_not_on_every_append(
    tmp_path: Path, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path, index_every=8) as store:
        kit.start(store, "r1")
        tries: list[int] = []

        def failing() -> None:
            tries.append(1)
            raise AuditError("the index is locked")

        monkeypatch.setattr(store, "_index", failing)
        for _ in range(80):
            store.record_result("r1", ToolResult(call_id="c", status="ok", output="z"))
        assert len(tries) == 10
        monkeypatch.undo()
        assert len(store.records("r1")) == 81
        assert store.verify().ok


def test_a_writer_that_holds_the_log_too_long_fails_the_append_not_hangs_it(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "r1")
        head = store.head()
        assert store._segment is not None
        store._segment.lock_timeout = 0.05
        holder = subprocess.Popen(  # another process (stopped, hung) holds the lock
            [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1]);"
             " fcntl.flock(f, fcntl.LOCK_EX); print(flush=True); time.sleep(60)",
             f"{path}.log"], stdout=subprocess.PIPE)
        try:
            assert holder.stdout is not None and holder.stdout.readline()
            with pytest.raises(AuditError, match="locked by another writer"):
                store.record_result("r1", ToolResult(call_id="c", status="ok"))
        finally:
            holder.kill()
            holder.communicate()
        assert store.head() == head  # nothing was written
        assert store.record_result("r1", ToolResult(call_id="c", status="ok")) == head[0] + 1
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


def test_a_torn_tail_is_cut_by_the_next_writer_and_never_read(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.start(store, "r1")
    segment = Path(f"{path}.log")
    whole = segment.read_bytes()
    with segment.open("ab") as handle:
        handle.write(b'{"id":"an append killed inside write()')
    assert verify_file(path).ok  # readers leave the torn tail out
    with AuditStore.open(path, read_only=True) as reader:
        assert [r.kind for r in reader.records("r1")] == ["run-start"]
    with AuditStore.open(path) as store:  # a writer cuts it off before appending
        call = kit.make_call("r1", 1)
        store.record_decision("r1", call, kit.allow(call))
        assert segment.read_bytes().startswith(whole)
        assert b"killed" not in segment.read_bytes()
        assert store.verify().ok


def test_the_index_is_rebuilt_from_the_segment(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
        head = store.head()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with AuditStore.open(path) as store:  # a new index; the segment and the anchor remain
        assert store.head() == head
        assert [len(store.records(run)) for run in ("a", "b")] == [6, 3]
        assert store.verify().ok


def test_a_writer_refuses_a_segment_shorter_than_its_index(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        kit.populate(store)
    segment = Path(f"{path}.log")
    segment.write_bytes(b"".join(segment.read_bytes().splitlines(keepends=True)[:-1]))
    with pytest.raises(AuditError, match="truncated or rewritten"):
        AuditStore.open(path)
    segment.unlink()
    with pytest.raises(AuditError, match="missing"):
        AuditStore.open(path)
    assert not segment.exists()  # refusing did not create an empty one


def test_what_the_index_has_not_reached_yet_is_read_and_verified(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    writer = AuditStore.open(path, index_every=10_000)
    try:
        kit.start(writer, "r1")
        for n in range(20):
            call = kit.make_call("r1", n)
            writer.record_decision("r1", call, kit.allow(call))
        assert count_events(path) == 0  # all of it still only in the segment
        report = verify_file(path)
        assert report.ok and report.checked >= 21
        with AuditStore.open(path, read_only=True) as reader:
            unindexed = reader.records("r1")
            assert len(unindexed) == 21
            assert reader.run_ids() == ["r1"]
    finally:
        writer.close()
    assert count_events(path) == 21  # indexed when the writer closed
    with AuditStore.open(path, read_only=True) as reader:
        # read from the segment past the index, the records are those read through it
        assert reader.records("r1") == unindexed
    assert unindexed[5].payload["call"]["id"] == "r1-c4"


@settings(max_examples=200, deadline=None)
@given(instants=st.lists(st.integers(min_value=0, max_value=(2**33) * 10**9), min_size=1,
                         max_size=4))
def test_record_times_are_written_as_isoformat_writes_them_across_seconds(
        instants: list[int]) -> None:
    for ns in [*instants, *(t + 1 for t in instants), *(t + 10**9 for t in instants)]:
        expected = datetime.fromtimestamp(ns // 10**9, UTC).replace(
            microsecond=ns % 10**9 // 1000).isoformat(timespec="microseconds")
        with mock.patch.object(time, "time_ns", return_value=ns):
            assert _store._now() == expected

"""The PostgreSQL audit store: the SQLite store's behaviour, append-only by the database, one
chain under concurrent writers, schema creation racing, and a server restart mid-run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from callgate import Kernel
from callgate._errors import AuditError
from callgate.audit import AuditLog, AuditStore, open_store
from callgate.audit._postgres import PostgresAuditStore
from callgate.policy._loader import LoadedPolicy
from tests.audit.conftest import Kit, make_call, populate, start
from tests.postgres import Cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def database(postgres: Cluster) -> str:
    """A database of this module's own in the session's cluster; its URL."""
    return postgres.new_database("audit")


@pytest.fixture
def schema() -> str:
    """A fresh schema name: each test has a log of its own."""
    return f"log_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pg(database: str, schema: str, tmp_path: Path) -> Iterator[PostgresAuditStore]:
    with PostgresAuditStore.open(database, schema=schema, key_path=tmp_path / "k.key",
                                 timeout_s=2.0) as store:
        yield store


Opener = Callable[[], AuditLog]


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request: pytest.FixtureRequest, database: str, schema: str, tmp_path: Path) -> Opener:
    """Opens the same log again each call, in either store."""
    if request.param == "sqlite":
        return lambda: open_store(tmp_path / "audit.db")
    return lambda: open_store(database, schema=schema, key_path=tmp_path / "k.key")


def superuser(url: str, schema: str, *statements: str) -> None:
    """Run ``statements`` as the superuser with the append-only triggers dropped, then put
    them back (only the data differs afterwards): what an attacker with the server can do."""
    triggers = [("events", "change"), ("events", "truncate"), ("checkpoints", "change")]
    with psycopg.connect(url, autocommit=True) as conn:
        for table, what in triggers:
            conn.execute(f"ALTER TABLE {schema}.{table} DISABLE TRIGGER {table}_no_{what}")
        for statement in statements:
            conn.execute(statement.replace("{s}", schema))
        for table, what in triggers:
            conn.execute(f"ALTER TABLE {schema}.{table} ENABLE TRIGGER {table}_no_{what}")


# -- the same behaviour as SQLite --------------------------------------------------------------


def test_open_store_picks_the_store_by_its_target(database: str, schema: str,
                                                  tmp_path: Path) -> None:
    with open_store(database, schema=schema, key_path=tmp_path / "k.key") as store:
        assert isinstance(store, PostgresAuditStore)
    with open_store(tmp_path / "a.db") as store:
        assert isinstance(store, AuditStore)
    with open_store(database.replace("postgresql://", "postgres://"), schema=schema,
                    key_path=tmp_path / "k.key") as store:
        assert isinstance(store, PostgresAuditStore)


def test_both_stores_read_back_the_same_runs_and_verify(opener: Opener) -> None:
    with opener() as store:
        populate(store)
        assert store.run_ids() == ["a", "b"]
        kinds = [r.kind for r in store.records("a")]
        assert kinds == ["run-start", "decision", "result", "system", "decision", "run-end"]
        assert [r.seq for r in store.records("b")] == [2, 5, 9]
        assert store.records("a")[2].payload["result"]["output"] == {"body": "é ü"}
        assert store.records("nope") == []
        assert store.head()[0] == 9
        report = store.verify()
        assert report.ok, report
        assert report.signatures and report.anchor == 8
    with opener() as store:  # opened again: the head and the runs carry on
        call = make_call("b", 10)
        assert store.record_decision("b", call, Kit.allow(call)) == 10
        assert store.verify().ok


def test_both_stores_refuse_appends_a_run_cannot_take(opener: Opener) -> None:
    with opener() as store:
        populate(store)
        with pytest.raises(AuditError, match="has ended"):
            store.end_run("a")
        with pytest.raises(AuditError, match="never started"):
            store.record_system("zzz", "note", {})
        with pytest.raises(AuditError, match="already started"):
            start(store, "b")


def test_a_manifest_event_changes_the_manifest_later_events_carry(opener: Opener) -> None:
    with opener() as store:
        start(store, "r")
        store.record_system("r", "manifest", {"sha256": "new"})
        call = make_call("r", 1)
        store.record_decision("r", call, Kit.allow(call))
        assert store.records("r")[-1].payload["manifest_hash"] == "new"


def test_observers_see_each_committed_record(pg: PostgresAuditStore) -> None:
    seen: list[int] = []
    pg.add_observer(lambda record: seen.append(record.seq))
    populate(pg)
    assert seen == list(range(1, 10))


def test_a_read_only_store_reads_but_never_appends(pg: PostgresAuditStore, database: str,
                                                   schema: str) -> None:
    populate(pg)
    with PostgresAuditStore.open(database, schema=schema, read_only=True) as reader:
        assert reader.run_ids() == ["a", "b"]
        with pytest.raises(AuditError, match="read-only"):
            start(reader, "c")


def test_opening_a_database_without_a_log_read_only_is_an_audit_error(database: str) -> None:
    with pytest.raises(AuditError, match="holds no callgate audit log"):
        PostgresAuditStore.open(database, schema="nothing_here", read_only=True)


def test_an_unreachable_server_is_an_audit_error(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="cannot connect"):
        PostgresAuditStore.open("postgresql://postgres@127.0.0.1:1/x",
                                key_path=tmp_path / "k.key", timeout_s=1.0)


# -- append-only, and tampering found ----------------------------------------------------------


@pytest.mark.parametrize("statement", [
    "UPDATE {s}.events SET verdict = 'allow' WHERE seq = 4",
    "DELETE FROM {s}.events WHERE seq = 9",
    "TRUNCATE {s}.events",
    "UPDATE {s}.checkpoints SET seq = 0",
    "DELETE FROM {s}.checkpoints",
])
def test_the_database_refuses_to_change_or_remove_events_and_checkpoints(
        pg: PostgresAuditStore, database: str, schema: str, statement: str) -> None:
    populate(pg)
    with psycopg.connect(database, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        conn.execute(statement.replace("{s}", schema))
    assert pg.verify().ok


@pytest.mark.parametrize(("statement", "table", "row"), [
    # the record's text edited: its hash no longer matches
    ("UPDATE {s}.events SET record = replace(record, 'example.org/3', 'evil.org/3')"
     " WHERE seq = 7", "events", 7),
    # a derived column edited: it disagrees with the record
    ("UPDATE {s}.events SET verdict = 'allow' WHERE seq = 4", "events", 4),
    # an event deleted: the next one no longer chains
    ("DELETE FROM {s}.events WHERE seq = 3", "events", 3),
    # the runs index edited
    ("UPDATE {s}.runs SET principal = 'root' WHERE run_id = 'b'", "runs", "b"),
])
def test_an_edit_by_the_superuser_is_found_and_verify_names_the_row(
        pg: PostgresAuditStore, database: str, schema: str, statement: str, table: str,
        row: Any) -> None:
    populate(pg)
    superuser(database, schema, statement)
    report = pg.verify()
    assert not report.ok
    assert (report.table, report.row) == (table, row), report


def test_a_truncated_tail_is_found_by_the_checkpoints(pg: PostgresAuditStore, database: str,
                                                      schema: str) -> None:
    populate(pg)
    pg.checkpoint()
    superuser(database, schema, "DELETE FROM {s}.events WHERE seq = 9",
              "UPDATE {s}.runs SET event_count = 2 WHERE run_id = 'b'",
              "UPDATE {s}.log_position SET seq = 8, \"offset\" = (SELECT log_offset + log_length"
              " FROM {s}.events WHERE seq = 8), hash = (SELECT hash FROM {s}.events"
              " WHERE seq = 8)")
    report = pg.verify()
    assert not report.ok and report.table == "checkpoints", report
    assert "truncated" in str(report.problem)


def test_a_dropped_trigger_fails_verify(pg: PostgresAuditStore, database: str,
                                        schema: str) -> None:
    populate(pg)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER events_no_change ON {schema}.events")
    report = pg.verify()
    assert (report.ok, report.table, report.row) == (False, "schema", "events_no_change")


def test_a_log_that_no_longer_matches_its_anchor_row_is_not_written_to(
        pg: PostgresAuditStore, database: str, schema: str, tmp_path: Path) -> None:
    populate(pg)
    superuser(database, schema, "UPDATE {s}.events SET hash = repeat('a', 64) WHERE seq = 8")
    with pytest.raises(AuditError, match="does not match its anchor row"):
        PostgresAuditStore.open(database, schema=schema, key_path=tmp_path / "k.key")


def test_the_anchor_file_is_kept_beside_the_row_when_configured(
        database: str, schema: str, tmp_path: Path) -> None:
    anchor = tmp_path / "anchor"
    with PostgresAuditStore.open(database, schema=schema, key_path=tmp_path / "k.key",
                                 anchor_path=anchor) as store:
        populate(store)
        assert store.verify().anchor == 8
    assert anchor.exists()


# -- concurrency ---------------------------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import sys
    from callgate.audit import open_store
    from tests.audit.conftest import Kit, make_call, start
    url, schema, key, name, count = sys.argv[1:6]
    with open_store(url, schema=schema, key_path=key, checkpoint_every=97) as store:
        start(store, name)
        for n in range(int(count) - 2):
            call = make_call(name, n)
            store.record_decision(name, call, Kit.allow(call))
        store.end_run(name)
""")


def _writers(database: str, schema: str, key: Path, count: int, appends: int
             ) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", _WRITER, database, schema, str(key),
                              f"w{i}", str(appends)], cwd=ROOT, stderr=subprocess.PIPE)
            for i in range(count)]


def test_concurrent_writers_never_fork_the_chain(database: str, schema: str,
                                                 tmp_path: Path) -> None:
    key = tmp_path / "k.key"
    procs = _writers(database, schema, key, 4, 200)
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    with PostgresAuditStore.open(database, schema=schema, key_path=key) as store:
        report = store.verify()
        assert report.ok, report
        assert store.head()[0] == 800
        seqs = sorted(r.seq for name in store.run_ids() for r in store.records(name))
        assert seqs == list(range(1, 801))  # dense: every sequence once, none twice
        assert all(len(store.records(f"w{i}")) == 200 for i in range(4))


def test_processes_creating_the_schema_at_once_share_one_log(database: str, schema: str,
                                                             tmp_path: Path) -> None:
    procs = _writers(database, schema, tmp_path / "k.key", 4, 3)
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    with PostgresAuditStore.open(database, schema=schema, key_path=tmp_path / "k.key") as store:
        assert sorted(store.run_ids()) == ["w0", "w1", "w2", "w3"]
        assert store.verify().ok
        assert store.checkpoints()[0].seq == 0  # created once, by one of them


# -- the server restarting ---------------------------------------------------------------------


def test_a_restart_mid_run_fails_appends_then_they_work_again_and_nothing_is_lost(
        postgres: Cluster, pg: PostgresAuditStore, example_policy: LoadedPolicy,
        workdir: Path) -> None:
    kernel = Kernel(example_policy, audit=pg, working_dir=workdir)
    get = {"tool": "fetch", "tool_class": "http", "action": "get",
           "parameters": {"url": "https://api.github.com/repos/x/y"}}
    assert kernel.check(get).verdict == "allow"
    acknowledged = pg.head()[0]
    postgres.stop()
    try:
        with pytest.raises(AuditError):
            pg.record_system(kernel.run_id, "note", {})
        denied = kernel.check(get)
        assert denied.verdict == "deny"
        assert "audit.write-failed" in [r.id for r in denied.reasons]
    finally:
        postgres.start()
    assert kernel.check(get).verdict in ("allow", "deny")  # audited again
    assert pg.record_system(kernel.run_id, "note", {}) > acknowledged
    records = pg.records(kernel.run_id)
    assert [r.seq for r in records][:2] == [1, 2]  # the run-start and the first decision kept
    assert pg.verify().ok

"""The PostgreSQL side of the audit log: its schema, its migrations, its locks, its connections.

Every table lives in one PostgreSQL schema (``callgate`` unless configured), so one database
can hold several logs side by side. The tables mirror the SQLite layout (docs/audit.md) with
one addition: ``events.record`` holds each event's canonical JSON, the text its hash covers
(SQLite keeps that text in the segment file). ``meta`` holds the format rows every store
writes plus ``pg_schema``, the version of this PostgreSQL layout, which :func:`ensure_schema`
migrates forward.

Creation and migration run in one transaction under a transaction-scoped advisory lock, so
processes that start together take turns and the later ones find the schema made.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg import sql

from callgate._errors import AuditError
from callgate.audit._chain import GENESIS_HASH, META_ROWS

#: The version of the PostgreSQL layout (the ``pg_schema`` row of ``meta``).
PG_SCHEMA_VERSION: Final = 1
#: The schema the tables live in unless configured.
DEFAULT_SCHEMA: Final = "callgate"

try:  # the pool is optional: without it a store keeps one connection
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - psycopg-pool is part of the postgres extra
    ConnectionPool = None  # type: ignore[assignment,misc]
    PoolTimeout = None  # type: ignore[assignment,misc]


def lock_key(schema: str, purpose: str) -> int:
    """The 64-bit advisory lock key of ``purpose`` (``chain``, ``ddl``) for a schema."""
    digest = hashlib.sha256(f"callgate-audit/{schema}/{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _ddl(schema: str) -> list[sql.Composed]:
    s = sql.Identifier(schema)
    refuse = sql.Identifier(schema, "refuse_change")

    def q(text: str) -> sql.Composed:
        return sql.SQL(text).format(s=s, refuse=refuse)

    statements = [
        q("CREATE SCHEMA IF NOT EXISTS {s}"),
        q("CREATE TABLE {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"),
        q("CREATE TABLE {s}.events ("
          " seq BIGINT PRIMARY KEY, id TEXT NOT NULL, run_id TEXT NOT NULL,"
          " run_seq BIGINT NOT NULL, kind TEXT NOT NULL, timestamp TEXT NOT NULL,"
          " tool TEXT, tool_class TEXT, action TEXT, verdict TEXT, call_id TEXT, status TEXT,"
          " taint TEXT NOT NULL, log_offset BIGINT NOT NULL, log_length BIGINT NOT NULL,"
          " prev_hash TEXT NOT NULL, hash TEXT NOT NULL, record TEXT NOT NULL)"),
        q("CREATE INDEX events_by_run ON {s}.events (run_id, run_seq)"),
        q("CREATE TABLE {s}.runs ("
          " run_id TEXT PRIMARY KEY, principal TEXT NOT NULL, policy_name TEXT NOT NULL,"
          " manifest_hash TEXT NOT NULL, config_hash TEXT NOT NULL, started_at TEXT NOT NULL,"
          " start_seq BIGINT NOT NULL, ended_at TEXT, end_seq BIGINT,"
          " event_count BIGINT NOT NULL)"),
        q("CREATE INDEX runs_by_start ON {s}.runs (start_seq)"),
        q("CREATE TABLE {s}.checkpoints ("
          " id BIGINT PRIMARY KEY, seq BIGINT NOT NULL, head_hash TEXT NOT NULL,"
          " runs BIGINT NOT NULL, runs_digest TEXT NOT NULL, created_at TEXT NOT NULL,"
          " key_id TEXT NOT NULL, signature TEXT NOT NULL)"),
        q('CREATE TABLE {s}.log_position ('
          ' id INTEGER PRIMARY KEY CHECK (id = 1), seq BIGINT NOT NULL,'
          ' "offset" BIGINT NOT NULL, hash TEXT NOT NULL)'),
        q("CREATE TABLE {s}.anchor ("
          " id INTEGER PRIMARY KEY CHECK (id = 1), seq BIGINT NOT NULL, checkpoint TEXT NOT NULL)"),
        q("CREATE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS $$"
          " BEGIN RAISE EXCEPTION 'callgate audit % are append-only', TG_TABLE_NAME"
          " USING ERRCODE = 'insufficient_privilege'; END $$"),
    ]
    for table in APPEND_ONLY:
        statements += [
            sql.SQL("CREATE TRIGGER {name} BEFORE UPDATE OR DELETE ON {s}.{t}"
                    " FOR EACH ROW EXECUTE FUNCTION {refuse}()").format(
                name=sql.Identifier(f"{table}_no_change"), s=s, t=sql.Identifier(table),
                refuse=refuse),
            sql.SQL("CREATE TRIGGER {name} BEFORE TRUNCATE ON {s}.{t}"
                    " FOR EACH STATEMENT EXECUTE FUNCTION {refuse}()").format(
                name=sql.Identifier(f"{table}_no_truncate"), s=s, t=sql.Identifier(table),
                refuse=refuse),
        ]
    statements.append(q('INSERT INTO {s}.log_position (id, seq, "offset", hash)'
                        " VALUES (1, 0, 0, '" + GENESIS_HASH + "')"))
    return statements


#: Tables whose rows are never changed or removed once written.
APPEND_ONLY: Final = ("events", "checkpoints")
#: The triggers that make them so (``verify`` requires every one of them).
TRIGGERS: Final = tuple(f"{t}_no_{what}" for t in APPEND_ONLY for what in ("change", "truncate"))


def _has_meta(cur: psycopg.Cursor[Any], schema: str) -> bool:
    cur.execute("SELECT to_regclass(%s) IS NOT NULL",
                (sql.Identifier(schema, "meta").as_string(cur),))
    row = cur.fetchone()
    return bool(row and row[0])


def schema_version(cur: psycopg.Cursor[Any], schema: str) -> dict[str, str] | None:
    """The ``meta`` rows of the log in ``schema`` (None when it has no log yet)."""
    if not _has_meta(cur, schema):
        return None
    cur.execute(sql.SQL("SELECT key, value FROM {}.meta").format(sql.Identifier(schema)))
    return {str(k): str(v) for k, v in cur.fetchall()}


def check_meta(meta: dict[str, str] | None, where: str) -> None:
    """Raise AuditError unless ``meta`` is that of a callgate log this code reads."""
    if meta is None:
        raise AuditError(f"{where} holds no callgate audit log")
    marker = dict(META_ROWS)
    if meta.get("format") != marker["format"]:
        raise AuditError(f"{where} is not a callgate audit log")
    if meta.get("version") != marker["version"] or \
            meta.get("pg_schema") != str(PG_SCHEMA_VERSION):
        raise AuditError(f"{where} is a callgate audit log of version {meta.get('version')!r}"
                         f" (PostgreSQL layout {meta.get('pg_schema')!r}); this callgate reads"
                         f" version {marker['version']} (layout {PG_SCHEMA_VERSION})")


def ensure_schema(conn: psycopg.Connection[Any], schema: str, where: str,
                  on_create: Callable[[psycopg.Cursor[Any]], None] | None = None) -> bool:
    """Create (or migrate) the log's tables under the DDL advisory lock; True when created.

    ``on_create`` runs in the creating transaction, so what it writes (the genesis checkpoint)
    is there before any other process can see the tables and append to them.
    """
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "ddl"),))
        meta = schema_version(cur, schema)
        if meta is None:
            for statement in _ddl(schema):
                cur.execute(statement)
            rows = [*META_ROWS, ("pg_schema", str(PG_SCHEMA_VERSION))]
            cur.executemany(sql.SQL("INSERT INTO {}.meta (key, value) VALUES (%s, %s)").format(
                sql.Identifier(schema)), rows)
            if on_create is not None:
                on_create(cur)
            return True
        # Later layouts add their migrations here, each moving ``pg_schema`` one step on.
        check_meta(meta, where)
        return False


def missing_triggers(cur: psycopg.Cursor[Any], schema: str) -> list[str]:
    """The append-only triggers that are not in place (dropped or disabled)."""
    cur.execute("SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND t.tgenabled <> 'D'", (schema,))
    found = {str(row[0]) for row in cur.fetchall()}
    return [name for name in TRIGGERS if name not in found]


class Connections:
    """Where a store gets its connections: a ``psycopg_pool`` pool when installed, else one
    connection used by one thread at a time (reopened when the server dropped it).

    A pool whose server went away (a restart, a broken socket, no connection in time) is
    dropped, and the next unit of work first tries one direct connection: refused at once while
    the server is down, and when it answers again a new pool replaces the old one. Waiting for
    the old pool to reconnect would wait out its backoff (1, 2, 4, 8 … seconds), longer than a
    request may wait, after the server is long back.
    """

    def __init__(self, url: str, *, size: int, timeout_s: float, read_only: bool) -> None:
        options = "-c synchronous_commit=on"
        if read_only:
            options += " -c default_transaction_read_only=on"
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": options,
                                        "connect_timeout": max(1, int(timeout_s))}
        self._url = url
        self._size = size
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._single: psycopg.Connection[Any] | None = None
        self._pool: Any = None
        self._closed = False
        if ConnectionPool is not None:
            self._pool = self._open_pool()

    def _open_pool(self) -> Any:
        pool = ConnectionPool(self._url, kwargs=self._kwargs, min_size=1, max_size=self._size,
                              open=False, timeout=self._timeout_s,
                              check=ConnectionPool.check_connection, name="callgate-audit")
        pool.open(wait=True, timeout=self._timeout_s)
        return pool

    def _current_pool(self) -> Any:
        """The pool, or a new one when the last was dropped (after one direct connection
        showed the server answers: psycopg's error when it does not)."""
        with self._lock:
            if self._closed:
                raise psycopg.OperationalError("the connection pool is closed")
            if self._pool is None:
                psycopg.connect(self._url, **self._kwargs).close()
                self._pool = self._open_pool()
            return self._pool

    def _drop(self, pool: Any) -> None:
        with self._lock:
            if self._pool is not pool:
                return
            self._pool = None
        pool.close(timeout=0)  # connections still lent out are closed when they come back

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one unit of work (autocommit; use ``transaction()`` inside)."""
        if ConnectionPool is not None:
            pool = self._current_pool()
            try:
                with pool.connection(timeout=self._timeout_s) as conn:
                    yield conn
            except BaseException as exc:
                if unreachable(exc):
                    self._drop(pool)
                raise
            return
        with self._lock:
            if self._single is None or self._single.closed or self._single.broken:
                self._single = psycopg.connect(self._url, **self._kwargs)
            yield self._single

    def close(self) -> None:
        """Close the pool (or the connection)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        elif self._single is not None:
            self._single.close()


def pool_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a connection attempt raises: psycopg's, and the pool's timeout."""
    return (psycopg.Error,) if PoolTimeout is None else (psycopg.Error, PoolTimeout)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the server cannot be reached now (down, restarting, connection
    lost, no connection free in time), rather than that a statement was wrong."""
    return isinstance(exc, psycopg.OperationalError) or (
        PoolTimeout is not None and isinstance(exc, PoolTimeout))

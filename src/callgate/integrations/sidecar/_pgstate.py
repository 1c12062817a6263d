"""The sidecar's state in PostgreSQL, shared by every sidecar given the same ``--store`` URL.

Tables live in their own schema (``callgate_sidecar``), created on first use under an advisory
lock so that sidecars starting together do not race: ``runs`` (each run's ``Kernel.suspend()``
snapshot and a version counter), ``defaults`` (the default run of each key), ``approvals``
(the same columns as in SQLite) and ``receipt_key`` (one receipt key for all sidecars, so a
receipt verifies whichever sidecar issued it).

Connections come from a small pool of psycopg 3 connections in autocommit mode; a transaction
is opened explicitly. A connection that failed (a server restart, a broken socket) is closed,
never put back, and an idle one is checked before it is lent (a restart while it was idle is
found there, not by the request). Every psycopg error is converted at this boundary into
``SharedStateError``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from callgate._errors import CallgateError, StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = ["SCHEMA", "PgStateDB", "SharedStateError"]

#: The PostgreSQL schema holding the sidecar's tables (apart from the audit store's).
SCHEMA: Final = "callgate_sidecar"
_SCHEMA_VERSION: Final = "1"
#: The advisory lock key under which the schema is created (any fixed 64-bit number).
_SCHEMA_LOCK: Final = 0x63676174_65736364

_DDL: Final = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {SCHEMA}.runs (
    run_id TEXT PRIMARY KEY, key_name TEXT NOT NULL, principal TEXT NOT NULL,
    snapshot BYTEA, ended INTEGER NOT NULL DEFAULT 0, updated DOUBLE PRECISION NOT NULL,
    version BIGINT NOT NULL DEFAULT 0, attempt BIGINT);
CREATE TABLE IF NOT EXISTS {SCHEMA}.defaults (key_name TEXT PRIMARY KEY, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {SCHEMA}.approvals (
    id TEXT PRIMARY KEY, key_name TEXT NOT NULL, principal TEXT NOT NULL,
    run_id TEXT NOT NULL, call_id TEXT NOT NULL, call_sha256 TEXT NOT NULL,
    policy_sha256 TEXT NOT NULL, call TEXT NOT NULL, reasons TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL, state TEXT NOT NULL,
    decided_by TEXT, decided_at DOUBLE PRECISION);
CREATE INDEX IF NOT EXISTS approvals_by_created ON {SCHEMA}.approvals (created);
CREATE TABLE IF NOT EXISTS {SCHEMA}.receipt_key (
    id INTEGER PRIMARY KEY CHECK (id = 1), private_key TEXT NOT NULL);
"""


class SharedStateError(StoreUnavailableError):
    """The shared PostgreSQL state cannot be reached now (the request that needed it is
    refused: a decision route answers a deny naming this, another route 503)."""


class _QmarkCursor:
    """A psycopg cursor that reads the ``?`` placeholders the SQLite state's queries use."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> _QmarkCursor:
        self._cursor.execute(sql.replace("?", "%s"), tuple(parameters))
        return self

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor.fetchall())

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


class PgStateDB:
    """The shared state database at ``url`` (``postgresql://…``); thread-safe. ``lock_timeout_s``
    bounds how long a decision waits for a run another sidecar holds."""

    shared: Final = True

    def __init__(self, url: str, *, pool_size: int = 16, lock_timeout_s: float = 30.0,
                 connect_timeout_s: float = 5.0) -> None:
        try:
            import psycopg  # noqa: F401 - the postgres extra
        except ImportError as exc:
            raise CallgateError("--store postgresql://… needs psycopg: "
                                   "pip install 'callgate[postgres]'") from exc
        self.url = url
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue(pool_size)
        self._lock_timeout_ms = int(lock_timeout_s * 1000)
        self._connect_timeout = max(1, int(connect_timeout_s))
        self._closed = threading.Event()
        with self.transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            cur.execute(_DDL.encode())
            cur.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', %s) "
                        f"ON CONFLICT (name) DO NOTHING", (_SCHEMA_VERSION,))
            row = cur.execute(f"SELECT value FROM {SCHEMA}.meta WHERE name = "
                              f"'schema_version'").fetchone()
        if row is None or row[0] != _SCHEMA_VERSION:
            raise CallgateError(f"the shared state in {self.redacted} has schema version "
                                   f"{row[0] if row else None}, this callgate knows "
                                   f"{_SCHEMA_VERSION}")

    @property
    def redacted(self) -> str:
        """The URL without its password (in the user part or a ``password=`` parameter), for
        messages: the one redaction the audit store uses too."""
        from callgate.audit._postgres import redact

        return redact(self.url)

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=self._connect_timeout)
        conn.execute(f"SET search_path TO {SCHEMA}")
        conn.execute(f"SET lock_timeout = {self._lock_timeout_ms}")
        # a run's state is as durable as its audit records, whatever the server's default
        conn.execute("SET synchronous_commit = on")
        return conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; closed instead of pooled again when the block fails."""
        if self._closed.is_set():
            raise SharedStateError("the shared state is closed")
        conn = self._checkout()
        try:
            yield conn
        except BaseException:
            if conn.broken:
                self._drain()  # the server went away: the idle connections are dead too
            conn.close()
            raise
        if conn.closed or conn.broken or self._closed.is_set():
            conn.close()
            return
        try:
            self._idle.put_nowait(conn)
        except queue.Full:
            conn.close()

    def _checkout(self) -> psycopg.Connection[Any]:
        """An idle connection that answers (one empty round trip), else a new one.

        A pooled connection may have died while it was idle (the server restarted); finding
        out at the request's first statement would fail a request the server could serve.
        """
        import psycopg

        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            try:
                conn.execute("")
                return conn
            except psycopg.Error:
                conn.close()
                self._drain()  # the server went away: the other idle ones are dead too
        try:
            return self._connect()
        except psycopg.Error as exc:
            raise SharedStateError(f"cannot reach the shared state at {self.redacted}: "
                                   f"{exc}") from exc

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor inside one transaction (committed when the block ends without error);
        psycopg errors become ``SharedStateError``."""
        import psycopg

        try:
            with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            kind = SharedStateError if isinstance(exc, psycopg.OperationalError) else CallgateError
            raise kind(f"the shared state at {self.redacted} failed: "
                       f"{type(exc).__name__}: {exc}".strip()) from exc

    @contextmanager
    def cursor(self) -> Iterator[_QmarkCursor]:
        """The ``StateDB`` interface: a ``?``-placeholder cursor inside one transaction."""
        with self.transaction() as cur:
            yield _QmarkCursor(cur)

    def receipt_key(self, generated: str) -> str:
        """The shared receipt key: ``generated`` if none was stored yet, else the stored one."""
        with self.transaction() as cur:
            cur.execute("INSERT INTO receipt_key VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                        (generated,))
            row = cur.execute("SELECT private_key FROM receipt_key WHERE id = 1").fetchone()
        assert row is not None
        return str(row[0])

    def close(self) -> None:
        """Close every pooled connection (connections in use close when returned)."""
        self._closed.set()
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

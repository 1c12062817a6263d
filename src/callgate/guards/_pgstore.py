"""The guards' fingerprints in PostgreSQL: what one sidecar learned, every sidecar knows.

The table ``fingerprints`` (in the schema ``callgate`` unless configured, beside the audit
log's tables) holds one row per digest, keyed by kind, slice length and digest, with the
CRC-32 probe and the origin; the texts themselves are never stored, as in the SQLite file.

Every store keeps the rows in memory like :class:`FingerprintStore` and catches up with the
table before each check (:meth:`PostgresFingerprintStore.refresh`): one query for the rows
whose ``id`` is past the last one it read. Writers take a transaction-scoped advisory lock
before inserting, so ids become visible in the order they were given and a reader that saw an
id has seen every id below it. Inserts are idempotent (``ON CONFLICT DO NOTHING``): two
sidecars learning the same secret store it once.

The table is created on first use under the schema's DDL advisory lock (the audit store's),
so processes that start together take turns. Connections come from one pool per URL and
schema, shared by the process's stores (a sidecar has one store per run).

Fail closed: a store that cannot be opened raises ``CallgateError``; a refresh that fails is
the reason to deny the call being checked; a write that fails marks the store ``broken`` (every
later check denies), as with SQLite.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

import psycopg
from psycopg import sql

from callgate._errors import CallgateError, StoreUnavailableError
from callgate.audit import _pgschema as pgs
from callgate.audit._postgres import redact
from callgate.guards._store import FingerprintStore

log = logging.getLogger("callgate.guards")

__all__ = ["PostgresFingerprintStore"]

#: Connections the shared pool of one URL keeps at most.
POOL_SIZE: Final = 4
#: Seconds to wait for the server (connecting, or a connection from the pool).
TIMEOUT_S: Final = 10.0

_pools: dict[tuple[str, str], tuple[pgs.Connections, int]] = {}
_pools_lock = threading.Lock()


def _acquire(url: str, schema: str) -> pgs.Connections:
    """The process's pool for ``url`` and ``schema``, opened on first use."""
    with _pools_lock:
        found = _pools.get((url, schema))
        if found is None:
            found = (pgs.Connections(url, size=POOL_SIZE, timeout_s=TIMEOUT_S, read_only=False),
                     0)
        _pools[(url, schema)] = (found[0], found[1] + 1)
        return found[0]


def _release(url: str, schema: str) -> None:
    """Let go of one use of the pool; the last one closes it."""
    with _pools_lock:
        found = _pools.pop((url, schema), None)
        if found is None:
            return
        if found[1] > 1:
            _pools[(url, schema)] = (found[0], found[1] - 1)
        else:
            found[0].close()


def ensure_table(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the fingerprint table (and its schema) unless it exists, under the DDL lock."""
    s = sql.Identifier(schema)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (pgs.lock_key(schema, "ddl"),))
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.fingerprints ("
            " id BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, kind TEXT NOT NULL,"
            " length INTEGER NOT NULL, digest BYTEA NOT NULL, probe BIGINT NOT NULL,"
            " origin TEXT NOT NULL, PRIMARY KEY (kind, length, digest))").format(s))


class PostgresFingerprintStore(FingerprintStore):
    """A :class:`FingerprintStore` whose fingerprints live in a PostgreSQL table shared by
    every process given the same URL. Use :func:`callgate.guards.open_fingerprints`."""

    def __init__(self, url: str, *, window: int = 12, schema: str = pgs.DEFAULT_SCHEMA) -> None:
        super().__init__(None, window=window)
        self.path = f"{redact(url)} (schema {schema})"
        self._url = url
        self._schema = schema
        self._table = sql.Identifier(schema, "fingerprints")
        self._write_key = pgs.lock_key(schema, "fingerprints")
        self._seen = 0
        self._closed = False
        try:
            self._pool = _acquire(url, schema)
        except pgs.pool_errors() as exc:
            raise self._unopened(exc) from exc
        try:
            with self._pool.connection() as conn:
                ensure_table(conn, schema)
                self._read_new(conn)
        except pgs.pool_errors() as exc:
            self.close()
            raise self._unopened(exc) from exc

    def _unopened(self, exc: BaseException) -> CallgateError:
        kind = StoreUnavailableError if pgs.unreachable(exc) else CallgateError
        return kind(f"guard state {self.path} cannot be opened: {exc}")

    def refresh(self) -> str | None:
        """Read the rows other processes added since the last refresh; the reason to deny
        (this store broken, or the database unreachable now), else None."""
        if self.broken:
            return self.broken
        try:
            with self._pool.connection() as conn:
                self._read_new(conn)
        except pgs.pool_errors() as exc:
            why = f"guard state {self.path} cannot be read: {exc}"
            log.error("%s", why)
            return why
        return None

    def _read_new(self, conn: psycopg.Connection[Any]) -> None:
        """Take in the rows added since the last read (psycopg errors propagate)."""
        with conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT id, kind, length, digest, probe, origin FROM {}"
                                " WHERE id > %s ORDER BY id").format(self._table),
                        (self._seen,))
            rows = cur.fetchall()
        with self._lock:
            for row_id, kind, length, digest, probe, origin in rows:
                self._hashes.setdefault(kind, {}).setdefault(int(length), {})[
                    bytes(digest)] = origin
                self._probes.setdefault(kind, {}).setdefault(int(length), set()).add(int(probe))
                self._seen = max(self._seen, int(row_id))

    def _persist(self, kind: str, length: int, rows: list[tuple[bytes, int, str]]) -> None:
        if not rows or self._closed:
            return
        try:
            with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                # one writer at a time: ids are then seen in order (see the module docstring)
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_key,))
                cur.executemany(sql.SQL(
                    "INSERT INTO {} (kind, length, digest, probe, origin)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING").format(self._table),
                    [(kind, length, d, p, o) for d, p, o in rows])
        except pgs.pool_errors() as exc:
            self.broken = f"guard state {self.path} cannot be written: {exc}"
            log.error("%s", self.broken)

    def close(self) -> None:
        """Let go of the shared pool (closed with its last store)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                _release(self._url, self._schema)

"""The audit store in PostgreSQL: one global hash chain shared by every process and machine.

The records, their canonical JSON and hashes are the SQLite store's (:mod:`callgate.audit._chain`);
only where they live differs. Each event is one row of ``events`` holding the record's text
beside its derived columns; the ``runs`` index, ``log_position`` (the head) and the checkpoints
are updated in the same transaction as the event, so the index never lags.

An append is one transaction that first takes ``pg_advisory_xact_lock`` on the log's chain key
and then reads the head: writers on any machine take turns, each seals its record on the head
the previous one committed, and the chain never forks. ``append`` returns after the commit
(``synchronous_commit=on``), so an acknowledged event survives a crash of the server. Any
database error becomes :class:`AuditError` (the kernel denies the call).

Triggers refuse UPDATE, DELETE and TRUNCATE on ``events`` and ``checkpoints`` (docs/audit.md
also shows a role without those privileges). ``verify`` reads one snapshot and runs the same
checks as for SQLite (:func:`callgate.audit._verify.verify_rows`), the records' text standing in
for the segment's lines. The anchor is the ``anchor`` row plus, when configured, an anchor
file outside the database (the stronger of the two: whoever can rewrite the database can
rewrite its row).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from callgate._errors import AuditError, AuditUnavailableError
from callgate.audit import _pgschema as pgs
from callgate.audit._anchor import advance_anchor, decode_anchor, encode_anchor, locked, read_anchor
from callgate.audit._chain import (
    EVENT_COLUMNS,
    GENESIS_HASH,
    RUN_COLUMNS,
    event_row,
    make_record,
    run_row,
    runs_digest,
    segment_line,
)
from callgate.audit._checkpoint import Checkpoint, sign_checkpoint
from callgate.audit._keys import create_key, display, public_path_for, read_public_key
from callgate.audit._store import (
    DEFAULT_CHECKPOINT_EVERY,
    AuditRecord,
    Durability,
    _now,
    _seal,
)
from callgate.audit._verify import CHECKPOINT_COLUMNS, VerifyReport, parse_line, verify_rows
from callgate.audit._writer import LogWriter, Signing

log = logging.getLogger("callgate.audit")

#: Connections a store's pool keeps at most.
DEFAULT_POOL_SIZE: Final = 4
#: Seconds to wait for the server (connecting, or a connection from the pool).
DEFAULT_TIMEOUT_S: Final = 10.0
#: Rows fetched at a time by ``verify``'s server-side cursors.
_BATCH: Final = 2000


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return "postgresql://…"
    host = info.get("host") or "localhost"
    return f"postgresql://{info.get('user') or ''}@{host}:{info.get('port') or 5432}/" \
           f"{info.get('dbname') or ''}"


def default_key_path(url: str, schema: str, environ: Mapping[str, str] | None = None) -> Path:
    """The signing key of a PostgreSQL log unless configured: one file per server, database
    and schema under ``$XDG_DATA_HOME/callgate/keys`` (else ``$HOME/.local/share/...``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):
        home = env.get("HOME", "")
        if not os.path.isabs(home):
            raise AuditError("no place for the audit signing key (neither XDG_DATA_HOME nor"
                             " HOME is an absolute path): pass key_path")
        base = os.path.join(home, ".local", "share")
    label = hashlib.sha256(f"{redact(url)}#{schema}".encode()).hexdigest()[:16]
    return Path(base) / "callgate" / "keys" / f"postgres-{label}.key"


def _default_key_dir(url: str, schema: str) -> Path:
    """The default key path, its directory made (mode 0700) when missing."""
    where = default_key_path(url, schema)
    try:
        where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise AuditError(f"cannot make the key directory {display(where.parent)}: {exc}"
                         ) from exc
    return where


class PostgresAuditStore(LogWriter):
    """A tamper-evident audit log in PostgreSQL, with the interface of
    :class:`~callgate.audit.AuditStore`. Thread-safe; any number of processes and machines may
    append to one log. Use :meth:`open`; the store is a context manager that closes itself.
    """

    _signing: Signing | None

    def __init__(self, connections: pgs.Connections, url: str, schema: str, *,
                 signing: Signing | None, read_only: bool) -> None:
        self._db = connections
        self._url = url
        self._where = f"{redact(url)} (schema {schema})"
        self._schema = schema
        self._s = sql.Identifier(schema)
        self._signing = signing
        self._read_only = read_only
        self._chain_key = pgs.lock_key(schema, "chain")
        self._lock = threading.RLock()
        self._closed = False
        self._head = (0, GENESIS_HASH)
        self._checkpoint_due = False
        self._observers: list[Callable[[AuditRecord], None]] = []

    @classmethod
    def open(
        cls,
        url: str,
        *,
        durability: Durability = "normal",
        read_only: bool = False,
        checkpoints: bool = True,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        key_path: str | os.PathLike[str] | None = None,
        anchor_path: str | os.PathLike[str] | None = None,
        schema: str = pgs.DEFAULT_SCHEMA,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> PostgresAuditStore:
        """Open (or create) the audit log in ``schema`` of the database at ``url``.

        Every append is committed before it returns, whatever ``durability`` says (it is
        accepted for the SQLite store's sake). With ``checkpoints`` a checkpoint signed with
        the key at ``key_path`` (default: :func:`default_key_path`, created on first use) is
        stored when the log is created, at every run's end and every ``checkpoint_every``
        events; it also becomes the ``anchor`` row and, with ``anchor_path``, the anchor file.
        ``read_only`` opens read-only transactions (every append fails).
        """
        if durability not in ("normal", "fsync"):
            raise AuditError(f"durability must be 'normal' or 'fsync', not {durability!r}")
        if checkpoint_every < 1:
            raise AuditError("checkpoint_every must be at least 1")
        if not url.startswith(("postgresql://", "postgres://")):
            raise AuditError("a PostgreSQL audit store needs a postgresql:// URL")
        signing = None
        if checkpoints and not read_only:
            where = Path(key_path) if key_path is not None else _default_key_dir(url, schema)
            key, _ = create_key(where)
            signing = Signing(key, None if anchor_path is None else Path(anchor_path),
                               checkpoint_every)
        try:
            connections = pgs.Connections(url, size=max(1, pool_size), timeout_s=timeout_s,
                                          read_only=read_only)
        except pgs.pool_errors() as exc:
            raise AuditUnavailableError(f"cannot connect to audit store {redact(url)}: {exc}"
                                   ) from exc
        store = cls(connections, url, schema, signing=signing, read_only=read_only)
        try:
            store._prepare()
        except BaseException:
            connections.close()
            raise
        return store

    def _prepare(self) -> None:
        genesis: list[Checkpoint] = []
        signing = self._signing

        def sign_genesis(cur: psycopg.Cursor[Any]) -> None:
            assert signing is not None
            genesis.append(self._store_checkpoint(cur, signing.private_key))

        with self._session("open") as conn:
            if self._read_only:
                with conn.cursor() as cur:
                    pgs.check_meta(pgs.schema_version(cur, self._schema), self._where)
            else:
                pgs.ensure_schema(conn, self._schema, self._where,
                                  None if signing is None else sign_genesis)
            self._head = self._read_head(conn)
        if signing is not None:
            if genesis and signing.anchor_path is not None:
                with locked(signing.anchor_path, exclusive=True):
                    advance_anchor(signing.anchor_path, genesis[0], self._hash_at)
            elif not genesis:
                self._check_anchor()

    # -- connections and errors ----------------------------------------------------------------

    @contextmanager
    def _session(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection; any database error inside becomes AuditError naming ``what``."""
        if self._closed:
            raise AuditError("the audit store is closed")
        try:
            with self._db.connection() as conn:
                yield conn
        except AuditError:
            raise
        except pgs.pool_errors() as exc:
            kind = AuditUnavailableError if pgs.unreachable(exc) else AuditError
            raise kind(f"audit {what} on {self._where} failed: {exc}") from exc

    def _q(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(s=self._s)

    def _read_head(self, conn: psycopg.Connection[Any]) -> tuple[int, str]:
        row = conn.execute(self._q('SELECT seq, hash FROM {s}.log_position WHERE id = 1')
                           ).fetchone()
        if row is None:
            raise AuditError(f"audit log {self._where} has no log position row")
        return int(row[0]), str(row[1])

    # -- appending -----------------------------------------------------------------------------

    def _append(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        if self._read_only:
            raise AuditError(f"audit log {self._where} was opened read-only")
        with self._session("append") as conn:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._chain_key,))
                cur.execute(self._q('SELECT seq, "offset", hash FROM {s}.log_position'
                                    ' WHERE id = 1 FOR UPDATE'))
                head = cur.fetchone()
                if head is None:
                    raise AuditError(f"audit log {self._where} has no log position row")
                seq, offset, prev = int(head[0]), int(head[1]), str(head[2])
                run_seq, payload = self._run_state(cur, run_id, kind, payload)
                record, text, digest = _seal(make_record(
                    seq=seq + 1, event_id=os.urandom(16).hex(), run_id=run_id, run_seq=run_seq,
                    kind=kind, timestamp=_now(), prev=prev, payload=payload))
                length = len(segment_line(text, digest))
                self._write_event(cur, record, text, digest, offset=offset, length=length)
            self._head = (seq + 1, digest)
        self._after_append(kind, seq + 1)
        if self._observers:
            self._notify(AuditRecord(seq + 1, kind, run_id, str(record["ts"]),
                                     dict(record["payload"]), digest, str(record["id"])))
        return seq + 1

    def _run_state(self, cur: psycopg.Cursor[Any], run_id: str, kind: str,
                   payload: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
        """The run sequence of the next event of ``run_id`` and its payload (with the
        manifest in force, as every event but a run's start carries it)."""
        cur.execute(self._q("SELECT run_seq, kind, record::json -> 'payload' ->> 'manifest_hash'"
                            " FROM {s}.events WHERE run_id = %s ORDER BY run_seq DESC LIMIT 1"),
                    (run_id,))
        last = cur.fetchone()
        if kind == "run-start":
            if last is not None:
                raise AuditError(f"run {run_id!r} was already started")
            return 1, payload
        if last is None:
            raise AuditError(f"run {run_id!r} was never started")
        if last[1] == "run-end":
            raise AuditError(f"run {run_id!r} has ended")
        manifest = last[2]
        if kind == "system" and payload.get("kind") == "manifest":
            data = payload.get("data")
            found = data.get("sha256") if isinstance(data, Mapping) else None
            manifest = found if isinstance(found, str) else manifest
        return int(last[0]) + 1, {**payload, "manifest_hash": manifest}

    def _write_event(self, cur: psycopg.Cursor[Any], record: dict[str, Any], text: str,
                     digest: str, *, offset: int, length: int) -> None:
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in (*EVENT_COLUMNS, "record"))
        marks = sql.SQL(", ").join(sql.Placeholder() * (len(EVENT_COLUMNS) + 1))
        cur.execute(sql.SQL("INSERT INTO {s}.events ({c}) VALUES ({m})").format(
            s=self._s, c=columns, m=marks), (*event_row(record, digest, offset, length), text))
        run_id, kind, seq = record["run_id"], record["kind"], int(record["seq"])
        if kind == "run-start":
            marks = sql.SQL(", ").join(sql.Placeholder() * len(RUN_COLUMNS))
            cur.execute(sql.SQL("INSERT INTO {s}.runs VALUES ({m})").format(s=self._s, m=marks),
                        run_row(record, 1, None))
        elif kind == "run-end":
            cur.execute(self._q("UPDATE {s}.runs SET ended_at = %s, end_seq = %s,"
                                " event_count = %s WHERE run_id = %s"),
                        (record["ts"], seq, record["run_seq"], run_id))
        else:
            cur.execute(self._q("UPDATE {s}.runs SET event_count = %s WHERE run_id = %s"),
                        (record["run_seq"], run_id))
        cur.execute(self._q('UPDATE {s}.log_position SET seq = %s, "offset" = %s, hash = %s'
                            ' WHERE id = 1'), (seq, offset + length, digest))

    # -- checkpoints ---------------------------------------------------------------------------

    def _sign(self, private_key: bytes) -> Checkpoint:
        """Store a checkpoint of the head (under the chain lock) and move the anchors."""
        anchor_path = self._signing.anchor_path if self._signing is not None else None
        guard = locked(anchor_path, exclusive=True) if anchor_path else nullcontext()
        with self._lock, guard, self._session("checkpoint") as conn:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._chain_key,))
                cp = self._store_checkpoint(cur, private_key)
            if anchor_path is not None:
                advance_anchor(anchor_path, cp, self._hash_at)
            return cp

    def _store_checkpoint(self, cur: psycopg.Cursor[Any], private_key: bytes) -> Checkpoint:
        """Sign the head as ``cur``'s transaction sees it; store it and move the anchor row."""
        cur.execute(self._q("SELECT seq, hash FROM {s}.log_position WHERE id = 1"))
        position = cur.fetchone()
        if position is None:
            raise AuditError(f"audit log {self._where} has no log position row")
        seq, head = int(position[0]), str(position[1])
        cur.execute(self._q("SELECT run_id, start_seq, event_count, end_seq"
                            " FROM {s}.runs ORDER BY start_seq"))
        runs = [(str(r), int(a), int(c), None if e is None else int(e))
                for r, a, c, e in cur.fetchall()]
        cp = sign_checkpoint(private_key, seq, head, _now(), runs=len(runs),
                             runs_digest=runs_digest(runs))
        cur.execute(self._q("SELECT coalesce(max(id), 0) + 1 FROM {s}.checkpoints"))
        row = cur.fetchone()
        assert row is not None
        cur.execute(self._q("INSERT INTO {s}.checkpoints VALUES"
                            " (%s, %s, %s, %s, %s, %s, %s, %s)"),
                    (int(row[0]), cp.seq, cp.head_hash, cp.runs, cp.runs_digest,
                     cp.created_at, cp.key_id, cp.signature))
        cur.execute(self._q(
            "INSERT INTO {s}.anchor (id, seq, checkpoint) VALUES (1, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET seq = excluded.seq,"
            " checkpoint = excluded.checkpoint WHERE {s}.anchor.seq <= excluded.seq"),
            (cp.seq, encode_anchor(cp).decode()))
        return cp

    def _hash_at(self, seq: int) -> str | None:
        if seq == 0:
            return GENESIS_HASH
        with self._session("read") as conn:
            row = conn.execute(self._q("SELECT hash FROM {s}.events WHERE seq = %s"),
                               (seq,)).fetchone()
        return None if row is None else str(row[0])

    def _stored_anchor(self) -> Checkpoint | None:
        with self._session("read") as conn:
            row = conn.execute(self._q("SELECT checkpoint FROM {s}.anchor WHERE id = 1")
                               ).fetchone()
        return None if row is None else decode_anchor(str(row[0]).encode(), "row of table anchor")

    def _check_anchor(self) -> None:
        """Refuse to write to a log that no longer matches its anchors (fail closed)."""
        assert self._signing is not None
        anchors = [("its anchor row", self._stored_anchor())]
        if self._signing.anchor_path is not None:
            anchors.append((f"its anchor {display(self._signing.anchor_path)}",
                            read_anchor(self._signing.anchor_path)))
        for name, anchor in anchors:
            if anchor is not None and self._hash_at(anchor.seq) != anchor.head_hash:
                raise AuditError(f"audit log {self._where} does not match {name} (sequence"
                                 f" {anchor.seq}): it was truncated or rewritten; run"
                                 " `callgate audit verify` on it")

    # -- the public API ------------------------------------------------------------------------

    def head(self) -> tuple[int, str]:
        """The sequence and hash of the log's last event, as committed by any writer (once
        the store is closed: the last head it saw)."""
        if self._closed:
            return self._head
        with self._session("read") as conn:
            self._head = self._read_head(conn)
        return self._head

    def run_ids(self) -> list[str]:
        """Every run's id, in the order the runs started."""
        with self._session("read") as conn:
            rows = conn.execute(self._q("SELECT run_id FROM {s}.runs ORDER BY start_seq"))
            return [str(row[0]) for row in rows]

    def records(self, run_id: str) -> list[AuditRecord]:
        """The events of one run in order (an empty list for an unknown run)."""
        with self._session("read") as conn:
            rows = conn.execute(self._q("SELECT hash, record FROM {s}.events WHERE run_id = %s"
                                        " ORDER BY seq"), (run_id,)).fetchall()
        return [self._to_record(str(d), str(t)) for d, t in rows]

    def records_after(self, seq: int, limit: int = 1000) -> list[AuditRecord]:
        """Up to ``limit`` events of every run after global sequence ``seq``, in order (what
        ``audit tail --follow`` polls)."""
        with self._session("read") as conn:
            rows = conn.execute(self._q("SELECT hash, record FROM {s}.events WHERE seq > %s"
                                        " ORDER BY seq LIMIT %s"), (seq, limit)).fetchall()
        return [self._to_record(str(d), str(t)) for d, t in rows]

    def _to_record(self, digest: str, text: str) -> AuditRecord:
        try:
            record, _ = parse_line(f"{digest} {text}")
        except ValueError as exc:
            raise AuditError(f"audit log {self._where}: a stored record is not one: {exc}"
                             ) from exc
        return AuditRecord(int(record["seq"]), str(record["kind"]), str(record["run_id"]),
                           str(record["ts"]), dict(record["payload"]), digest,
                           str(record.get("id", "")))

    def checkpoints(self) -> list[Checkpoint]:
        """The stored checkpoints, oldest first."""
        with self._session("read") as conn:
            rows = conn.execute(self._q(
                "SELECT seq, head_hash, runs, runs_digest, created_at, key_id, signature"
                " FROM {s}.checkpoints ORDER BY id")).fetchall()
        return [Checkpoint(*row) for row in rows]

    def verify(self, *, public_key: bytes | None = None, anchor: Checkpoint | None = None,
               require_anchor: bool = True) -> VerifyReport:
        """Recompute every stored value from the records' text in one snapshot; report the
        first bad row (``table`` ``events`` for a record, as ``log`` is for SQLite).

        Signatures are checked with ``public_key``, else the store's own key, else the
        default key's public file when there is one. The anchor is ``anchor``, else the
        anchor file (when the store has one), else the ``anchor`` row; a missing anchor
        fails unless ``require_anchor`` is False. Also fails when an append-only trigger was
        dropped or disabled.
        """
        if public_key is None:
            public_key = self.public_key()
        if public_key is None:
            default = public_path_for(default_key_path(self._url, self._schema))
            public_key = read_public_key(default) if default.exists() else None
        path = self._signing.anchor_path if self._signing is not None else None
        guard = locked(path, exclusive=False) if path is not None else nullcontext()
        with guard, self._session("verify") as conn:
            if anchor is None and path is not None:
                anchor = read_anchor(path)
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                report = self._verify_snapshot(conn, cur, public_key, anchor)
        if report.ok and report.anchor is None and require_anchor:
            return VerifyReport(False, report.checked, "no anchor: the latest checkpoint kept"
                                " outside the chain is missing (deleted, or checkpoints were"
                                " turned off for this log)", "checkpoints", "anchor", None,
                                report.signatures)
        return report

    def _verify_snapshot(self, conn: psycopg.Connection[Any], cur: psycopg.Cursor[Any],
                         public_key: bytes | None, anchor: Checkpoint | None) -> VerifyReport:
        missing = pgs.missing_triggers(cur, self._schema)
        if missing:
            return VerifyReport(False, 0, f"append-only trigger {missing[0]!r} was dropped or"
                                " disabled", "schema", missing[0])
        if anchor is None:
            cur.execute(self._q("SELECT checkpoint FROM {s}.anchor WHERE id = 1"))
            row = cur.fetchone()
            if row is not None:
                try:
                    anchor = decode_anchor(str(row[0]).encode(), "row of table anchor")
                except AuditError as exc:
                    return VerifyReport(False, 0, str(exc), "anchor", 1)
        cur.execute(self._q("SELECT key, value FROM {s}.meta"))
        meta = [tuple(r) for r in cur.fetchall()]
        if ("pg_schema", str(pgs.PG_SCHEMA_VERSION)) not in meta:
            return VerifyReport(False, len(meta), "the meta row pg_schema is missing or edited",
                                "meta", "pg_schema")
        cur.execute(self._q("SELECT run_id, principal, policy_name, manifest_hash, config_hash,"
                            " started_at, start_seq, ended_at, end_seq, event_count"
                            " FROM {s}.runs"))
        runs = cur.fetchall()
        cur.execute(self._q('SELECT id, seq, "offset", hash FROM {s}.log_position'))
        position = cur.fetchall()
        cur.execute(sql.SQL("SELECT {c} FROM {s}.checkpoints ORDER BY id").format(
            c=sql.SQL(", ").join(sql.Identifier(c) for c in CHECKPOINT_COLUMNS), s=self._s))
        checkpoints = cur.fetchall()
        lines = self._lines(conn)
        events = self._stream(conn, "events", sql.SQL(
            "SELECT {c} FROM {s}.events ORDER BY seq").format(
            c=sql.SQL(", ").join(sql.Identifier(c) for c in EVENT_COLUMNS), s=self._s))
        try:
            report = verify_rows(meta=[r for r in meta if r[0] != "pg_schema"], lines=lines,
                                 events=events, runs=runs, position=position,
                                 checkpoints=checkpoints, public_key=public_key, anchor=anchor)
        finally:  # close the server-side cursors inside the transaction
            lines.close()
            events.close()
        if report.table == "log":  # the records live in the events table here
            return VerifyReport(report.ok, report.checked, report.problem, "events", report.row,
                                report.anchor, report.signatures)
        return report

    def _stream(self, conn: psycopg.Connection[Any], name: str,
                query: sql.Composed) -> Generator[tuple[Any, ...], None, None]:
        with conn.cursor(name=f"callgate_verify_{name}") as cur:
            cur.itersize = _BATCH
            cur.execute(query)
            yield from cur

    def _lines(self, conn: psycopg.Connection[Any]
               ) -> Generator[tuple[int, int, str], None, None]:
        """The records as the segment would hold them: ``(start, end, "HASH JSON")``, the
        offsets summed from the lines' lengths (so the stored offsets are checked too)."""
        at = 0
        for digest, text in self._stream(conn, "lines", self._q(
                "SELECT hash, record FROM {s}.events ORDER BY seq")):
            line = f"{digest} {text}"
            end = at + len(line.encode()) + 1
            yield at, end, line
            at = end

    def close(self) -> None:
        """Close the connections. Safe to call twice."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def wait_for_records(store: PostgresAuditStore, *, poll_s: float,
                     keep_going: Callable[[], bool]) -> Iterator[AuditRecord]:
    """Every record of the log in order, then, while ``keep_going()``, each new one (polled
    every ``poll_s`` seconds); each must continue the chain before it, else AuditError."""
    seq = 0
    while True:
        batch = store.records_after(seq)
        for record in batch:
            if record.seq != seq + 1:
                raise AuditError(f"event {seq + 1} is missing from the audit log")
            seq = record.seq
            yield record
        if not batch:
            if not keep_going():
                return
            time.sleep(poll_s)

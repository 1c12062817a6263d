"""The SQLite audit store: writers taking turns, one transaction helper, automatic checkpoints.

The kernel writes every decision here before anything executes. Each append is one
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction made by :meth:`AuditStore._transaction`; if any
statement fails the transaction is rolled back and :class:`~callgate.AuditError` is raised, so
the file never holds half an append. Inside the transaction the writer re-reads the head: when
another writer (another store, another process) appended meanwhile, it catches up on those
events first, so writers on one file take turns and the chain never forks.

Content never makes an append fail: a payload that canonical JSON cannot hold is sanitised
(:mod:`callgate.audit._encode`). By default the store signs a checkpoint when the log is
created, at every run's end and every ``checkpoint_every`` events, and moves the anchor file
(:mod:`callgate.audit._anchor`) forward; the signing key is created on first use
(:mod:`callgate.audit._keys`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from callgate._errors import AuditError
from callgate._model import Decision, ToolCall, ToolResult
from callgate.audit import _schema as schema
from callgate.audit._anchor import advance_anchor, locked, read_anchor
from callgate.audit._chain import (
    EVENT_COLUMNS,
    GENESIS_HASH,
    canonical_json,
    event_row,
    make_record,
    run_row,
    runs_digest,
    seal,
)
from callgate.audit._checkpoint import Checkpoint, public_key_of, sign_checkpoint
from callgate.audit._encode import MAX_RECORD_CHARS, fits, sanitize, shrink
from callgate.audit._files import (
    connect,
    default_anchor_path,
    default_key_path,
    verify_file,
)
from callgate.audit._keys import create_key, display
from callgate.audit._verify import VerifyReport

log = logging.getLogger("callgate.audit")

Durability = Literal["normal", "fsync"]
_SYNCHRONOUS: Final[dict[str, str]] = {"normal": "NORMAL", "fsync": "FULL"}
#: Events between two automatic checkpoints (besides one at every run's end).
DEFAULT_CHECKPOINT_EVERY: Final = 1000

_INSERT_EVENT: Final = (
    f"INSERT INTO events ({', '.join(EVENT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(EVENT_COLUMNS))})"
)
_INSERT_RUN: Final = "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_COUNT_RUN: Final = "UPDATE runs SET event_count = ? WHERE run_id = ?"
_END_RUN: Final = "UPDATE runs SET ended_at = ?, end_seq = ?, event_count = ? WHERE run_id = ?"
_INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (seq, head_hash, runs, runs_digest, created_at, key_id, signature)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_HEAD: Final = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One event of the log as read back: its global ``seq``, kind, run, time, payload, hash."""

    seq: int
    kind: str
    run_id: str
    timestamp: str
    payload: dict[str, Any]
    hash: str
    id: str = ""


class _Run:
    __slots__ = ("count", "end_seq", "manifest", "start_seq")

    def __init__(self, start_seq: int, count: int, end_seq: int | None, manifest: str) -> None:
        self.start_seq = start_seq
        self.count = count
        self.end_seq = end_seq
        self.manifest = manifest  # the hash of the manifest in force, carried by every event


@dataclass(frozen=True, slots=True)
class _Signing:
    """Automatic checkpoints: the private key, where the anchor lives, how often to sign."""

    private_key: bytes
    anchor_path: Path
    every: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _jsonable(value: Any) -> Any:
    """Plain JSON data for ``value`` on the fast path; the value itself when that fails.

    A value left as it is makes the record fail to seal, and the append then sanitises the
    whole payload once (:func:`_seal`), so content never raises.
    """
    try:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        return to_jsonable_python(value)
    except Exception:  # pydantic, codecs and user __repr__s raise many kinds
        return value


def _seal(record: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """``(record, text, hash)``, with the payload sanitised when it does not fit as it is."""
    try:
        text, digest = seal(record)
        if fits(text):
            return record, text, digest
    except (AuditError, UnicodeEncodeError):
        pass
    payload = sanitize(record["payload"])
    envelope = len(canonical_json({**record, "payload": {}}))
    if len(canonical_json(payload)) + envelope > MAX_RECORD_CHARS:
        payload = shrink(payload, MAX_RECORD_CHARS - envelope)
    record = {**record, "payload": payload}
    text, digest = seal(record)
    return record, text, digest


def _text(value: str) -> str:
    """Run metadata as storable text: strings that are not valid Unicode backslash-escaped."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _manifest_of(record_text: str) -> str | None:
    payload = schema.parse_record(record_text).get("payload")
    data = payload.get("data") if isinstance(payload, dict) else None
    found = data.get("sha256") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None


class AuditStore:
    """A tamper-evident audit log in one SQLite file (WAL). Thread-safe; writers take turns.

    Use :meth:`open`; the store is a context manager that closes itself.
    """

    def __init__(self, conn: sqlite3.Connection, path: str, durability: Durability,
                 signing: _Signing | None) -> None:
        self._conn = conn
        self._path = path
        self._durability = durability
        self._signing = signing
        self._lock = threading.RLock()
        self._closed = False
        self._head_seq = 0
        self._head_hash = GENESIS_HASH
        self._runs: dict[str, _Run] = {}
        self._checkpoint_due = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        read_only: bool = False,
        checkpoints: bool = True,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        key_path: str | os.PathLike[str] | None = None,
        anchor_path: str | os.PathLike[str] | None = None,
    ) -> AuditStore:
        """Open (or create) the audit log at ``path``.

        ``durability="normal"`` (``synchronous=NORMAL``) keeps every committed event across a
        killed process; ``"fsync"`` (``synchronous=FULL``) also across power loss, at a cost.
        ``read_only`` opens the file without write access (every append then fails).

        With ``checkpoints`` (the default, for a writer) a checkpoint signed with the key at
        ``key_path`` (default ``<path>.key``, created on first use with mode 0600, its public
        key beside it as ``<key_path>.pub``) is stored when the log is created, at every run's
        end and every ``checkpoint_every`` events, and the anchor at ``anchor_path`` (default
        ``<path>.anchor``) is moved forward to it. ``checkpoints=False`` turns that off.
        """
        if durability not in _SYNCHRONOUS:
            raise AuditError(f"durability must be 'normal' or 'fsync', not {durability!r}")
        if checkpoint_every < 1:
            raise AuditError("checkpoint_every must be at least 1")
        where = os.fspath(path)
        conn = connect(where, read_only=read_only)
        try:
            signing = None
            if checkpoints and not read_only:
                key, _ = create_key(key_path if key_path is not None else default_key_path(where))
                anchor = anchor_path if anchor_path is not None else default_anchor_path(where)
                signing = _Signing(key, Path(anchor), checkpoint_every)
            store = cls(conn, where, durability, signing)
            store._prepare(read_only)
        except BaseException:
            conn.close()
            raise
        return store

    def _prepare(self, read_only: bool) -> None:
        try:
            self._conn.execute("PRAGMA busy_timeout = 10000")
            if not read_only:
                mode = _enter_wal(self._conn)
                if str(mode).lower() != "wal":
                    raise AuditError(
                        f"audit log {display(self._path)} cannot use WAL (got {mode!r})"
                    )
            self._conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[self._durability]}")
            created = not read_only and schema.is_empty(self._conn) and self._create_schema()
            schema.check_is_audit_log(self._conn, display(self._path))
            self._load_state()
        except sqlite3.OperationalError as exc:
            raise AuditError(f"cannot open audit log {display(self._path)}: {exc}") from exc
        except sqlite3.Error as exc:
            raise AuditError(
                f"audit log {display(self._path)} is unreadable or corrupt: {exc}"
            ) from exc
        if self._signing is not None:
            if created:
                self._sign(self._signing.private_key)
            else:
                self._check_anchor()

    def _create_schema(self) -> bool:
        ops: list[tuple[str, Sequence[Any]]] = [(sql, ()) for sql in schema.DDL]
        try:
            self._atomic([*ops, *schema.meta_inserts()], catch_up=False)
        except AuditError:
            # Another process may have created the log between our check and our write;
            # then its schema is checked like any other. Otherwise the failure stands.
            if schema.is_empty(self._conn):
                raise
            return False
        return True

    def _load_state(self) -> None:
        row = self._conn.execute(_HEAD).fetchone()
        if row is not None:
            self._head_seq, self._head_hash = int(row[0]), str(row[1])
        self._runs = {}
        for run_id, start_seq, count, end_seq, manifest in self._conn.execute(
            "SELECT run_id, start_seq, event_count, end_seq, manifest_hash FROM runs"
            " ORDER BY start_seq"
        ):
            self._runs[run_id] = _Run(int(start_seq), int(count), end_seq, str(manifest))
        # A run's manifest may have changed after its start: the newest "manifest" event says.
        for run_id, record in self._conn.execute(
            "SELECT run_id, record FROM events WHERE kind = 'system' AND tool = '_system.manifest'"
            " ORDER BY seq"
        ):
            found = _manifest_of(record)
            if run_id in self._runs and found is not None:
                self._runs[run_id].manifest = found

    def _check_anchor(self) -> None:
        """Refuse to write to a log that no longer matches its anchor (fail closed)."""
        assert self._signing is not None
        anchor = read_anchor(self._signing.anchor_path)
        if anchor is not None and self._hash_at(anchor.seq) != anchor.head_hash:
            raise AuditError(
                f"audit log {display(self._path)} does not match its anchor"
                f" {display(self._signing.anchor_path)} (sequence {anchor.seq}): it was"
                " truncated or rewritten; run `callgate audit verify` on it"
            )

    def _hash_at(self, seq: int) -> str | None:
        if seq == 0:
            return GENESIS_HASH
        row = self._conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else str(row[0])

    # -- the one way anything is written -------------------------------------------------------

    def _transaction(
        self, build: Callable[[], Sequence[tuple[str, Sequence[Any]]]], *, catch_up: bool = True
    ) -> None:
        """One write transaction: catch up with other writers, then run what ``build`` returns.

        All of it, or (on any failure) none of it and AuditError.
        """
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                if catch_up:
                    self._catch_up()
                for sql, params in build():
                    conn.execute(sql, params)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error | ValueError | UnicodeError):
                    raise AuditError(
                        f"audit write to {display(self._path)} failed, nothing was written: {exc}"
                    ) from exc
                raise

    def _atomic(self, ops: Sequence[tuple[str, Sequence[Any]]], *, catch_up: bool = True) -> None:
        """Run ``ops`` as one transaction (see :meth:`_transaction`)."""
        self._transaction(lambda: ops, catch_up=catch_up)

    def _catch_up(self) -> None:
        """Inside the write lock: take in the events other writers appended since our head."""
        row = self._conn.execute(_HEAD).fetchone()
        head = (0, GENESIS_HASH) if row is None else (int(row[0]), str(row[1]))
        if head == (self._head_seq, self._head_hash):
            return
        if head[0] < self._head_seq or self._hash_at(self._head_seq) != self._head_hash:
            raise AuditError(
                f"audit log {display(self._path)} changed under this writer: events up to"
                f" {self._head_seq} were truncated or rewritten"
            )
        for row in self._conn.execute(
            "SELECT seq, run_id, kind, run_seq, tool, record FROM events WHERE seq > ?"
            " ORDER BY seq",
            (self._head_seq,),
        ):
            self._take_in(row)
        self._head_seq, self._head_hash = head

    def _take_in(self, row: tuple[Any, ...]) -> None:
        """Update the runs in memory with one event another writer appended."""
        seq, run_id, kind, run_seq, tool, record = row
        if kind == "run-start":
            payload = schema.parse_record(record).get("payload")
            manifest = payload.get("manifest_hash") if isinstance(payload, dict) else None
            self._runs[run_id] = _Run(seq, 1, None, str(manifest))
            return
        state = self._runs.get(run_id)
        if state is None:
            return
        state.count = int(run_seq)
        if kind == "run-end":
            state.end_seq = seq
        elif tool == "_system.manifest":
            state.manifest = _manifest_of(record) or state.manifest

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            # A failed rollback leaves SQLite to discard the transaction itself (it never
            # commits an unfinished one); the original error is the one worth reporting.
            pass

    def _append(
        self, run_id: str, kind: str, payload: Mapping[str, Any], *, run_sql: _RunSql
    ) -> int:
        with self._lock:
            sealed: list[tuple[dict[str, Any], str]] = []

            def build() -> list[tuple[str, Sequence[Any]]]:
                record, text, digest = _seal(self._record(run_id, kind, payload))
                sealed.append((record, digest))
                return [(_INSERT_EVENT, event_row(record, text, digest)), run_sql(record)]

            self._transaction(build)
            record, digest = sealed[-1]
            seq, manifest = int(record["seq"]), str(record["payload"].get("manifest_hash"))
            state = self._runs.get(run_id)
            if state is None or kind == "run-start":
                self._runs[run_id] = _Run(seq, 1, None, manifest)
            else:
                state.count, state.manifest = int(record["run_seq"]), manifest
                state.end_seq = seq if kind == "run-end" else None
            self._head_seq, self._head_hash = seq, digest
            self._after_append(kind, seq)
            return seq

    def _record(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope of the next event (called inside the transaction, after catching up)."""
        state = self._runs.get(run_id)
        if kind == "run-start":
            if state is not None:
                raise AuditError(f"run {run_id!r} was already started")
            run_seq = 1
        elif state is None:
            raise AuditError(f"run {run_id!r} was never started")
        elif state.end_seq is not None:
            raise AuditError(f"run {run_id!r} has ended")
        else:
            run_seq = state.count + 1
            manifest = state.manifest
            if kind == "system" and payload.get("kind") == "manifest":
                data = payload.get("data")
                found = data.get("sha256") if isinstance(data, Mapping) else None
                manifest = found if isinstance(found, str) else manifest
            payload = {**payload, "manifest_hash": manifest}
        return make_record(
            seq=self._head_seq + 1,
            event_id=os.urandom(16).hex(),
            run_id=run_id,
            run_seq=run_seq,
            kind=kind,
            timestamp=_now(),
            prev=self._head_hash,
            payload=payload,
        )

    # -- checkpoints ---------------------------------------------------------------------------

    def _after_append(self, kind: str, seq: int) -> None:
        signing = self._signing
        if signing is None:
            return
        if not (kind == "run-end" or seq % signing.every == 0 or self._checkpoint_due):
            return
        try:
            self._sign(signing.private_key)
            self._checkpoint_due = False
        except AuditError as exc:
            # The event itself is committed; the anchor stays where it was (still true) and
            # the next append tries again. ``verify`` reports what the failure left behind.
            self._checkpoint_due = True
            log.error("audit checkpoint failed: %s", exc)

    def _sign(self, private_key: bytes) -> Checkpoint:
        """Store a checkpoint of the current head and move the anchor (if any) to it."""
        anchor_path = self._signing.anchor_path if self._signing is not None else None
        guard = locked(anchor_path, exclusive=True) if anchor_path else nullcontext()
        with self._lock, guard:
            signed: list[Checkpoint] = []

            def build() -> list[tuple[str, Sequence[Any]]]:
                runs = [(rid, r.start_seq, r.count, r.end_seq) for rid, r in self._runs.items()]
                cp = sign_checkpoint(private_key, self._head_seq, self._head_hash, _now(),
                                     runs=len(runs), runs_digest=runs_digest(runs))
                signed.append(cp)
                row = (cp.seq, cp.head_hash, cp.runs, cp.runs_digest, cp.created_at,
                       cp.key_id, cp.signature)
                return [(_INSERT_CHECKPOINT, row)]

            self._transaction(build)
            if anchor_path is not None:
                advance_anchor(anchor_path, signed[-1], self._hash_at)
            return signed[-1]

    # -- the public API ------------------------------------------------------------------------

    def start_run(
        self,
        run_id: str,
        *,
        principal: str,
        policy_name: str,
        manifest_hash: str,
        config: Mapping[str, Any],
    ) -> None:
        """Open a run: appends its ``run-start`` event and its row in the ``runs`` index."""
        if not run_id:
            raise AuditError("a run id must not be empty")
        if not isinstance(run_id, str) or _text(run_id) != run_id:
            raise AuditError("a run id must be a string of valid Unicode")
        payload = {
            "principal": _text(principal),
            "policy_name": _text(policy_name),
            "manifest_hash": _text(manifest_hash),
            "config": _jsonable(dict(config)),
        }
        self._append(run_id, "run-start", payload, run_sql=_insert_run)

    def record_decision(self, run_id: str, call: ToolCall, decision: Decision) -> int:
        """Append a decision (with its call) and return the event's global sequence."""
        if call.run_id and call.run_id != run_id:
            raise AuditError(f"call belongs to run {call.run_id!r}, not {run_id!r}")
        payload = {
            "call": _jsonable(call),
            "decision": _jsonable(decision),
        }
        return self._append(run_id, "decision", payload, run_sql=_count_run)

    def record_result(self, run_id: str, result: ToolResult) -> int:
        """Append the result of an executed call and return the event's global sequence."""
        payload = {"result": _jsonable(result)}
        return self._append(run_id, "result", payload, run_sql=_count_run)

    def record_system(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        """Append a ``_system`` event (``kind`` e.g. ``quarantine``, ``violation``)."""
        if not kind:
            raise AuditError("a system event needs a kind")
        body = {"kind": _text(kind), "data": _jsonable(dict(payload))}
        return self._append(run_id, "system", body, run_sql=_count_run)

    def end_run(self, run_id: str) -> None:
        """Close a run: appends its ``run-end`` event; later appends to it fail."""
        self._append(run_id, "run-end", {}, run_sql=_end_run)

    def checkpoint(self, private_key: bytes | None = None) -> Checkpoint:
        """Sign the current head and runs now, store the checkpoint and move the anchor.

        ``private_key`` (raw Ed25519) defaults to the store's own signing key. Keep a copy of
        the returned checkpoint somewhere the log's writer cannot edit; ``verify`` takes it as
        ``anchor``.
        """
        if private_key is None:
            if self._signing is None:
                raise AuditError("this store has no signing key: pass one, or open it with"
                                 " checkpoints on")
            private_key = self._signing.private_key
        return self._sign(private_key)

    def public_key(self) -> bytes | None:
        """The raw public key of the store's signing key (``None`` without checkpoints)."""
        return None if self._signing is None else public_key_of(self._signing.private_key)

    def head(self) -> tuple[int, str]:
        """The sequence and hash of the log's last event (``(0, GENESIS_HASH)`` when empty).

        Read from the file, so events other writers appended count too (once the store is
        closed: the last head it saw).
        """
        with self._lock:
            if self._closed:
                return self._head_seq, self._head_hash
        rows = self._read(_HEAD, ())
        return (0, GENESIS_HASH) if not rows else (int(rows[0][0]), str(rows[0][1]))

    def run_ids(self) -> list[str]:
        """Every run's id, in the order the runs started."""
        return [row[0] for row in self._read("SELECT run_id FROM runs ORDER BY start_seq", ())]

    def records(self, run_id: str) -> list[AuditRecord]:
        """The events of one run in order (an empty list for an unknown run)."""
        rows = self._read(
            "SELECT seq, kind, run_id, timestamp, record, hash, id FROM events"
            " WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
        return [_to_record(row) for row in rows]

    def checkpoints(self) -> list[Checkpoint]:
        """The stored checkpoints, oldest first."""
        rows = self._read(
            "SELECT seq, head_hash, runs, runs_digest, created_at, key_id, signature"
            " FROM checkpoints ORDER BY id",
            (),
        )
        return [Checkpoint(*row) for row in rows]

    def verify(
        self, *, public_key: bytes | None = None, anchor: Checkpoint | None = None
    ) -> VerifyReport:
        """Recompute every stored value from the hashed records; report the first bad row.

        With checkpoints on, signatures are checked with the store's own public key and the
        store's anchor file is required, unless ``public_key`` / ``anchor`` are given. Reads a
        consistent snapshot through its own connection, so appends are not blocked.
        """
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
        signing = self._signing
        if signing is None:
            return verify_file(self._path, public_key=public_key, anchor=anchor,
                               require_anchor=anchor is not None)
        return verify_file(self._path, public_key=public_key or self.public_key(),
                           anchor=anchor, anchor_path=signing.anchor_path)

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            try:
                return list(self._conn.execute(sql, params))
            except sqlite3.Error as exc:
                raise AuditError(f"cannot read audit log {display(self._path)}: {exc}") from exc

    def close(self) -> None:
        """Close the file. Safe to call twice."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_RunSql = Callable[[Mapping[str, Any]], tuple[str, Sequence[Any]]]


def _insert_run(record: Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
    return _INSERT_RUN, run_row(record, 1, None)


def _count_run(record: Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
    return _COUNT_RUN, (record["run_seq"], record["run_id"])


def _end_run(record: Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
    return _END_RUN, (record["ts"], record["seq"], record["run_seq"], record["run_id"])


def _to_record(row: tuple[Any, ...]) -> AuditRecord:
    seq, kind, run_id, timestamp, text, digest, event_id = row
    try:
        payload = schema.parse_record(text)["payload"]
    except (ValueError, KeyError, TypeError) as exc:
        raise AuditError(f"audit event {seq} has an unreadable record: {exc}") from exc
    return AuditRecord(seq, kind, run_id, timestamp, dict(payload), digest, event_id)


def _enter_wal(conn: sqlite3.Connection, patience_s: float = 10.0) -> object:
    """Switch to WAL, waiting for other openers: SQLite answers "database is locked" at once,
    without its busy handler, when several connections change the mode of a new file together."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)

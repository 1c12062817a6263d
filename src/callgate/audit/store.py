"""The SQLite audit store: one writer, one atomic helper, an append-only hash chain.

The kernel writes every decision here before anything executes. Each append is one
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction made by :meth:`AuditStore._atomic`; if any statement
fails the transaction is rolled back and :class:`~callgate.AuditError` is raised, so the file
never holds half an append. The head sequence and hash live in memory (re-read at open), so an
append costs one INSERT and one UPDATE and no SELECT.

The ``seq`` column is the primary key and each append writes ``head + 1``: a second writer on the
same file makes the next append fail instead of forking the chain.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from callgate._errors import AuditError
from callgate._model import Decision, ToolCall, ToolResult
from callgate.audit import schema
from callgate.audit.chain import (
    EVENT_COLUMNS,
    GENESIS_HASH,
    event_row,
    make_record,
    run_row,
    seal,
)
from callgate.audit.checkpoint import Checkpoint, sign_checkpoint
from callgate.audit.verify import VerifyReport, verify_rows

Durability = Literal["normal", "fsync"]
_SYNCHRONOUS: Final[dict[str, str]] = {"normal": "NORMAL", "fsync": "FULL"}
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"

_INSERT_EVENT: Final = (
    f"INSERT INTO events ({', '.join(EVENT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(EVENT_COLUMNS))})"
)
_INSERT_RUN: Final = "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_COUNT_RUN: Final = "UPDATE runs SET event_count = ? WHERE run_id = ?"
_END_RUN: Final = "UPDATE runs SET ended_at = ?, end_seq = ?, event_count = ? WHERE run_id = ?"
_INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (seq, head_hash, created_at, key_id, signature) VALUES (?, ?, ?, ?, ?)"
)


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
    __slots__ = ("count", "ended", "manifest")

    def __init__(self, count: int, ended: bool, manifest: str) -> None:
        self.count = count
        self.ended = ended
        self.manifest = manifest  # the hash of the manifest in force, carried by every event


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _jsonable(value: Any, what: str) -> Any:
    """Plain JSON data for ``value``; foreign serialisation errors become AuditError."""
    try:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        return to_jsonable_python(value)
    except Exception as exc:  # pydantic, codecs and user __repr__s raise many kinds
        raise AuditError(f"cannot record {what}: {exc}") from exc


def _check_file(path: str) -> None:
    """Reject files that are plainly not SQLite before sqlite3 gets a chance to be vague."""
    target = Path(path)
    if not target.exists():
        return
    try:
        with target.open("rb") as handle:
            header = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise AuditError(f"cannot read audit log {path}: {exc}") from exc
    if header and header != _SQLITE_MAGIC:
        raise AuditError(f"{path} is not a callgate audit log (not a SQLite database)")


def _connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    _check_file(path)
    target = Path(path).resolve().as_uri() + ("?mode=ro" if read_only else "")
    try:
        conn = sqlite3.connect(target, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise AuditError(f"cannot open audit log {path}: {exc}") from exc
    return conn


class AuditStore:
    """A tamper-evident audit log in one SQLite file (WAL). Thread-safe; one writer per file.

    Use :meth:`open`; the store is a context manager that closes itself.
    """

    def __init__(self, conn: sqlite3.Connection, path: str, durability: Durability) -> None:
        self._conn = conn
        self._path = path
        self._durability = durability
        self._lock = threading.RLock()
        self._closed = False
        self._head_seq = 0
        self._head_hash = GENESIS_HASH
        self._runs: dict[str, _Run] = {}

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        read_only: bool = False,
    ) -> AuditStore:
        """Open (or create) the audit log at ``path``.

        ``durability="normal"`` (``synchronous=NORMAL``) keeps every committed event across a
        killed process; ``"fsync"`` (``synchronous=FULL``) also across power loss, at a cost.
        ``read_only`` opens the file without write access (every append then fails).
        """
        if durability not in _SYNCHRONOUS:
            raise AuditError(f"durability must be 'normal' or 'fsync', not {durability!r}")
        where = os.fspath(path)
        conn = _connect(where, read_only=read_only)
        store = cls(conn, where, durability)
        try:
            store._prepare(read_only)
        except BaseException:
            conn.close()
            raise
        return store

    def _prepare(self, read_only: bool) -> None:
        try:
            self._conn.execute("PRAGMA busy_timeout = 5000")
            if not read_only:
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise AuditError(f"audit log {self._path} cannot use WAL (got {mode!r})")
            self._conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[self._durability]}")
            if not read_only and schema.is_empty(self._conn):
                self._create_schema()
            schema.check_is_audit_log(self._conn, self._path)
            self._load_state()
        except sqlite3.OperationalError as exc:
            raise AuditError(f"cannot open audit log {self._path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise AuditError(f"audit log {self._path} is unreadable or corrupt: {exc}") from exc

    def _create_schema(self) -> None:
        ops: list[tuple[str, Sequence[Any]]] = [(sql, ()) for sql in schema.DDL]
        try:
            self._atomic([*ops, *schema.meta_inserts()])
        except AuditError:
            # Another process may have created the log between our check and our write;
            # then its schema is checked like any other. Otherwise the failure stands.
            if schema.is_empty(self._conn):
                raise

    def _load_state(self) -> None:
        head = self._conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")
        row = head.fetchone()
        if row is not None:
            self._head_seq, self._head_hash = int(row[0]), str(row[1])
        for run_id, count, ended_at, manifest in self._conn.execute(
            "SELECT run_id, event_count, ended_at, manifest_hash FROM runs"
        ):
            self._runs[run_id] = _Run(int(count), ended_at is not None, str(manifest))
        # A run's manifest may have changed after its start: the newest "manifest" event says.
        for run_id, record in self._conn.execute(
            "SELECT run_id, record FROM events WHERE kind = 'system' AND tool = '_system.manifest'"
            " ORDER BY seq"
        ):
            if run_id in self._runs:
                found = json.loads(record).get("payload", {}).get("data", {}).get("sha256")
                if isinstance(found, str):
                    self._runs[run_id].manifest = found

    # -- the one way anything is written -------------------------------------------------------

    def _atomic(self, ops: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run ``ops`` as one transaction: all of them, or (on any failure) none and AuditError."""
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                for sql, params in ops:
                    conn.execute(sql, params)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise AuditError(
                        f"audit write to {self._path} failed, nothing was written: {exc}"
                    ) from exc
                raise

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
            state = self._runs.get(run_id)
            if kind == "run-start":
                if state is not None:
                    raise AuditError(f"run {run_id!r} was already started")
                run_seq = 1
            elif state is None:
                raise AuditError(f"run {run_id!r} was never started")
            elif state.ended:
                raise AuditError(f"run {run_id!r} has ended")
            else:
                run_seq = state.count + 1
            if state is not None:
                if kind == "system" and payload.get("kind") == "manifest":
                    state.manifest = str(payload.get("data", {}).get("sha256", state.manifest))
                payload = {**payload, "manifest_hash": state.manifest}
            seq = self._head_seq + 1
            record = make_record(
                seq=seq,
                event_id=os.urandom(16).hex(),
                run_id=run_id,
                run_seq=run_seq,
                kind=kind,
                timestamp=_now(),
                prev=self._head_hash,
                payload=payload,
            )
            text, digest = seal(record)
            self._atomic([(_INSERT_EVENT, event_row(record, text, digest)), run_sql(record)])
            self._head_seq, self._head_hash = seq, digest
            if state is None:
                self._runs[run_id] = _Run(1, False, str(payload.get("manifest_hash", "")))
            else:
                state.count = run_seq
                state.ended = kind == "run-end"
            return seq

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
        payload = {
            "principal": principal,
            "policy_name": policy_name,
            "manifest_hash": manifest_hash,
            "config": _jsonable(dict(config), "the run configuration"),
        }
        self._append(run_id, "run-start", payload, run_sql=_insert_run)

    def record_decision(self, run_id: str, call: ToolCall, decision: Decision) -> int:
        """Append a decision (with its call) and return the event's global sequence."""
        if call.run_id and call.run_id != run_id:
            raise AuditError(f"call belongs to run {call.run_id!r}, not {run_id!r}")
        payload = {
            "call": _jsonable(call, "the tool call"),
            "decision": _jsonable(decision, "the decision"),
        }
        return self._append(run_id, "decision", payload, run_sql=_count_run)

    def record_result(self, run_id: str, result: ToolResult) -> int:
        """Append the result of an executed call and return the event's global sequence."""
        payload = {"result": _jsonable(result, "the tool result")}
        return self._append(run_id, "result", payload, run_sql=_count_run)

    def record_system(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        """Append a ``_system`` event (``kind`` e.g. ``quarantine``, ``violation``)."""
        if not kind:
            raise AuditError("a system event needs a kind")
        body = {"kind": kind, "data": _jsonable(dict(payload), f"the {kind} event")}
        return self._append(run_id, "system", body, run_sql=_count_run)

    def end_run(self, run_id: str) -> None:
        """Close a run: appends its ``run-end`` event; later appends to it fail."""
        self._append(run_id, "run-end", {}, run_sql=_end_run)

    def checkpoint(self, private_key: bytes) -> Checkpoint:
        """Sign the current head (sequence, hash) with a raw Ed25519 key and store the checkpoint.

        Keep the returned checkpoint somewhere the log's writer cannot edit, and pass it to
        :meth:`verify` as ``anchor`` to detect a truncated tail even with checkpoints deleted.
        """
        with self._lock:
            cp = sign_checkpoint(private_key, self._head_seq, self._head_hash, _now())
            row = (cp.seq, cp.head_hash, cp.created_at, cp.key_id, cp.signature)
            self._atomic([(_INSERT_CHECKPOINT, row)])
            return cp

    def head(self) -> tuple[int, str]:
        """The sequence and hash of the last event (``(0, GENESIS_HASH)`` when empty)."""
        with self._lock:
            return self._head_seq, self._head_hash

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
            "SELECT seq, head_hash, created_at, key_id, signature FROM checkpoints ORDER BY id", ()
        )
        return [Checkpoint(*row) for row in rows]

    def verify(
        self, *, public_key: bytes | None = None, anchor: Checkpoint | None = None
    ) -> VerifyReport:
        """Recompute every stored value from the hashed records; report the first bad row.

        Reads a consistent snapshot through its own connection, so appends are not blocked.
        """
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
        return verify_file(self._path, public_key=public_key, anchor=anchor)

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            try:
                return list(self._conn.execute(sql, params))
            except sqlite3.Error as exc:
                raise AuditError(f"cannot read audit log {self._path}: {exc}") from exc

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


def verify_file(
    path: str | os.PathLike[str],
    *,
    public_key: bytes | None = None,
    anchor: Checkpoint | None = None,
) -> VerifyReport:
    """Verify the audit log at ``path`` (read-only; works while a writer appends)."""
    where = os.fspath(path)
    if not Path(where).exists():
        raise AuditError(f"no audit log at {where}")
    conn = _connect(where, read_only=True)
    try:
        conn.execute("BEGIN")  # one snapshot for every table
        schema.check_is_audit_log(conn, where)
        problem = schema.schema_problem(conn)
        if problem is not None:
            return VerifyReport(False, 0, problem[1], "sqlite_master", problem[0])
        order = ", ".join(EVENT_COLUMNS)
        return verify_rows(
            meta=conn.execute("SELECT key, value FROM meta"),
            events=conn.execute(f"SELECT {order} FROM events ORDER BY seq"),
            runs=conn.execute(f"SELECT {', '.join(schema.RUN_ORDER)} FROM runs"),
            checkpoints=conn.execute(
                f"SELECT {', '.join(schema.CHECKPOINT_ORDER)} FROM checkpoints ORDER BY id"
            ),
            public_key=public_key,
            anchor=anchor,
        )
    except sqlite3.Error as exc:
        raise AuditError(f"cannot read audit log {where}: {exc}") from exc
    finally:
        conn.close()

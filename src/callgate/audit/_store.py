"""The audit store: a segment written with one ``write()`` per event, indexed in SQLite behind it.

The kernel writes every decision here before anything executes. An append is one line of the
segment ``<db>.log`` (:mod:`callgate.audit._log`): under the segment's lock the writer takes in
what other writers (other stores, other processes) appended since it last looked, seals the
next record on the head it now knows, and writes it with one ``write()``, so writers on one
log take turns and the chain never forks. When ``append`` returns, the record survives the
process being killed; ``durability="fsync"`` also waits for the disk (``fdatasync``).

The SQLite database is an index of the segment, built behind it: the records appended since the
last batch are indexed in one transaction every ``index_every`` appends, before any read, at
every checkpoint and when the store closes. Its ``log_position`` row says how far it reaches;
a store that opens a log takes in and indexes whatever the segment holds beyond it (the
batch a killed writer never indexed), so nothing written is lost and the index can always be
rebuilt. An index that cannot be written (a full disk) does not fail an append: the segment
has the event; the next batch tries again.

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
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

from callgate._clock import utc_second
from callgate._errors import AuditError
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
    segment_line,
)
from callgate.audit._checkpoint import Checkpoint, sign_checkpoint
from callgate.audit._encode import MAX_RECORD_CHARS, fits, sanitize, shrink
from callgate.audit._files import (
    connect,
    default_anchor_path,
    default_key_path,
    verify_file,
)
from callgate.audit._keys import create_key, display
from callgate.audit._log import Line, Segment, log_path_for
from callgate.audit._verify import VerifyReport, parse_line
from callgate.audit._writer import LogWriter, Signing

log = logging.getLogger("callgate.audit")

Durability = Literal["normal", "fsync"]
_DURABILITIES: Final = frozenset({"normal", "fsync"})
#: Events between two automatic checkpoints (besides one at every run's end).
DEFAULT_CHECKPOINT_EVERY: Final = 1000
#: Appends between two index batches (besides one before every read and checkpoint).
DEFAULT_INDEX_EVERY: Final = 512
#: Records kept in memory for the next batch; past that they are read back from the segment.
_MAX_PENDING: Final = 65_536
#: Bytes of the segment read back for one index batch (a long-unindexed tail is indexed over
#: several batches, so a batch's memory and time stay bounded).
_READ_BACK_BYTES: Final = 8 << 20

_INSERT_EVENT: Final = (
    f"INSERT INTO events ({', '.join(EVENT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(EVENT_COLUMNS))})"
)
#: Where an index row holds the previous event's hash.
_PREV_COLUMN: Final = EVENT_COLUMNS.index("prev_hash")
_INSERT_RUN: Final = "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_COUNT_RUN: Final = "UPDATE runs SET event_count = ? WHERE run_id = ?"
_END_RUN: Final = "UPDATE runs SET ended_at = ?, end_seq = ?, event_count = ? WHERE run_id = ?"
_INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (seq, head_hash, runs, runs_digest, created_at, key_id, signature)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_POSITION: Final = "SELECT seq, offset, hash FROM log_position WHERE id = 1"
_MOVE: Final = "UPDATE log_position SET seq = ?, offset = ?, hash = ? WHERE id = 1"
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


class _Entry:
    """A record of the segment not yet indexed: where its line lies, its index row (every
    column of it, ``event_row``) and its hash; the record itself only for a run's start or end,
    which the ``runs`` row is made of.

    What waits for the index holds scalars, not the record's nested dicts: up to a batch of
    entries stays in memory, and the garbage collector would walk every record again and
    again. (A plain class with slots: a ``NamedTuple``'s constructor runs as interpreted Python
    even in the compiled build.)"""

    __slots__ = ("digest", "end", "record", "row", "start")

    def __init__(self, start: int, end: int, record: dict[str, Any], digest: str) -> None:
        self.start = start
        self.end = end
        self.digest = digest
        self.row = event_row(record, digest, start, end - start)
        self.record = record if self.kind in ("run-start", "run-end") else None

    @property
    def seq(self) -> int:
        return int(self.row[0])

    @property
    def run_id(self) -> str:
        return str(self.row[2])

    @property
    def kind(self) -> str:
        return str(self.row[4])


def _now() -> str:
    """The time now in UTC as ``datetime.isoformat(timespec="microseconds")`` writes it
    (``2026-01-01T00:00:00.000000+00:00``), the date and time of day formatted once a second."""
    seconds, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    # (``zfill``, not a ``:06d`` format: compiled, a format spec is a slow ``str.format`` call)
    return f"{utc_second(seconds)}.{str(nanoseconds // 1000).zfill(6)}+00:00"


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


def _manifest_of(record: Mapping[str, Any]) -> str | None:
    payload = record.get("payload")
    data = payload.get("data") if isinstance(payload, dict) else None
    found = data.get("sha256") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None


class AuditStore(LogWriter):
    """A tamper-evident audit log: a segment file and its SQLite index. Thread-safe; writers
    (threads, stores, processes) take turns.

    Use :meth:`open`; the store is a context manager that closes itself.
    """

    _signing: Signing | None

    def __init__(self, conn: sqlite3.Connection, path: str, *, durability: Durability,
                 signing: Signing | None, index_every: int) -> None:
        self._conn = conn
        self._path = path
        self._segment: Segment | None = None  # opened by ``_prepare``
        self._durability = durability
        self._signing = signing
        self._index_every = index_every
        self._lock = threading.RLock()
        self._closed = False
        self._head_seq = 0
        self._head_hash = GENESIS_HASH
        self._end = 0  # bytes of the segment taken in
        self._runs: dict[str, _Run] = {}
        self._pending: list[_Entry] = []  # records past the index, in order
        self._since_batch = 0  # appends since the last index batch was tried
        self._checkpoint_due = False
        self._observers: list[Callable[[AuditRecord], None]] = []

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
        index_every: int = DEFAULT_INDEX_EVERY,
    ) -> AuditStore:
        """Open (or create) the audit log at ``path`` (its segment is ``<path>.log``).

        ``durability="normal"`` keeps every appended event when the process is killed the moment
        the append returns; ``"fsync"`` also across power loss (an ``fdatasync`` per event).
        ``read_only`` opens the files without write access (every append then fails).

        With ``checkpoints`` (the default, for a writer) a checkpoint signed with the key at
        ``key_path`` (default ``<path>.key``, created on first use with mode 0600, its public
        key beside it as ``<key_path>.pub``) is stored when the log is created, at every run's
        end and every ``checkpoint_every`` events, and the anchor at ``anchor_path`` (default
        ``<path>.anchor``) is moved forward to it. ``checkpoints=False`` turns that off.
        ``index_every`` is how many appends the SQLite index may lag behind the segment.
        """
        if durability not in _DURABILITIES:
            raise AuditError(f"durability must be 'normal' or 'fsync', not {durability!r}")
        if checkpoint_every < 1:
            raise AuditError("checkpoint_every must be at least 1")
        if index_every < 1:
            raise AuditError("index_every must be at least 1")
        where = os.fspath(path)
        conn = connect(where, read_only=read_only)
        store: AuditStore | None = None
        try:
            signing = None
            if checkpoints and not read_only:
                key, _ = create_key(key_path if key_path is not None else default_key_path(where))
                anchor = anchor_path if anchor_path is not None else default_anchor_path(where)
                signing = Signing(key, Path(anchor), checkpoint_every)
            store = cls(conn, where, durability=durability, signing=signing,
                        index_every=index_every)
            store._prepare(read_only)
        except BaseException:
            if store is not None and store._segment is not None:
                store._segment.close()
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
            # The index can be rebuilt from the segment: it never waits for the disk.
            self._conn.execute("PRAGMA synchronous = NORMAL")
            created = not read_only and schema.is_empty(self._conn) and self._create_schema()
            schema.check_is_audit_log(self._conn, display(self._path))
            self._open_segment(read_only, created)
            self._load_state()
        except sqlite3.OperationalError as exc:
            raise AuditError(f"cannot open audit log {display(self._path)}: {exc}") from exc
        except sqlite3.Error as exc:
            raise AuditError(
                f"audit log {display(self._path)} is unreadable or corrupt: {exc}"
            ) from exc
        if not read_only:
            self._index()
        if self._signing is not None:
            if created:
                self._sign(self._signing.private_key)
            else:
                self._check_anchor()

    def _create_schema(self) -> bool:
        ops: list[tuple[str, Sequence[Any]]] = [(sql, ()) for sql in schema.DDL]
        try:
            self._atomic([*ops, *schema.meta_inserts()])
        except AuditError:
            # Another process may have created the log between our check and our write;
            # then its schema is checked like any other. Otherwise the failure stands.
            if schema.is_empty(self._conn):
                raise
            return False
        return True

    def _open_segment(self, read_only: bool, created: bool) -> None:
        where = log_path_for(self._path)
        position = self._conn.execute(_POSITION).fetchone()
        if position is None:
            raise AuditError(f"audit log {display(self._path)} has no log position row")
        seq = position[0]
        if not where.exists():
            if seq > 0:
                raise AuditError(f"the segment {display(where)} of audit log"
                                 f" {display(self._path)} is missing: its {seq} events are gone")
            if read_only:
                return  # an empty log read before any writer made its segment
        self._segment = Segment(where, read_only=read_only)
        if created:
            self._segment.sync_directory()

    def _load_state(self) -> None:
        seq, offset, digest = self._conn.execute(_POSITION).fetchone()
        row = self._conn.execute(_HEAD).fetchone()
        indexed = (0, GENESIS_HASH) if row is None else (int(row[0]), str(row[1]))
        if indexed != (seq, digest):
            raise AuditError(f"audit log {display(self._path)}: its index ends at event"
                             f" {indexed[0]} but its position says {seq}: the index was edited")
        self._head_seq, self._head_hash, self._end = int(seq), str(digest), int(offset)
        segment = self._segment
        if segment is not None and seq > 0:
            length = self._conn.execute("SELECT log_length FROM events WHERE seq = ?",
                                        (seq,)).fetchone()[0]
            line = segment.read(offset - length, offset)
            if not line.endswith(b"\n") or not line.startswith(f"{digest} ".encode()):
                raise AuditError(
                    f"the segment {display(segment.path)} does not hold event {seq} where its"
                    f" index says (byte {offset - length}): it was truncated or rewritten;"
                    " run `callgate audit verify` on it")
        self._runs = {}
        for run_id, start_seq, count, end_seq, manifest in self._conn.execute(
            "SELECT run_id, start_seq, event_count, end_seq, manifest_hash FROM runs"
            " ORDER BY start_seq"
        ):
            self._runs[run_id] = _Run(int(start_seq), int(count), end_seq, str(manifest))
        # A run's manifest may have changed after its start: the newest "manifest" event says.
        manifests = self._conn.execute(
            "SELECT run_id, log_offset, log_length FROM events"
            " WHERE kind = 'system' AND tool = '_system.manifest' ORDER BY seq").fetchall()
        for run_id, at, length in manifests:
            found = _manifest_of(self._line_record(at, length))
            if run_id in self._runs and found is not None:
                self._runs[run_id].manifest = found
        if segment is not None:
            with segment.locked(exclusive=not segment.read_only):
                self._take_in(cut=not segment.read_only)

    def _line_record(self, offset: int, length: int) -> dict[str, Any]:
        """The record of the line at ``offset`` (AuditError when it is not one)."""
        if self._segment is None:
            raise AuditError(f"audit log {display(self._path)} has no segment to read")
        data = self._segment.read(offset, offset + length)
        try:
            return parse_line(data[:-1].decode("utf-8"))[0]
        except (UnicodeDecodeError, ValueError, AuditError) as exc:
            raise AuditError(f"audit log {display(self._path)}: the line at byte {offset} of"
                             f" its segment is not a record: {exc}") from exc

    def _event_record(self, seq: int, offset: int, length: int) -> dict[str, Any]:
        """The record of event ``seq`` from its line at ``offset`` (AuditError when the line
        holds another event)."""
        record = self._line_record(offset, length)
        if record.get("seq") != seq:
            raise AuditError(f"audit event {seq}: its line in the segment holds"
                             f" event {record.get('seq')!r}")
        return record

    def _pending_record(self, entry: _Entry) -> AuditRecord:
        """An event not yet indexed, its record read back from the segment."""
        record = self._event_record(entry.seq, entry.start, entry.end - entry.start)
        return AuditRecord(entry.seq, entry.kind, entry.run_id, str(record["ts"]),
                           dict(record["payload"]), entry.digest, str(record.get("id", "")))

    def _check_anchor(self) -> None:
        """Refuse to write to a log that no longer matches its anchor (fail closed)."""
        where = None if self._signing is None else self._signing.anchor_path
        if where is None:
            return
        anchor = read_anchor(where)
        if anchor is not None and self._hash_at(anchor.seq) != anchor.head_hash:
            raise AuditError(
                f"audit log {display(self._path)} does not match its anchor"
                f" {display(where)} (sequence {anchor.seq}): it was"
                " truncated or rewritten; run `callgate audit verify` on it"
            )

    def _hash_at(self, seq: int) -> str | None:
        if seq == 0:
            return GENESIS_HASH
        for entry in self._pending:
            if entry.seq == seq:
                return entry.digest
        row = self._conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else str(row[0])

    # -- the segment -----------------------------------------------------------------------------

    def _take_in(self, *, cut: bool) -> None:
        """Holding the segment's lock: take in the lines other writers appended since this
        store last looked (their records join the next index batch). A torn tail is cut off
        when ``cut`` (the exclusive lock), else left for a writer to cut."""
        segment = self._segment
        assert segment is not None
        size = segment.size()
        if size < self._end:
            raise AuditError(
                f"audit log {display(self._path)} changed under this writer: its segment is"
                f" shorter than the {self._end} bytes this store has seen (truncated)"
            )
        if size == self._end:
            return
        lines, stop = segment.lines(self._end, size)
        for line in lines:
            self._take_line(line)
        if stop < size and cut:
            log.warning("audit log %s: cutting a torn tail of %d bytes (an append that was"
                        " interrupted and never acknowledged)", display(segment.path),
                        size - stop)
            if not segment.cut(stop):  # an append now would join the torn line
                raise AuditError(f"audit log {display(self._path)}: cannot cut the torn tail"
                                 f" of its segment at byte {stop}")

    def _take_line(self, line: Line) -> None:
        """Take in one line another writer appended: it must continue the chain."""
        try:
            record, digest = parse_line(line.text)
        except (ValueError, AuditError) as exc:
            raise AuditError(f"audit log {display(self._path)}: the line at byte {line.start}"
                             f" of its segment is not a record: {exc}") from exc
        if record.get("seq") != self._head_seq + 1 or record.get("prev") != self._head_hash:
            raise AuditError(
                f"audit log {display(self._path)}: the line at byte {line.start} of its segment"
                f" does not continue the chain at event {self._head_seq}: it was edited"
            )
        seq, run_id, kind = int(record["seq"]), str(record["run_id"]), record["kind"]
        payload = record["payload"]
        if kind == "run-start":
            self._runs[run_id] = _Run(seq, 1, None, str(payload.get("manifest_hash")))
        else:
            state = self._runs.get(run_id)
            if state is not None:
                state.count = int(record["run_seq"])
                if kind == "run-end":
                    state.end_seq = seq
                elif kind == "system" and payload.get("kind") == "manifest":
                    state.manifest = _manifest_of(record) or state.manifest
        self._keep(_Entry(line.start, line.end, record, digest))
        self._head_seq, self._head_hash, self._end = seq, digest, line.end

    def _keep(self, entry: _Entry) -> None:
        """Hold a record for the next index batch (the oldest are read back later if many)."""
        if len(self._pending) >= _MAX_PENDING:
            self._pending.clear()  # the index reads them back from the segment
        self._pending.append(entry)

    def _append(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            segment = self._segment
            if segment is None or segment.read_only:
                raise AuditError(f"audit log {display(self._path)} was opened read-only")
            segment.lock(exclusive=True)
            try:
                if segment.size() != self._end:
                    self._take_in(cut=True)
                record, text, digest = _seal(self._record(run_id, kind, payload))
                data = segment_line(text, digest)
                start = self._end  # the segment's size: checked just above
                segment.append(data, at=start, sync=self._durability == "fsync")
                self._end = start + len(data)
            finally:
                segment.unlock()
            seq, manifest = int(record["seq"]), str(record["payload"].get("manifest_hash"))
            state = self._runs.get(run_id)
            if state is None or kind == "run-start":
                self._runs[run_id] = _Run(seq, 1, None, manifest)
            else:
                state.count, state.manifest = int(record["run_seq"]), manifest
                state.end_seq = seq if kind == "run-end" else None
            self._head_seq, self._head_hash = seq, digest
            self._keep(_Entry(start, self._end, record, digest))
            self._since_batch += 1
            if self._since_batch >= self._index_every:  # a failed batch waits as long again
                self._since_batch = 0
                self._index_quietly()
            self._after_append(kind, seq)
            if self._observers:
                self._notify(AuditRecord(seq, kind, run_id, str(record["ts"]),
                                         dict(record["payload"]), digest, str(record["id"])))
            return seq

    def _record(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope of the next event (made under the segment's lock, after taking in)."""
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

    # -- the index -------------------------------------------------------------------------------

    def _transaction(self, build: Callable[[], Sequence[tuple[str, Sequence[Any]]]]) -> None:
        """One write transaction of the index: all of what ``build`` returns, or (on any
        failure) none of it and AuditError."""
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                for sql, rows in _batched(build()):
                    conn.executemany(sql, rows)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error | ValueError | UnicodeError):
                    raise AuditError(
                        f"audit write to {display(self._path)} failed, nothing was written: {exc}"
                    ) from exc
                raise

    def _atomic(self, ops: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run ``ops`` as one transaction (see :meth:`_transaction`)."""
        self._transaction(lambda: ops)

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            # A failed rollback leaves SQLite to discard the transaction itself (it never
            # commits an unfinished one); the original error is the one worth reporting.
            pass

    def _index(self) -> None:
        """Index every record this store has taken in, in one transaction (records another
        store indexed meanwhile are skipped; those not held in memory are read back)."""
        with self._lock:
            if self._segment is None or self._segment.read_only or (
                    not self._pending and self._indexed_to() == self._end):
                return
            while True:  # one transaction per stretch of at most ``_READ_BACK_BYTES`` read back
                before = self._indexed_to()
                self._transaction(self._index_ops)
                after = self._indexed_to()
                if after >= self._end or after == before:
                    break
            self._pending.clear()

    def _index_quietly(self) -> None:
        """``_index``, logging a failure: the segment holds the events, a later batch retries."""
        try:
            self._index()
        except AuditError as exc:
            log.error("audit index batch failed (the segment has every event): %s", exc)

    def _indexed_to(self) -> int:
        row = self._conn.execute(_POSITION).fetchone()
        return int(row[1])

    def _index_ops(self) -> list[tuple[str, Sequence[Any]]]:
        seq, offset, digest = self._conn.execute(_POSITION).fetchone()
        entries = [e for e in self._pending if e.start >= offset]
        first = entries[0].start if entries else self._end
        if offset < first:
            span = _READ_BACK_BYTES
            while not (back := self._read_back(offset, min(first, offset + span))) and \
                    offset + span < first:
                span *= 2  # a line longer than that: read on to its end
            # the rest of the gap is for the next batches: what follows it waits until then
            reached = back[-1].end if back else offset
            entries = back + entries if reached == first else back
        if not entries:
            return []
        head = (int(seq), str(digest))
        ops: list[tuple[str, Sequence[Any]]] = []
        runs: dict[str, tuple[dict[str, Any] | None, int, dict[str, Any] | None]] = {}
        for entry in entries:
            row = entry.row
            if (row[0], row[_PREV_COLUMN]) != (head[0] + 1, head[1]):
                raise AuditError(f"the segment does not continue the index at event {head[0]}")
            ops.append((_INSERT_EVENT, row))
            run_id, kind = entry.run_id, entry.kind
            start, _, end = runs.get(run_id, (None, 0, None))
            runs[run_id] = (entry.record if kind == "run-start" else start, int(row[3]),
                            entry.record if kind == "run-end" else end)
            head = (entry.seq, entry.digest)
        for run_id, (start, count, end) in runs.items():
            if start is not None:
                ops.append((_INSERT_RUN, run_row(start, count, end)))
            elif end is not None:
                ops.append((_END_RUN, (end["ts"], end["seq"], count, run_id)))
            else:
                ops.append((_COUNT_RUN, (count, run_id)))
        ops.append((_MOVE, (head[0], entries[-1].end, head[1])))
        return ops

    def _read_back(self, start: int, stop: int) -> list[_Entry]:
        """Records of the segment in ``[start, stop)`` (below what this store took in)."""
        assert self._segment is not None
        lines, _ = self._segment.lines(start, stop)
        out = []
        for line in lines:
            try:
                record, digest = parse_line(line.text)
            except (ValueError, AuditError) as exc:
                raise AuditError(f"the line at byte {line.start} of the segment is not a"
                                 f" record: {exc}") from exc
            out.append(_Entry(line.start, line.end, record, digest))
        return out

    # -- checkpoints ---------------------------------------------------------------------------

    def _sign(self, private_key: bytes) -> Checkpoint:
        """Store a checkpoint of the current head and move the anchor (if any) to it."""
        anchor_path = self._signing.anchor_path if self._signing is not None else None
        guard = locked(anchor_path, exclusive=True) if anchor_path else nullcontext()
        with self._lock, guard:
            segment = self._segment
            if segment is not None and not segment.read_only:
                with segment.locked(exclusive=True):  # sign the head as it is in the file
                    self._take_in(cut=True)
            self._index()
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

    def head(self) -> tuple[int, str]:
        """The sequence and hash of the log's last event (``(0, GENESIS_HASH)`` when empty).

        Read from the segment, so events other writers appended count too (once the store is
        closed: the last head it saw).
        """
        with self._lock:
            if self._closed or self._segment is None:
                return self._head_seq, self._head_hash
            with self._segment.locked(exclusive=False):
                self._take_in(cut=False)
            return self._head_seq, self._head_hash

    def run_ids(self) -> list[str]:
        """Every run's id, in the order the runs started."""
        rows = self._read("SELECT run_id FROM runs ORDER BY start_seq", ())
        known = [row[0] for row in rows]
        seen = set(known)
        for entry in self._pending:  # a read-only store's runs past its index
            if entry.kind == "run-start" and entry.run_id not in seen:
                known.append(entry.run_id)
                seen.add(entry.run_id)
        return known

    def records(self, run_id: str) -> list[AuditRecord]:
        """The events of one run in order (an empty list for an unknown run)."""
        rows = self._read(
            "SELECT seq, kind, run_id, timestamp, log_offset, log_length, hash, id FROM events"
            " WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
        with self._lock:
            out = []
            for seq, kind, rid, timestamp, offset, length, digest, event_id in rows:
                record = self._event_record(seq, offset, length)
                out.append(AuditRecord(seq, kind, rid, timestamp, dict(record["payload"]),
                                       digest, event_id))
            last = out[-1].seq if out else 0
            out.extend(self._pending_record(e) for e in self._pending
                       if e.run_id == run_id and e.seq > last)
            return out

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
        """Recompute every stored value from the segment; report the first bad row.

        With checkpoints on, signatures are checked with the store's own public key and the
        store's anchor file is required, unless ``public_key`` / ``anchor`` are given. Reads a
        consistent snapshot through its own connection, so appends are not blocked.
        """
        with self._lock:
            if self._closed:
                raise AuditError("the audit store is closed")
            self._index()
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
                self._index()  # what was appended is readable at once
                return list(self._conn.execute(sql, params))
            except sqlite3.Error as exc:
                raise AuditError(f"cannot read audit log {display(self._path)}: {exc}") from exc

    def close(self) -> None:
        """Index what is pending and close the files. Safe to call twice."""
        with self._lock:
            if not self._closed:
                self._index_quietly()
                self._closed = True
                self._conn.close()
                if self._segment is not None:
                    self._segment.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _batched(ops: Sequence[tuple[str, Sequence[Any]]]
             ) -> list[tuple[str, list[Sequence[Any]]]]:
    """Consecutive statements with the same SQL as one statement over many rows."""
    out: list[tuple[str, list[Sequence[Any]]]] = []
    for sql, params in ops:
        if out and out[-1][0] == sql:
            out[-1][1].append(params)
        else:
            out.append((sql, [params]))
    return out


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

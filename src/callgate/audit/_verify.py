"""Verification of an audit log from its segment and its index: every value is recomputed.

The checks run in a fixed order and stop at the first problem, so the report names the first bad
row: ``meta``; then the chain, line by line of the segment (``log``, by sequence), each line
against its ``events`` index row while the index lasts; then the ``runs`` index (as of the last
indexed event), the ``log_position`` row, the checkpoints and an external anchor. The index
may end before the segment (the batch not yet indexed); it may never say more than the segment
holds. Verification is storage-agnostic: it takes the segment's lines and the tables' rows as
tuples in the column order of :mod:`callgate.audit._chain`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from callgate._errors import AuditError
from callgate.audit._chain import (
    EVENT_COLUMNS,
    GENESIS_HASH,
    META_ROWS,
    RECORD_KINDS,
    RECORD_VERSION,
    RUN_COLUMNS,
    canonical_json,
    event_row,
    run_row,
    runs_digest,
    sha256_hex,
)
from callgate.audit._checkpoint import Checkpoint, signature_problem

#: The columns of a ``checkpoints`` row, in storage order.
CHECKPOINT_COLUMNS = (
    "id",
    "seq",
    "head_hash",
    "runs",
    "runs_digest",
    "created_at",
    "key_id",
    "signature",
)


def parse_line(line: str) -> tuple[dict[str, Any], str]:
    """The record a line of the segment holds and its hash: ``HASH JSON``, where JSON is the
    canonical JSON of an envelope of a known version and kind, with a payload and a run id, and
    HASH its SHA-256. Raises ValueError naming what is wrong."""
    digest, space, text = line.partition(" ")
    if not space or len(digest) != 64:
        raise ValueError("line does not start with its record's hash")
    try:
        record = json.loads(text)
        canonical = canonical_json(record)
    except (ValueError, RecursionError, AuditError):
        # json.loads accepts NaN and Infinity, which canonical JSON refuses.
        raise ValueError("record is not JSON") from None
    if not isinstance(record, dict) or canonical != text:
        raise ValueError("record is not canonical JSON of an event")
    if sha256_hex(text) != digest:
        raise ValueError("record does not match the hash beside it: it was edited")
    kind = record.get("kind")
    if record.get("v") != RECORD_VERSION or not isinstance(kind, str) or kind not in RECORD_KINDS:
        raise ValueError("record has an unknown version or kind")
    if not isinstance(record.get("payload"), dict) or not isinstance(record.get("run_id"), str):
        raise ValueError("record lacks a payload or run id")
    if type(record.get("seq")) is not int or type(record.get("run_seq")) is not int:
        raise ValueError("record has no integer sequences")
    return record, digest


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of ``verify``: ``ok``, how many rows were checked, and the first problem.

    ``table`` and ``row`` name the first bad row: an event's sequence, a run's id, a checkpoint's
    id (or ``"anchor"``), or a meta key. ``checked`` counts the rows read before stopping.
    ``anchor`` is the sequence of the external anchor that was checked (``None``: none was) and
    ``signatures`` whether checkpoint signatures were checked against a public key.
    """

    ok: bool
    checked: int
    problem: str | None = None
    table: str | None = None
    row: str | int | None = None
    anchor: int | None = None
    signatures: bool = False

    def __str__(self) -> str:
        if self.ok:
            return f"audit log ok ({self.checked} rows checked)"
        return f"audit log tampered: {self.table} row {self.row!r}: {self.problem}"


class _TamperedError(AuditError):
    """Internal: carries the first problem out of the nested checks."""

    def __init__(self, table: str, row: str | int | None, problem: str) -> None:
        super().__init__(problem)
        self.table, self.row, self.problem = table, row, problem


def _same(stored: Any, wanted: Any) -> bool:
    # Exact type too: SQLite would happily hand back '3' for a column edited from 3.
    return type(stored) is type(wanted) and stored == wanted


class _RunState:
    __slots__ = ("count", "end", "start")

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.count = 1
        self.end: dict[str, Any] | None = None


class _Verifier:
    """One pass over the tables; raises :class:`_TamperedError` at the first problem."""

    def __init__(self, checkpoints: list[Checkpoint]) -> None:
        self.checked = 0
        self.head_seq = 0
        self.head_hash = GENESIS_HASH
        self.runs: dict[str, _RunState] = {}
        # What the chain says at each checkpointed sequence: (hash, runs, runs digest).
        self.wanted: dict[int, tuple[str, int, str] | None] = {cp.seq: None for cp in checkpoints}
        self.wanted[0] = (GENESIS_HASH, 0, runs_digest([]))
        self.where: tuple[str, Any] = ("meta", None)
        # how far the index reaches: events, the byte after the last one's line, the runs then
        self.indexed = 0
        self.indexed_end = 0
        self.indexed_hash = GENESIS_HASH
        self.indexed_runs: dict[str, tuple[Any, ...]] | None = None

    def meta(self, rows: Iterable[Sequence[Any]]) -> None:
        found = sorted((tuple(row) for row in rows), key=repr)
        self.checked += len(found)
        expected = sorted(META_ROWS, key=repr)
        for want in expected:
            if want not in found:
                raise _TamperedError(
                    "meta", want[0], f"expected meta row {want!r} is missing or edited"
                )
        for row in found:
            if row not in expected:
                raise _TamperedError("meta", str(row[0]), f"unexpected meta row {row!r}")

    def chain(self, lines: Iterable[tuple[int, int, str]],
              rows: Iterable[Sequence[Any]]) -> None:
        """The segment's lines in order, each against its index row while the index lasts;
        the runs as of the last indexed event are kept for ``runs_index``."""
        index = iter(rows)
        pending: tuple[Any, ...] | None = _next_row(index)
        if pending is None:
            self.indexed_runs = {}
        for start, end, text in lines:
            self.checked += 1
            record, digest = self._line(start, text)
            indexed = pending is not None
            if pending is not None:
                self._indexed(pending, record, digest, start, end - start)
                pending = _next_row(index)
                self.indexed, self.indexed_end, self.indexed_hash = record["seq"], end, digest
            self._run(int(record["seq"]), record)
            self.head_seq, self.head_hash = int(record["seq"]), digest
            if indexed and pending is None:  # the last indexed event: the runs index's moment
                self.indexed_runs = self._run_rows()
            if self.head_seq in self.wanted:
                self.wanted[self.head_seq] = (self.head_hash, len(self.runs),
                                              self._runs_digest())
        if pending is not None:
            seq = pending[0]
            self.where = ("events", seq)
            raise _TamperedError(
                "events", seq,
                f"the index has event {seq!r} but the segment ends at {self.head_seq}: the"
                " segment was truncated or its lines deleted")

    def _line(self, start: int, text: str) -> tuple[dict[str, Any], str]:
        expected = self.head_seq + 1
        self.where = ("log", expected)
        try:
            record, digest = parse_line(text)
        except ValueError as exc:
            raise _TamperedError("log", expected, f"line at byte {start}: {exc}") from None
        seq = record["seq"]
        if seq != expected:
            why = (f"event {expected} is missing (deleted or renumbered)" if seq > expected
                   else f"expected sequence {expected}: a line was inserted or reordered")
            raise _TamperedError("log", expected, why)
        if record.get("prev") != self.head_hash:
            raise _TamperedError(
                "log", expected,
                f"previous hash does not chain to event {self.head_seq}: a line before this"
                " one was edited, inserted, deleted or reordered")
        return record, digest

    def _indexed(self, row: tuple[Any, ...], record: dict[str, Any], digest: str, offset: int,
                 length: int) -> None:
        seq = record["seq"]
        self.where = ("events", row[0])
        if not _same(row[0], seq):
            if isinstance(row[0], int) and row[0] > seq:
                why = f"event {seq} is missing from the index (deleted or renumbered)"
            else:
                why = f"expected sequence {seq}: a row was inserted or reordered"
            raise _TamperedError("events", row[0], why)
        wanted = event_row(record, digest, offset, length)
        for name, stored, want in zip(EVENT_COLUMNS, row, wanted, strict=True):
            if not _same(stored, want):
                raise _TamperedError(
                    "events", seq,
                    f"column {name} = {stored!r} disagrees with the segment ({want!r})")

    def _run_rows(self) -> dict[str, tuple[Any, ...]]:
        return {run_id: run_row(state.start, state.count, state.end)
                for run_id, state in self.runs.items()}

    def _runs_digest(self) -> str:
        return runs_digest(
            (run_id, state.start["seq"], state.count, None if state.end is None
             else state.end["seq"])
            for run_id, state in self.runs.items()
        )

    def position(self, rows: Iterable[Sequence[Any]]) -> None:
        """The index's position: the last indexed event, the byte after its line, its hash."""
        found = [tuple(row) for row in rows]
        self.checked += len(found)
        self.where = ("log_position", 1)
        wanted = (1, self.indexed, self.indexed_end, self.indexed_hash)
        if len(found) != 1 or not all(_same(a, b) for a, b in zip(found[0], wanted, strict=True)):
            raise _TamperedError("log_position", 1,
                                 f"position {found!r} is not where the index ends ({wanted!r})")

    def _run(self, seq: int, record: dict[str, Any]) -> None:
        run_id, kind = record["run_id"], record["kind"]
        state = self.runs.get(run_id)
        if kind == "run-start":
            if state is not None:
                raise _TamperedError("log", seq, f"run {run_id!r} started twice")
            if record.get("run_seq") != 1:
                raise _TamperedError("log", seq, "a run-start must be the run's first event")
            self.runs[run_id] = _RunState(record)
            return
        if state is None:
            raise _TamperedError(
                "log", seq, f"event for run {run_id!r}, which was never started"
            )
        if state.end is not None:
            raise _TamperedError("log", seq, f"event for run {run_id!r} after its run-end")
        if record.get("run_seq") != state.count + 1:
            raise _TamperedError("log", seq, f"run sequence is not {state.count + 1}")
        state.count += 1
        if kind == "run-end":
            state.end = record

    def runs_index(self, rows: Iterable[Sequence[Any]]) -> None:
        stored: dict[Any, tuple[Any, ...] | None] = {}
        for stored_row in rows:
            self.checked += 1
            stored[stored_row[0]] = tuple(stored_row)
        for run_id, wanted in (self.indexed_runs or {}).items():
            self.where = ("runs", run_id)
            row = stored.pop(run_id, None)
            if row is None:
                raise _TamperedError(
                    "runs", run_id, "run of the chain is missing from the runs index"
                )
            for name, have, want in zip(RUN_COLUMNS, row, wanted, strict=True):
                if not _same(have, want):
                    raise _TamperedError(
                        "runs",
                        run_id,
                        f"column {name} = {have!r} disagrees with the chain ({want!r})",
                    )
        for run_id in stored:
            raise _TamperedError("runs", run_id, "runs row has no run-start event in the chain")

    def checkpoints(
        self, rows: list[tuple[int, Checkpoint]], public_key: bytes | None, anchored: bool
    ) -> None:
        if public_key is not None and not rows and not anchored:
            raise _TamperedError(
                "checkpoints",
                None,
                "no signed checkpoint: a truncated tail or a rewritten chain could not be detected",
            )
        last_seq = 0
        for index, (row_id, cp) in enumerate(rows, start=1):
            if row_id != index:
                raise _TamperedError(
                    "checkpoints",
                    row_id,
                    f"expected checkpoint id {index}: a checkpoint was deleted or inserted",
                )
            if cp.seq < last_seq:
                raise _TamperedError("checkpoints", row_id, "checkpoint sequence goes backwards")
            last_seq = cp.seq
            self.checkpoint(row_id, cp, public_key)

    def checkpoint(self, row: int | str, cp: Checkpoint, public_key: bytes | None) -> None:
        self.where = ("checkpoints", row)
        if public_key is not None:
            problem = signature_problem(cp, public_key)
            if problem is not None:
                raise _TamperedError("checkpoints", row, problem)
        if cp.seq > self.head_seq:
            raise _TamperedError(
                "checkpoints",
                row,
                f"checkpoint signs sequence {cp.seq} and {cp.runs} runs but the chain ends at"
                f" {self.head_seq} with {len(self.runs)}: the tail was truncated",
            )
        wanted = self.wanted.get(cp.seq)
        if wanted is None or wanted[0] != cp.head_hash:
            raise _TamperedError(
                "checkpoints",
                row,
                f"checkpoint hash differs from the chain at sequence"
                f" {cp.seq}: the chain was rewritten",
            )
        if wanted[1:] != (cp.runs, cp.runs_digest):
            raise _TamperedError(
                "checkpoints",
                row,
                f"checkpoint covers {cp.runs} runs with another digest than the chain's"
                f" {wanted[1]} at sequence {cp.seq}: a run was deleted or altered",
            )

    def anchor(self, anchor: Checkpoint, stored: list[tuple[int, Checkpoint]],
               public_key: bytes | None) -> None:
        self.checkpoint("anchor", anchor, public_key)
        newest = max((cp.seq for _, cp in stored), default=0)
        if anchor.seq < newest:
            raise _TamperedError(
                "checkpoints",
                "anchor",
                f"the anchor (sequence {anchor.seq}) is older than the log's newest checkpoint"
                f" ({newest}): it was replaced by an older one, or its last update failed"
                " (`callgate audit checkpoint` moves it forward after checking the log)",
            )


def _next_row(rows: Iterator[Sequence[Any]]) -> tuple[Any, ...] | None:
    row = next(rows, None)
    return None if row is None else tuple(row)


def _checkpoint_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[int, Checkpoint]]:
    out: list[tuple[int, Checkpoint]] = []
    for row in rows:
        row_id, seq, head_hash, runs, digest, created_at, kid, signature = row
        fields = (head_hash, digest, created_at, kid, signature)
        if type(seq) is not int or type(runs) is not int or not all(
            isinstance(f, str) for f in fields
        ):
            raise _TamperedError(
                "checkpoints", row_id, "checkpoint row has a value of the wrong type"
            )
        out.append(
            (row_id, Checkpoint(seq, head_hash, runs, digest, created_at, kid, signature))
        )
    return out


def verify_rows(
    *,
    meta: Iterable[Sequence[Any]],
    lines: Iterable[tuple[int, int, str]],
    events: Iterable[Sequence[Any]],
    runs: Iterable[Sequence[Any]],
    position: Iterable[Sequence[Any]],
    checkpoints: Iterable[Sequence[Any]],
    public_key: bytes | None = None,
    anchor: Checkpoint | None = None,
) -> VerifyReport:
    """Verify an audit log given its segment's complete lines ``(start, end, text)`` in order
    and its tables' rows; ``events`` must come in ``seq`` order.

    With ``public_key``, every stored checkpoint must be signed by it and at least one (or the
    anchor) must exist. ``anchor`` is a checkpoint kept outside the log; it must match the
    chain too.
    """
    verifier: _Verifier | None = None
    extra = (None if anchor is None else anchor.seq, public_key is not None)
    try:
        cps = _checkpoint_rows(checkpoints)
        wanted = [cp for _, cp in cps] + ([anchor] if anchor is not None else [])
        verifier = _Verifier(wanted)
        verifier.meta(meta)
        verifier.chain(lines, events)
        verifier.runs_index(runs)
        verifier.position(position)
        verifier.checked += len(cps)
        verifier.checkpoints(cps, public_key, anchor is not None)
        if anchor is not None:
            verifier.anchor(anchor, cps, public_key)
    except _TamperedError as bad:
        checked = verifier.checked if verifier is not None else 0
        return VerifyReport(False, checked, bad.problem, bad.table, bad.row, *extra)
    except AuditError:
        raise  # a caller's mistake (a malformed key), not a property of the log
    except Exception as exc:
        # A row shaped beyond every check above is still a bad row, never a crash.
        if verifier is None:
            return VerifyReport(
                False, 0, f"unreadable checkpoint rows: {exc!r}", "checkpoints", None, *extra
            )
        table, row = verifier.where
        return VerifyReport(
            False, verifier.checked, f"row cannot be checked: {exc!r}", table, row, *extra
        )
    return VerifyReport(True, verifier.checked, None, None, None, *extra)

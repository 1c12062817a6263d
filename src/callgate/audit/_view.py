"""Reading an audit log for people: runs summarised, a run's calls paired with their results,
and the segment followed as other processes append to it.

Everything here only reads. ``open_log`` opens the store read-only (it never appends, indexes
or cuts a torn tail); ``follow`` reads the segment with ``pread`` and takes no lock, so it
never holds a writer up. The rendering (``callgate audit runs | show | tail``) is in
``callgate.cli._audit``; these are plain values it and the exporters share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from callgate._errors import AuditError
from callgate.audit._chain import GENESIS_HASH
from callgate.audit._files import check_file
from callgate.audit._keys import display
from callgate.audit._log import Segment, log_path_for
from callgate.audit._open import AuditLog
from callgate.audit._store import AuditRecord, AuditStore
from callgate.audit._verify import parse_line

#: Taint sources every tool output carries; left out of summaries (they say nothing).
_PLAIN_SOURCES = frozenset({"tool-output"})


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run at a glance: who, under which policy, when, and how its calls were decided."""

    run_id: str
    principal: str
    policy: str
    started_at: str
    ended_at: str | None
    calls: int
    allowed: int
    denials: int
    approvals: int
    quarantine: str | None  # the rule or statement that quarantined the run
    events: int

    def to_json(self) -> dict[str, Any]:
        """The summary as one JSON object (``callgate audit runs --json``)."""
        return {"run_id": self.run_id, "principal": self.principal, "policy": self.policy,
                "started_at": self.started_at, "ended_at": self.ended_at, "calls": self.calls,
                "allowed": self.allowed, "denials": self.denials, "approvals": self.approvals,
                "quarantine": self.quarantine, "events": self.events}


@dataclass(frozen=True, slots=True)
class CallView:
    """A decided call: its decision record and, when it ran, its result record."""

    decision: AuditRecord
    result: AuditRecord | None = None
    #: the taint the run carried when the call was decided: every source an output recorded
    #: before it brought in (the run's taint, which the checks read besides the call's own)
    run_taint: tuple[str, ...] = ()

    @property
    def call(self) -> dict[str, Any]:
        """The recorded call (tool, class, action, parameters, taint, ids)."""
        return _mapping(self.decision.payload.get("call"))

    @property
    def verdict(self) -> str:
        """``allow``, ``deny`` or ``require-approval``."""
        return str(_mapping(self.decision.payload.get("decision")).get("verdict", "?"))

    @property
    def reasons(self) -> list[dict[str, Any]]:
        """The decision's reasons: ``{"id", "check", "message"}`` each."""
        found = _mapping(self.decision.payload.get("decision")).get("reasons")
        return [dict(r) for r in found if isinstance(r, Mapping)] if isinstance(found, list) \
            else []

    @property
    def witness(self) -> dict[str, Any] | None:
        """The behavioral witness (statement, offending events, detail), if any."""
        found = _mapping(self.decision.payload.get("decision")).get("witness")
        return dict(found) if isinstance(found, Mapping) else None

    @property
    def call_id(self) -> str:
        """The call's id (``RUN:N``)."""
        decided = _mapping(self.decision.payload.get("decision")).get("call_id")
        return str(self.call.get("id") or decided or "")

    @property
    def taint_in(self) -> list[str]:
        """The taint sources the call's inputs carried (as the caller gave them)."""
        return _sources(self.call.get("taint"))

    @property
    def taint_seen(self) -> list[str]:
        """What the decision saw: the call's own taint and the run's."""
        return sorted({*self.taint_in, *self.run_taint})

    @property
    def taint_out(self) -> list[str]:
        """The taint sources of the call's output (none when it did not run)."""
        if self.result is None:
            return []
        return _sources(_mapping(self.result.payload.get("result")).get("taint"))

    @property
    def decided_ms(self) -> float | None:
        """Milliseconds from the call's arrival to its decision being in the log."""
        start = _time(self.call.get("timestamp"))
        end = _time(self.decision.timestamp)
        return None if start is None or end is None else max(0.0, (end - start) * 1000)

    @property
    def status(self) -> str | None:
        """The result's status (``ok``, ``error``, ``denied``…), ``None`` when it did not run."""
        if self.result is None:
            return None
        return str(_mapping(self.result.payload.get("result")).get("status", "?"))

    @property
    def ran_ms(self) -> float | None:
        """How long the call ran, as its executor measured it."""
        if self.result is None:
            return None
        found = _mapping(self.result.payload.get("result")).get("duration_ms")
        return float(found) if isinstance(found, int | float) else None

    def to_json(self) -> dict[str, Any]:
        """The call as one JSON object (``callgate audit show --json``)."""
        call = self.call
        result = _mapping(self.result.payload.get("result")) if self.result else None
        return {"seq": self.decision.seq, "hash": self.decision.hash,
                "timestamp": self.decision.timestamp, "call_id": self.call_id,
                "tool": call.get("tool"), "tool_class": call.get("tool_class"),
                "action": call.get("action"), "parameters": call.get("parameters"),
                "verdict": self.verdict, "reasons": self.reasons, "witness": self.witness,
                "taint_in": self.taint_in, "taint_run": list(self.run_taint),
                "taint_out": self.taint_out,
                "decided_ms": self.decided_ms, "ran_ms": self.ran_ms,
                "result": None if result is None or self.result is None else {
                    "seq": self.result.seq, "hash": self.result.hash,
                    "status": result.get("status"), "error": result.get("error"),
                    "output": result.get("output")}}


@dataclass(frozen=True, slots=True)
class RunView:
    """One run in full: its summary, its decided calls in order, its system events."""

    summary: RunSummary
    calls: list[CallView] = field(default_factory=list)
    system: list[AuditRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The run as one JSON object (``callgate audit show --json``)."""
        return {"run": self.summary.to_json(), "calls": [c.to_json() for c in self.calls],
                "system": [{"seq": r.seq, "hash": r.hash, "timestamp": r.timestamp,
                            "kind": r.payload.get("kind"), "data": r.payload.get("data")}
                           for r in self.system]}


def open_log(path: str | os.PathLike[str]) -> AuditStore:
    """The audit log at ``path`` opened read-only; AuditError when it is missing or not a log.

    The store appends nothing, indexes nothing and leaves a torn tail for a writer to cut.
    """
    where = os.fspath(path)
    if not Path(where).is_file():
        raise AuditError(f"audit log {display(where)} does not exist")
    check_file(where)
    return AuditStore.open(where, read_only=True)


def pair_calls(records: Sequence[AuditRecord]) -> list[CallView]:
    """The run's decisions in order, each with the result recorded for its call (if any)."""
    calls: list[CallView] = []
    waiting: dict[str, int] = {}
    run_taint: set[str] = set()
    for record in records:
        if record.kind == "decision":
            view = CallView(record, run_taint=tuple(sorted(run_taint)))
            waiting[view.call_id] = len(calls)
            calls.append(view)
        elif record.kind == "result":
            call_id = str(_mapping(record.payload.get("result")).get("call_id", ""))
            at = waiting.pop(call_id, None)
            if at is not None:
                calls[at] = CallView(calls[at].decision, record, calls[at].run_taint)
            run_taint.update(_sources(_mapping(record.payload.get("result")).get("taint")))
    return calls


def summarize(run_id: str, records: Sequence[AuditRecord]) -> RunSummary:
    """The summary of one run from its records."""
    start = records[0].payload if records and records[0].kind == "run-start" else {}
    verdicts = [CallView(r).verdict for r in records if r.kind == "decision"]
    quarantines = [r for r in records
                   if r.kind == "system" and r.payload.get("kind") == "quarantine"]
    quarantine = None
    if quarantines:
        data = _mapping(quarantines[0].payload.get("data"))
        quarantine = str(data.get("rule_id") or data.get("trigger") or "yes")
    ended = records[-1].timestamp if records and records[-1].kind == "run-end" else None
    return RunSummary(
        run_id=run_id, principal=str(start.get("principal", "")),
        policy=str(start.get("policy_name", "")),
        started_at=records[0].timestamp if records else "", ended_at=ended,
        calls=len(verdicts), allowed=verdicts.count("allow"), denials=verdicts.count("deny"),
        approvals=verdicts.count("require-approval"), quarantine=quarantine,
        events=len(records))


def list_runs(store: AuditLog) -> list[RunSummary]:
    """Every run of the log, in the order they started."""
    return [summarize(run_id, store.records(run_id)) for run_id in store.run_ids()]


def view_run(store: AuditLog, run_id: str) -> RunView:
    """One run in full; AuditError naming the known runs when there is no such run."""
    records = store.records(run_id)
    if not records:
        known = store.run_ids()
        hint = f" (it has {len(known)}: {', '.join(known[:5])}{'…' if len(known) > 5 else ''})"
        raise AuditError(f"the audit log has no run {run_id!r}{hint if known else ''}")
    system = [r for r in records if r.kind == "system"]
    return RunView(summarize(run_id, records), pair_calls(records), system)


def follow(path: str | os.PathLike[str], *, poll_s: float = 0.25,
           keep_going: Callable[[], bool] = lambda: False) -> Iterator[AuditRecord]:
    """Every record of the log's segment in order, then, while ``keep_going()``, each record
    as it is appended (the segment polled every ``poll_s`` seconds).

    Reads with ``pread`` and no lock; a line is read once its newline is written (a torn
    tail is never returned). Each record must continue the chain before it, else AuditError
    (so does a segment that got shorter: it was truncated or rewritten).
    """
    where = os.fspath(path)
    open_log(where).close()  # a missing file or one that is not an audit log is refused here
    segment = Segment(log_path_for(where), read_only=True)
    try:
        offset, seq, head = 0, 0, GENESIS_HASH
        while True:
            size = segment.size()
            if size < offset:
                raise AuditError(f"the segment of {display(where)} got shorter while it was read"
                                 " (truncated or rewritten)")
            lines, offset = segment.lines(offset, size) if size > offset else ([], offset)
            for line in lines:
                try:
                    record, digest = parse_line(line.text)
                except ValueError as exc:
                    raise AuditError(f"the line at byte {line.start} of the segment of"
                                     f" {display(where)} is not a record: {exc}") from exc
                if record["seq"] != seq + 1 or record.get("prev") != head:
                    raise AuditError(f"the line at byte {line.start} of the segment of"
                                     f" {display(where)} does not continue the chain")
                seq, head = int(record["seq"]), digest
                yield AuditRecord(seq, str(record["kind"]), str(record["run_id"]),
                                  str(record["ts"]), dict(record["payload"]), digest,
                                  str(record.get("id", "")))
            if not lines:
                if not keep_going():
                    return
                time.sleep(poll_s)
    finally:
        segment.close()


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _sources(labels: Any) -> list[str]:
    if not isinstance(labels, list):
        return []
    found = {str(label.get("source")) for label in labels if isinstance(label, Mapping)}
    return sorted(found - _PLAIN_SOURCES)


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None

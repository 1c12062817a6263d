"""Audit records as OpenTelemetry spans: one per decided call, checkable against the log.

A span follows the GenAI semantic conventions for a tool call (name ``execute_tool
{gen_ai.tool.name}``, ``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``) and carries callgate's own attributes: the verdict, the reason ids,
the witness, taint, run, principal and policy, and where the decision lies in the audit chain
(``callgate.audit.seq`` and ``callgate.audit.hash``, the record's SHA-256 as the segment holds
it), so an exported span can be checked against the log (:func:`check_spans`).

Arguments, outputs and reason messages (which quote arguments) are left out unless asked for.
Ids are derived, not random: the trace id from the run id, the span id from the decision's hash,
so exporting a log twice gives the same spans. This module builds plain values (the ``jsonl``
format); :mod:`callgate.audit._otel` is the one that imports the OpenTelemetry SDK.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from callgate.audit._open import AuditLog
from callgate.audit._store import AuditRecord
from callgate.audit._view import CallView, pair_calls, summarize

#: Attribute values are scalars or homogeneous lists of them (OpenTelemetry's rule).
AttributeValue = str | int | float | bool | list[str] | list[int]


@dataclass(frozen=True, slots=True)
class SpanData:
    """One exported span: ids (hex), times (Unix nanoseconds), attributes, an error or not."""

    name: str
    trace_id: str
    span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    error: str | None = None  # the status description when the span's status is ERROR

    def to_json(self) -> dict[str, Any]:
        """The span as one JSON object (a line of ``callgate audit export --format jsonl``)."""
        return {"name": self.name, "trace_id": self.trace_id, "span_id": self.span_id,
                "kind": "INTERNAL", "start_time_unix_nano": self.start_ns,
                "end_time_unix_nano": self.end_ns,
                "status": {"code": "ERROR", "description": self.error} if self.error
                else {"code": "UNSET"},
                "attributes": self.attributes}


@dataclass(frozen=True, slots=True)
class RunMeta:
    """What every span of a run carries about the run."""

    run_id: str
    principal: str
    policy: str


def trace_id_of(run_id: str) -> str:
    """The trace id of a run: the first 32 hex digits of SHA-256 of its id."""
    return hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def span_for(call: CallView, run: RunMeta, *, include_arguments: bool = False,
             include_outputs: bool = False) -> SpanData:
    """The span of one decided call (with its result, when it ran)."""
    recorded = call.call
    tool = str(recorded.get("tool") or "unknown")
    witness = call.witness
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call.call_id,
        "callgate.tool.class": str(recorded.get("tool_class", "")),
        "callgate.tool.action": str(recorded.get("action", "")),
        "callgate.verdict": call.verdict,
        "callgate.reason.ids": [str(r.get("id")) for r in call.reasons],
        "callgate.reason.checks": [str(r.get("check")) for r in call.reasons],
        "callgate.taint.in": call.taint_in,
        "callgate.taint.run": list(call.run_taint),
        "callgate.run.id": run.run_id,
        "callgate.principal": run.principal,
        "callgate.policy": run.policy,
        "callgate.audit.seq": call.decision.seq,
        "callgate.audit.hash": call.decision.hash,
    }
    if witness is not None:
        attrs["callgate.witness.statement"] = str(witness.get("statement", ""))
        events = witness.get("events")
        attrs["callgate.witness.events"] = [int(e) for e in events if isinstance(e, int)] \
            if isinstance(events, list) else []
    if call.decided_ms is not None:
        attrs["callgate.decision.duration_ms"] = round(call.decided_ms, 3)
    if include_arguments:
        attrs["gen_ai.tool.call.arguments"] = _json(recorded.get("parameters"))
        attrs["callgate.reason.messages"] = [str(r.get("message")) for r in call.reasons]
    end = call.decision.timestamp
    error = "denied" if call.verdict == "deny" else None
    if call.result is not None:
        result = call.result.payload.get("result")
        result = result if isinstance(result, Mapping) else {}
        attrs["callgate.audit.result.seq"] = call.result.seq
        attrs["callgate.audit.result.hash"] = call.result.hash
        attrs["callgate.result.status"] = str(result.get("status", ""))
        attrs["callgate.taint.out"] = call.taint_out
        if call.ran_ms is not None:
            attrs["callgate.result.duration_ms"] = round(call.ran_ms, 3)
        if include_outputs:
            attrs["gen_ai.tool.call.result"] = _json(result.get("output"))
        if result.get("status") not in ("ok", None):
            error = f"call {result.get('status')}"
        end = call.result.timestamp
    start_ns = _ns(recorded.get("timestamp")) or _ns(call.decision.timestamp) or 0
    end_ns = max(start_ns, _ns(end) or start_ns)
    return SpanData(name=f"execute_tool {tool}", trace_id=trace_id_of(run.run_id),
                    span_id=call.decision.hash[:16], start_ns=start_ns, end_ns=end_ns,
                    attributes=attrs, error=error)


def spans_of_run(run_id: str, records: list[AuditRecord], *, include_arguments: bool = False,
                 include_outputs: bool = False) -> list[SpanData]:
    """The spans of one run's records, in the order its calls were decided."""
    summary = summarize(run_id, records)
    meta = RunMeta(run_id, summary.principal, summary.policy)
    return [span_for(c, meta, include_arguments=include_arguments,
                     include_outputs=include_outputs) for c in pair_calls(records)]


def export_spans(store: AuditLog, *, run_id: str | None = None,
                 include_arguments: bool = False, include_outputs: bool = False
                 ) -> Iterator[SpanData]:
    """The spans of every run of the log (or of ``run_id``), run by run."""
    for rid in [run_id] if run_id is not None else store.run_ids():
        yield from spans_of_run(rid, store.records(rid), include_arguments=include_arguments,
                                include_outputs=include_outputs)


#: Attributes an export leaves out unless asked (``--include-arguments``, ``--include-outputs``).
OPTIONAL_ATTRIBUTES = frozenset({"gen_ai.tool.call.arguments", "callgate.reason.messages",
                                 "gen_ai.tool.call.result"})


def check_spans(store: AuditLog, spans: Iterable[Mapping[str, Any]], *,
                complete: bool = False) -> tuple[int, list[str]]:
    """Check exported spans (as :meth:`SpanData.to_json` gives them) against the log.

    Each span is rebuilt from the records its ``callgate.audit.seq`` names and must say what
    the log says: its name, ids, times and status, and every attribute (an attribute a
    redacted export leaves out may be missing; none may be added or changed). With
    ``complete``, every decided call of each run the spans name must have its span. Returns how
    many spans were checked and the problems found, one sentence each."""
    expected: dict[str, dict[int, dict[str, Any]]] = {}
    problems: list[str] = []
    seen: dict[str, set[int]] = {}
    count = 0
    for number, span in enumerate(spans, start=1):
        count += 1
        attrs = span.get("attributes")
        attrs = attrs if isinstance(attrs, Mapping) else {}
        run_id = attrs.get("callgate.run.id")
        if not isinstance(run_id, str):
            problems.append(f"span {number}: no callgate.run.id")
            continue
        if run_id not in expected:
            expected[run_id] = {
                built.attributes["callgate.audit.seq"]: _plain(built.to_json())  # type: ignore[misc]  # seq is an int attribute
                for built in spans_of_run(run_id, store.records(run_id), include_arguments=True,
                                          include_outputs=True)}
        known = expected[run_id]
        if not known:
            problems.append(f"span {number}: the log has no run {run_id!r}")
            continue
        seq = attrs.get("callgate.audit.seq")
        want = known.get(seq) if isinstance(seq, int) else None
        if want is None:
            problems.append(f"span {number} ({span.get('name')}): the log has no decision at "
                            f"sequence {seq!r} of run {run_id!r}")
            continue
        seen.setdefault(run_id, set()).add(int(seq))  # type: ignore[arg-type]  # an int here
        problems.extend(f"span {number} ({span.get('name')}): {why}"
                        for why in _differences(_plain(dict(span)), want))
    if complete:
        for run_id, known in expected.items():
            missing = sorted(set(known) - seen.get(run_id, set()))
            problems.extend(f"run {run_id}: the decision at sequence {seq} has no span"
                            for seq in missing)
    return count, problems


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists), so two spans compare as JSON."""
    return json.loads(json.dumps(value, default=str))


def _differences(span: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    out = [f"{field} is {span.get(field)!r}, the log's is {want[field]!r}"
           for field in ("name", "trace_id", "span_id", "start_time_unix_nano",
                         "end_time_unix_nano", "status") if span.get(field) != want[field]]
    got, log = span.get("attributes") or {}, want["attributes"]
    for key in sorted(set(got) | set(log)):
        if key not in log:
            out.append(f"attribute {key} is not in the log's record")
        elif key not in got:
            if key not in OPTIONAL_ATTRIBUTES:
                out.append(f"attribute {key} is missing (the log's: {log[key]!r})")
        elif got[key] != log[key]:
            out.append(f"attribute {key} is {got[key]!r}, the log's is {log[key]!r}")
    return out


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _ns(text: Any) -> int | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000

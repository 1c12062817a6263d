"""A recorded run read back from the audit log, as the steps a replay feeds to a fresh kernel.

The log is verified first (a log that does not verify is refused), then the run's records are
turned into a ``Recording``: the compiled policy and configuration of its run-start, and, in log
order, the calls (with how they came in, the clocks they were decided on, the decision and the
result recorded for them), the host's reports, notes, approvals, tools declared in code, and
the points where another process took the run over (``run-resumed``) with the guards' state
there. A run that lacks any of it (a log written before ``callgate-replay/1``, guards passed as
objects, capability tokens) is refused with the reason, never replayed approximately.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate._errors import CallgateError
from callgate._model import Decision, TaintLabel, ToolResult
from callgate.audit import AuditRecord, AuditStore, is_store_url, open_store, verify_file
from callgate.kernel._recording import FORMAT
from callgate.policy._schema import Policy

__all__ = ["Call", "Declare", "Note", "Recording", "ReplayError", "Report", "Resume", "Step",
           "read_recording", "recording_from_records", "unmark"]


class ReplayError(CallgateError):
    """A run cannot be replayed: an unknown run, a log that does not verify, or a run recorded
    without what replay needs (the message says which)."""


@dataclass
class Call:
    """A call as it came in: by ``entry`` (``check``, ``mediate``, ``refuse``), the recorded
    call (or the raw input of an invalid one), the clocks, and what was decided and returned."""

    index: int
    entry: str
    call: Any
    now: float
    instant: float
    decision: Decision
    call_id: str
    final: Decision | None = None  # the deny of a call stopped while running
    result: ToolResult | None = None  # what the executor returned (``mediate``)
    produced: tuple[TaintLabel, ...] = ()
    approval: bool | None = None

    @property
    def label(self) -> str:
        """``tool_class.action tool`` of the call, for reports."""
        data = self.call if isinstance(self.call, Mapping) else {}
        return f"{data.get('tool_class', '?')}.{data.get('action', '?')} {data.get('tool', '?')}"


@dataclass
class Report:
    """A result the host reported for a call ``check`` allowed."""

    call_id: str
    result: ToolResult
    produced: tuple[TaintLabel, ...]


@dataclass
class Note:
    """An event that is not a tool call (``Kernel.note``)."""

    action: str
    args: dict[str, Any]
    output: str | None
    taint: tuple[str, ...]


@dataclass
class Declare:
    """A tool declared in code during the run."""

    name: str
    policy: dict[str, Any]


@dataclass
class Resume:
    """Another process took the run over; its guards started from ``fingerprints``."""

    fingerprints: list[list[Any]] = field(default_factory=list)


Step = Call | Report | Note | Declare | Resume


@dataclass
class Recording:
    """A run as recorded: its policy and configuration, and its steps in order."""

    run_id: str
    policy: Policy
    policy_sha256: str
    working_dir: str
    deadline_s: float
    guards: dict[str, Any]
    fingerprints: list[list[Any]]
    steps: list[Step]
    violations: list[str] | None  # statements broken at the run's end (None: not ended)
    verdicts_only: bool = False  # a trace file records verdicts, not reasons or witnesses

    @property
    def calls(self) -> list[Call]:
        """The calls, in order."""
        return [s for s in self.steps if isinstance(s, Call)]


def read_recording(path: str | os.PathLike[str], run_id: str, *,
                   require_anchor: bool = True, public_key: bytes | None = None,
                   anchor_path: str | os.PathLike[str] | None = None) -> Recording:
    """Verify the log at ``path`` (a SQLite file or a ``postgresql://`` store URL) and read
    run ``run_id`` for replay. Raises ``ReplayError``.

    ``public_key`` and ``anchor_path`` are what the log is verified against: keep them apart
    from the log. Without them the key and the anchor found beside the log are used, and
    whoever can rewrite the log can replace those too.
    """
    if is_store_url(path):
        return _read_store(str(path), run_id, require_anchor=require_anchor,
                           public_key=public_key, anchor_path=anchor_path)
    try:
        report = verify_file(path, require_anchor=require_anchor, public_key=public_key,
                             anchor_path=anchor_path)
    except CallgateError as exc:
        raise ReplayError(f"cannot verify the audit log: {exc}") from exc
    if not report.ok:
        raise ReplayError(f"the audit log does not verify, so it is not replayed ({report}); "
                          f"see `callgate audit verify`")
    try:
        with AuditStore.open(path, read_only=True, checkpoints=False) as store:
            records = store.records(run_id)
    except CallgateError as exc:
        raise ReplayError(f"cannot read the audit log: {exc}") from exc
    if not records:
        raise ReplayError(f"the audit log has no run {run_id!r}")
    return recording_from_records(run_id, records)


def recording_from_records(run_id: str, records: list[AuditRecord]) -> Recording:
    """The ``Recording`` of one run's records (in order). Raises ``ReplayError``."""
    start = records[0]
    config = start.payload.get("config") if start.kind == "run-start" else None
    replay = config.get("replay") if isinstance(config, dict) else None
    if not isinstance(replay, dict) or replay.get("format") != FORMAT:
        raise ReplayError(f"run {run_id!r} was recorded without what replay needs (no "
                          f"{FORMAT} section at its start: a log written by an older callgate)")
    guards = replay.get("guards") or {}
    if guards.get("from") == "objects":
        raise ReplayError(f"run {run_id!r} ran with guard objects its host built; replay can "
                          "rebuild guards only from the policy or GuardSettings")
    try:
        policy = Policy.model_validate(replay["policy"])
    except Exception as exc:
        raise ReplayError(f"the recorded policy of run {run_id!r} does not load: {exc}") from exc
    builder = _Builder(run_id)
    for record in records[1:]:
        builder.take(record)
    assert isinstance(config, dict)
    return Recording(run_id=run_id, policy=policy, policy_sha256=str(replay["policy_sha256"]),
                     working_dir=str(config.get("working_dir") or "."),
                     deadline_s=float(replay["decision_deadline_s"]), guards=dict(guards),
                     fingerprints=builder.start_fingerprints, steps=builder.steps,
                     violations=builder.violations if builder.ended else None)


class _Builder:
    """Turns records into steps, attaching results, stops and approvals to their calls."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.steps: list[Step] = []
        self.by_id: dict[str, Call] = {}
        self.start_fingerprints: list[list[Any]] = []
        self.violations: list[str] = []
        self.ended = False

    def take(self, record: AuditRecord) -> None:
        payload = record.payload
        if record.kind == "decision":
            self._decision(record.seq, payload)
        elif record.kind == "result":
            self._result(record.seq, payload)
        elif record.kind == "system":
            self._system(record.seq, str(payload.get("kind")), payload.get("data") or {})
        elif record.kind == "run-end":
            self.ended = True

    def _refuse(self, seq: int, why: str) -> ReplayError:
        return ReplayError(f"run {self.run_id!r}, event {seq}: {why}")

    def _decision(self, seq: int, payload: Mapping[str, Any]) -> None:
        replay = payload.get("replay")
        decision = Decision.model_validate(payload["decision"])
        call = unmark(payload["call"])
        if not isinstance(replay, dict):
            raise self._refuse(seq, "a decision recorded without its replay fields (the audit "
                                    "write failed, or an older callgate wrote it)")
        call_id = str(call.get("id") or decision.call_id)
        if replay["entry"] == "stopped":
            if call_id in self.by_id:
                self.by_id[call_id].final = decision
            return
        if isinstance(call.get("token"), str):
            raise self._refuse(seq, "the call carries a capability token; tokens are not "
                                    "recorded, so the run cannot be replayed")
        fed = unmark(replay["raw"]) if "raw" in replay else call
        step = Call(index=len(self.calls()) + 1, entry=str(replay["entry"]), call=fed,
                    now=float(replay["now"]), instant=float(replay["instant"]),
                    decision=decision, call_id=call_id)
        self.by_id[call_id] = step
        self.steps.append(step)

    def calls(self) -> list[Call]:
        return [s for s in self.steps if isinstance(s, Call)]

    def _result(self, seq: int, payload: Mapping[str, Any]) -> None:
        replay = payload.get("replay")
        if not isinstance(replay, dict):
            raise self._refuse(seq, "a result recorded without its replay fields")
        result = ToolResult.model_validate(unmark(payload["result"]))
        produced = tuple(TaintLabel.model_validate(t) for t in replay.get("produced", ()))
        if replay.get("entry") == "report":
            self.steps.append(Report(result.call_id, result, produced))
            return
        step = self.by_id.get(result.call_id)
        if step is not None and step.result is None:
            step.result, step.produced = result, produced

    def _system(self, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "event":
            self.steps.append(Note(str(data["action"]), dict(unmark(data.get("args") or {})),
                                   unmark(data.get("output")), tuple(data.get("taint") or ())))
        elif kind == "approval" and str(data.get("call_id")) in self.by_id:
            self.by_id[str(data["call_id"])].approval = bool(data.get("granted"))
        elif kind == "manifest" and "tool" in data:
            self.steps.append(Declare(str(data["tool"]), dict(data["policy"])))
        elif kind == "run-resumed":
            self.steps.append(Resume())
        elif kind == "guard-state":
            if not data.get("complete"):
                raise self._refuse(seq, f"the guards held {data.get('count')} fingerprints at "
                                        "the start, too many to record; not replayable")
            rows = [list(r) for r in data.get("rows") or ()]
            last = self.steps[-1] if self.steps else None
            if isinstance(last, Resume):
                last.fingerprints = rows
            else:
                self.start_fingerprints = rows
        elif kind in ("capability-issued", "capability-denied"):
            raise self._refuse(seq, "the run requested capability tokens, which replay does "
                                    "not rebuild")
        elif kind == "violation" and isinstance(data.get("statement"), str):
            self.violations.append(data["statement"])


def unmark(value: Any) -> Any:
    """``value`` with the audit log's markers turned back into the values they stand for.

    Raises ``ReplayError`` for a marker that kept only part of its value (a string over 1 MiB,
    an omitted field): what the kernel saw then is not in the log.
    """
    if isinstance(value, list):
        return [unmark(v) for v in value]
    if not isinstance(value, dict):
        return value
    marker = value.get("$callgate")
    if marker is None:
        return {k: unmark(v) for k, v in value.items()}
    if marker == "object":
        return {unmark(k): unmark(v) for k, v in value.get("items", ())}
    if marker == "number":
        return float(str(value.get("value")).lower().replace("infinity", "inf"))
    if marker == "string" and value.get("reason") == "invalid-unicode":
        raw = base64.b64decode(str(value["bytes_b64"]))
        return raw.decode("utf-8", str(value.get("encoding", "surrogateescape")))
    raise ReplayError(f"the log kept only part of a value ({value.get('reason', marker)}); "
                      "what the kernel saw is not recorded in full")


def _read_store(url: str, run_id: str, *, require_anchor: bool, public_key: bytes | None,
                anchor_path: str | os.PathLike[str] | None) -> Recording:
    """``read_recording`` for a PostgreSQL store: verified in one snapshot, then read."""
    from callgate.audit._anchor import read_anchor
    from callgate.audit._postgres import PostgresAuditStore

    anchor = None
    if anchor_path is not None:
        anchor = read_anchor(anchor_path)
        if anchor is None:
            raise ReplayError(f"no anchor at {anchor_path}")
    try:
        with open_store(url, read_only=True) as store:
            assert isinstance(store, PostgresAuditStore)
            report = store.verify(public_key=public_key, anchor=anchor,
                                  require_anchor=require_anchor)
            records = store.records(run_id) if report.ok else []
    except CallgateError as exc:
        raise ReplayError(f"cannot read the audit store: {exc}") from exc
    if not report.ok:
        raise ReplayError(f"the audit log does not verify, so it is not replayed ({report}); "
                          f"see `callgate audit verify`")
    if not records:
        raise ReplayError(f"the audit log has no run {run_id!r}")
    return recording_from_records(run_id, records)

"""Policy tests written from a recorded run: today's decisions pinned as one case.

Each decision record of the run becomes a call step expecting the recorded verdict, reason ids
and witness; the result recorded for that call becomes the step's result; a recorded note
(``Kernel.note``) becomes a note step. A run that ended pins the obligations it left open (its
``violation`` records). The working directory is the run's. Calls that were not calls
(unreadable input) are left out and counted. A denial the host made itself (``Kernel.refuse``:
a changed MCP tool definition) is pinned like any other, and fails: the policy alone cannot
reproduce it, so such a step is edited or removed by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from callgate._errors import CallgateError
from callgate.audit import AuditRecord, AuditStore, is_store_url, open_store, verify_file
from callgate.policytest._schema import CallSpec


@dataclass(frozen=True, slots=True)
class Generated:
    """The test file's text, the steps written, and the decisions left out (and why)."""

    text: str
    steps: int
    skipped: tuple[str, ...]


def generate_tests(audit_path: str, run_id: str) -> Generated:
    """Test YAML pinning run ``run_id`` of the audit log at ``audit_path`` (a SQLite file or a
    ``postgresql://`` store), which must verify first: what a test pins is what was recorded.

    Raises ``CallgateError`` (an ``AuditError``) when the log cannot be read, does not verify or
    has no such run.
    """
    if is_store_url(audit_path):
        store = open_store(audit_path, read_only=True)
        report = store.verify()
    else:
        report = verify_file(audit_path, require_anchor=False)
        store = AuditStore.open(audit_path, read_only=True, checkpoints=False)
    try:
        if not report.ok:
            raise CallgateError(f"the audit log does not verify ({report}); see `callgate audit "
                                f"verify`")
        records = store.records(run_id)
    finally:
        store.close()
    if not records:
        raise CallgateError(f"no run {run_id!r} in {audit_path}")
    return tests_from_records(run_id, records)


def tests_from_records(run_id: str, records: list[AuditRecord]) -> Generated:
    """``generate_tests`` over records already read (in order)."""
    steps: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    working_dir: str | None = None
    ended = False
    violations: list[str] = []
    for record in records:
        payload = record.payload
        if record.kind == "run-start":
            working_dir = payload.get("config", {}).get("working_dir")
        elif record.kind == "decision":
            step = _call_step(payload, skipped)
            if step is not None:
                steps.append(step)
                by_call[str(payload.get("decision", {}).get("call_id", ""))] = step
        elif record.kind == "result":
            _attach_result(by_call, payload.get("result", {}))
        elif record.kind == "system" and payload.get("kind") == "event":
            steps.append({"note": _note(payload.get("data", {}))})
        elif record.kind == "system" and payload.get("kind") == "violation":
            violations.append(str(payload.get("data", {}).get("statement", "")))
        elif record.kind == "run-end":
            ended = True
    case: dict[str, Any] = {"name": f"recorded run {run_id}", "steps": steps}
    if ended:
        case["obligations"] = violations
    document: dict[str, Any] = {}
    if working_dir is not None:
        document["working_dir"] = working_dir
    document["cases"] = [case] if steps else []
    header = (f"# Pinned from run {run_id}: every decision as it was recorded.\n"
              "# Check with: callgate policy test POLICY THIS_FILE\n")
    text = header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    return Generated(text, len(steps), tuple(skipped))


def _call_step(payload: dict[str, Any], skipped: list[str]) -> dict[str, Any] | None:
    raw = payload.get("call", {})
    decision = payload.get("decision", {})
    reasons = [str(r.get("id")) for r in decision.get("reasons", [])]
    call = {"tool": raw.get("tool"), "tool_class": raw.get("tool_class"),
            "action": raw.get("action"), "parameters": raw.get("parameters") or {}}
    taint = sorted({str(t.get("source")) for t in raw.get("taint") or []})
    if taint:
        call["taint"] = taint
    try:
        CallSpec.model_validate(call)
    except ValueError:
        skipped.append(f"call {decision.get('call_id')}: not a call ({', '.join(reasons)})")
        return None
    expect: dict[str, Any] = {"verdict": decision.get("verdict"), "reasons": reasons}
    witness = decision.get("witness")
    expect["witness"] = None if witness is None else {
        "statement": witness.get("statement"), "events": list(witness.get("events", []))}
    return {"call": call, "expect": expect}


def _attach_result(by_call: dict[str, dict[str, Any]], result: dict[str, Any]) -> None:
    step = by_call.get(str(result.get("call_id", "")))
    if step is None or step["expect"]["verdict"] == "deny":
        return
    status = result.get("status")
    out: dict[str, Any] = {"status": status if status in ("ok", "error") else "error",
                           "output": result.get("output")}
    if result.get("error") is not None:
        out["error"] = result["error"]
    taint = sorted({str(t.get("source")) for t in result.get("taint") or []})
    if taint:
        out["taint"] = taint
    step["result"] = out


def _note(data: dict[str, Any]) -> dict[str, Any]:
    note: dict[str, Any] = {"action": data.get("action"), "args": data.get("args") or {}}
    if data.get("taint"):
        note["taint"] = list(data["taint"])
    return note

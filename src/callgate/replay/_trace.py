"""A trace file (the JSONL lines ``callgate check`` reads) as a recording to replay under a policy.

A line with ``tool`` is a raw tool call; its ``status`` says what happened then (``denied``: it
was denied; anything else: it was allowed and ran, with ``output``). A line with ``action`` and
no ``tool`` is a typed event that was not a tool call, noted in the trace as it is. A trace
records verdicts only, so only verdicts are compared; the clocks are the line number.
"""

from __future__ import annotations

import json
import os
from typing import Any

from callgate._jsonlimits import loads_bounded
from callgate._model import Decision, TaintLabel, ToolResult
from callgate._text import lines_of
from callgate.policy._schema import Policy
from callgate.replay._recorded import Call, Note, Recording, ReplayError, Report, Step

__all__ = ["trace_recording"]

_RUN_ID = "trace"


def _line(number: int, text: str, path: str) -> dict[str, Any]:
    try:
        data = loads_bounded(text)
    except (ValueError, RecursionError) as exc:
        raise ReplayError(f"{path}:{number}: not a JSON line ({exc})") from exc
    if not isinstance(data, dict):
        raise ReplayError(f"{path}:{number}: a line must be a JSON object")
    return data


def _call_step(index: int, number: int, data: dict[str, Any]) -> tuple[Call, Report | None]:
    status = str(data.get("status", "ok"))
    call = {k: data[k] for k in ("tool", "tool_class", "action", "parameters", "taint")
            if k in data}
    call.setdefault("tool_class", data.get("tool"))
    call.setdefault("action", "call")
    call_id = f"{_RUN_ID}:{index}"
    denied = status == "denied"
    decision = Decision(verdict="deny" if denied else "allow", call_id=call_id)
    step = Call(index=index, entry="check", call=call, now=float(number),
                instant=float(number), decision=decision, call_id=call_id)
    if denied:
        return step, None
    output = data.get("output")
    result = ToolResult(call_id=call_id, status="ok" if status == "ok" else "error",
                        output=output if output is None or isinstance(output, str)
                        else json.dumps(output), error=None if status == "ok" else status)
    produced = tuple(TaintLabel(source=str(t), origin=str(call["tool"]))
                     for t in data.get("output_taint", ()))
    return step, Report(call_id, result, produced)


def trace_recording(path: str | os.PathLike[str], policy: Policy) -> Recording:
    """The recording a trace file describes, to replay under ``policy``. Raises
    ``ReplayError`` naming the line that cannot be read."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as stream:
            lines = lines_of(stream.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayError(f"cannot read the trace {where}: {exc}") from exc
    steps: list[Step] = []
    index = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        data = _line(number, text, where)
        if "tool" in data:
            index += 1
            step, report = _call_step(index, number, data)
            steps.append(step)
            if report is not None:
                steps.append(report)
        elif "action" in data:
            output = data.get("output")
            steps.append(Note(str(data["action"]), dict(data.get("args") or {}),
                              output if isinstance(output, str) else None,
                              tuple(str(t) for t in data.get("taint") or ())))
        else:
            raise ReplayError(f"{where}:{number}: a line needs a tool (a call) or an action "
                              "(an event)")
    return Recording(run_id=_RUN_ID, policy=policy, policy_sha256="", working_dir=
                     policy.working_dir or os.getcwd(), deadline_s=5.0,
                     guards={"from": "policy"}, fingerprints=[], steps=steps, violations=None,
                     verdicts_only=True)

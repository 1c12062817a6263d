"""LangChain 1.x / LangGraph: an agent middleware that asks callgate about every tool call.

``CallgateMiddleware(gate)`` goes in ``create_agent(..., middleware=[...])``. Its
``wrap_tool_call`` (and ``awrap_tool_call``) decides each call before the tool runs:

- ``allow``: the tool runs; the text of its ``ToolMessage`` is reported to the gate (taint,
  guards and behavioural statements see it) and handed on, unless the gate withheld it;
- ``deny``: the tool does not run; the model gets an error ``ToolMessage`` with the refusal
  (reason ids, messages, witness);
- ``require-approval``: a LangGraph ``interrupt`` whose value has the shape of the
  human-in-the-loop middleware's per-call request (``{"type": "tool_approval", "tool_call_id",
  "name", "args", "description"}``); resume with one of its decisions, ``{"type": "approve"}``,
  ``{"type": "reject", "message": ...}`` or ``{"type": "respond", "message": ...}``
  (``Command(resume=...)``; the agent needs a checkpointer). Anything else is a rejection.

A call is decided once: when LangGraph runs the tool node again on resume, the decision made
before the interrupt is reused (by tool call id and arguments). Any failure of the gate is a
refusal (fail closed). Install with ``pip install 'callgate[langchain]'``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command, interrupt

from callgate._model import Decision, ToolResult
from callgate.integrations.adapters._gate import (
    Gate,
    Mediation,
    ToolClass,
    refusal,
    withheld,
)
from callgate.temporal import Violation

__all__ = ["CallgateMiddleware"]

#: Decisions kept for calls waiting on a human (oldest dropped first).
MAX_PENDING = 1024

_Result = ToolMessage | Command[Any]


class CallgateMiddleware(AgentMiddleware[Any, Any]):
    """Every tool call of a ``create_agent`` agent decided by ``gate`` (a ``Kernel`` or the
    sidecar client). ``classes`` maps a tool name to its kernel ``(tool_class, action)``;
    other tools are class ``function``, action ``call``."""

    def __init__(self, gate: Gate, *, classes: Mapping[str, ToolClass] | None = None) -> None:
        super().__init__()
        self._mediation = Mediation(gate, dict(classes or {}))
        self._waiting: OrderedDict[str, tuple[Decision, dict[str, Any]]] = OrderedDict()

    @property
    def name(self) -> str:
        """The middleware's name in the agent's graph."""
        return "callgate"

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], _Result]) -> _Result:
        """Run the call if the gate allows it or a human approves what it asks approval for."""
        decision = self._decision(request)
        refused = self._verdict(request, decision)
        if refused is not None:
            return refused
        try:
            result = handler(request)
        except Exception as exc:
            self._mediation.report(decision, error=f"{type(exc).__name__}: {exc}")
            raise
        return self._reported(request, decision, result,
                              self._mediation.report(decision, **_outcome(result)))

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[_Result]]
                              ) -> _Result:
        """``wrap_tool_call`` for an agent run asynchronously."""
        decision = await asyncio.to_thread(self._decision, request)
        refused = self._verdict(request, decision)
        if refused is not None:
            return refused
        try:
            result = await handler(request)
        except Exception as exc:
            await asyncio.to_thread(self._mediation.report, decision,
                                    error=f"{type(exc).__name__}: {exc}")
            raise
        recorded = await asyncio.to_thread(self._mediation.report, decision, **_outcome(result))
        return self._reported(request, decision, result, recorded)

    def end_run(self) -> list[Violation]:
        """End the gate's run: the behavioural obligations still open (fail closed on error)."""
        return self._mediation.end_run()

    # -- steps ------------------------------------------------------------------------------

    def _decision(self, request: ToolCallRequest) -> Decision:
        call = request.tool_call
        arguments = call.get("args")
        kept = self._waiting.get(call.get("id") or "")
        if kept is not None and kept[1] == arguments:
            return kept[0]  # the node runs again on resume: the call is already decided
        decision = self._mediation.decide(call["name"], arguments)
        if decision.verdict == "require-approval" and call.get("id"):
            self._waiting[call["id"] or ""] = (decision, dict(arguments or {}))
            while len(self._waiting) > MAX_PENDING:
                self._waiting.popitem(last=False)
        return decision

    def _verdict(self, request: ToolCallRequest, decision: Decision) -> ToolMessage | None:
        """None when the call may run; else the message the model gets instead."""
        call = request.tool_call
        if decision.verdict == "allow":
            return None
        if decision.verdict == "deny":
            return _message(call, refusal(decision, call["name"]), status="error")
        answer = interrupt({"type": "tool_approval", "tool_call_id": call.get("id") or "",
                            "name": call["name"], "args": dict(call.get("args") or {}),
                            "description": refusal(decision, call["name"])})
        self._waiting.pop(call.get("id") or "", None)
        kind = answer.get("type") if isinstance(answer, Mapping) else None
        if kind == "approve":
            return None
        message = answer.get("message") if isinstance(answer, Mapping) else None
        if kind == "respond" and isinstance(message, str):
            self._mediation.report(decision, status="denied", error="answered by a human")
            return _message(call, message, status="success")
        self._mediation.report(decision, status="denied", error="rejected by a human")
        why = message if isinstance(message, str) and message else "a human rejected it"
        return _message(call, f"The call to {call['name']} was not run: {why}.",
                        status="error")

    def _reported(self, request: ToolCallRequest, decision: Decision, result: _Result,
                  recorded: ToolResult) -> _Result:
        if recorded.status != "ok" and _outcome(result).get("error") is None:
            return _message(request.tool_call, withheld(recorded, request.tool_call["name"]),
                            status="error")
        return result


def _message(call: Mapping[str, Any], content: str, *, status: str) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id=call.get("id") or "", name=call["name"],
                       status=status)


def _outcome(result: _Result) -> dict[str, Any]:
    """What a tool's result reports: its text as output, or its text as the error."""
    messages = [result] if isinstance(result, ToolMessage) else [
        m for m in (result.update.get("messages", []) if isinstance(result.update, dict)
                    else []) if isinstance(m, ToolMessage)]
    text = "\n".join(m.text for m in messages)
    if any(m.status == "error" for m in messages):
        return {"error": text or "the tool failed"}
    return {"output": text}

"""The OpenAI Agents SDK: tool guardrails and approvals that ask callgate about every call.

``CallgateGuardrails(gate).protect(tool)`` gives a ``FunctionTool``:

- a ``needs_approval`` policy: the gate decides the call (its arguments and call id in hand);
  ``require-approval`` interrupts the run with the call among ``result.interruptions``, to be
  approved or rejected on the ``RunState`` as usual;
- a tool input guardrail: a ``deny`` becomes ``reject_content`` with the refusal (reason ids,
  messages, witness), so the model reads why and the run goes on; a deny because the run is
  quarantined raises (``ToolInputGuardrailTripwireTriggered``) and ends the run;
- a tool output guardrail: what the tool returned is reported to the gate (taint, guards and
  behavioural statements see it); an output the gate withheld is replaced by why.

Each call is decided once: the approval policy and the guardrails share the decision by the
tool call's id. ``protect_mcp_server(server)`` puts the same guardrails on every tool of a local
MCP server; the SDK hands an MCP server's approval policy no arguments, so a call the gate wants
approved runs only when the server's own ``require_approval`` had a human approve it, and is
refused otherwise. Any failure of the gate is a refusal (fail closed).
Install with ``pip install 'callgate[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from agents import (
    FunctionTool,
    RunContextWrapper,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.mcp import MCPServer

from callgate._model import Decision
from callgate.integrations.adapters._gate import (
    Gate,
    Mediation,
    ToolClass,
    quarantined,
    refusal,
    withheld,
)
from callgate.temporal import Violation

__all__ = ["CallgateGuardrails"]

#: Decisions kept for calls whose guardrails have not run yet (oldest dropped first).
MAX_PENDING = 1024

ApprovalPolicy = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]
_Server = TypeVar("_Server", bound=MCPServer)


class CallgateGuardrails:
    """The guardrails and approval policy of one run, deciding with ``gate`` (a ``Kernel`` or
    the sidecar client). ``classes`` maps a tool name to its kernel ``(tool_class, action)``;
    other tools are class ``function``, action ``call``."""

    def __init__(self, gate: Gate, *, classes: Mapping[str, ToolClass] | None = None) -> None:
        self._mediation = Mediation(gate, dict(classes or {}))
        # tool call id -> (decision, whether the approval policy asked a human about it)
        self._decided: OrderedDict[str, tuple[Decision, bool]] = OrderedDict()
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._before, name="callgate")
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._after, name="callgate")

    def protect(self, tool: FunctionTool) -> FunctionTool:
        """``tool`` with callgate's guardrails first and its approval policy (in place)."""
        tool.tool_input_guardrails = [self.input_guardrail, *(tool.tool_input_guardrails or [])]
        tool.tool_output_guardrails = [self.output_guardrail,
                                       *(tool.tool_output_guardrails or [])]
        tool.needs_approval = self.needs_approval(tool.name)
        return tool

    def protect_all(self, tools: Iterable[FunctionTool]) -> list[FunctionTool]:
        """Every tool of ``tools`` protected."""
        return [self.protect(t) for t in tools]

    def protect_mcp_server(self, server: _Server) -> _Server:
        """``server`` with callgate's guardrails first on each of its tools (in place)."""
        server.tool_input_guardrails = [self.input_guardrail,
                                        *(server.tool_input_guardrails or [])]
        server.tool_output_guardrails = [self.output_guardrail,
                                         *(server.tool_output_guardrails or [])]
        return server

    def needs_approval(self, tool: str) -> ApprovalPolicy:
        """The ``needs_approval`` policy of ``tool``: the gate's decision, kept for the
        guardrails; true when it is ``require-approval``."""

        async def decide(context: RunContextWrapper[Any], arguments: dict[str, Any],
                         call_id: str) -> bool:
            decision = await asyncio.to_thread(self._mediation.decide, tool, arguments)
            asks = decision.verdict == "require-approval"
            self._keep(call_id, decision, asks)
            return asks

        return decide

    async def end_run(self) -> list[Violation]:
        """End the gate's run: the behavioural obligations still open (fail closed on error)."""
        return await asyncio.to_thread(self._mediation.end_run)

    # -- the guardrails ---------------------------------------------------------------------

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        decision, asked = await self._decision(context.tool_name, context.tool_call_id,
                                               context.tool_arguments)
        if decision.verdict == "allow":
            return ToolGuardrailFunctionOutput.allow(decision.summary())
        if decision.verdict == "require-approval" and (
                asked or context.is_tool_approved(context.tool_name, context.tool_call_id)):
            # the run is interrupted for a human (asked), or the human approved it already
            return ToolGuardrailFunctionOutput.allow(decision.summary())
        self._decided.pop(context.tool_call_id, None)
        if quarantined(decision):
            return ToolGuardrailFunctionOutput.raise_exception(decision.summary())
        return ToolGuardrailFunctionOutput.reject_content(refusal(decision, context.tool_name),
                                                          decision.summary())

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        kept = self._decided.pop(context.tool_call_id, None)
        if kept is None or kept[0].verdict == "deny":
            # no input guardrail let this call through: its output is not the model's to read
            return ToolGuardrailFunctionOutput.reject_content(
                f"callgate withheld the output of {context.tool_name}: no decision allowed it.")
        result = await asyncio.to_thread(self._mediation.report, kept[0],
                                         output=_text_of(data.output))
        if result.status != "ok":
            return ToolGuardrailFunctionOutput.reject_content(withheld(result, context.tool_name))
        return ToolGuardrailFunctionOutput.allow()

    async def _decision(self, tool: str, call_id: str, raw: str) -> tuple[Decision, bool]:
        kept = self._decided.get(call_id)
        if kept is not None:
            return kept
        try:
            arguments: Any = json.loads(raw) if raw.strip() else {}
        except ValueError:
            arguments = raw  # not a mapping: the mediation refuses it
        decision = await asyncio.to_thread(self._mediation.decide, tool, arguments)
        self._keep(call_id, decision, asked=False)
        return decision, False

    def _keep(self, call_id: str, decision: Decision, asked: bool) -> None:
        self._decided[call_id] = (decision, asked)
        while len(self._decided) > MAX_PENDING:
            self._decided.popitem(last=False)


def _text_of(output: Any) -> Any:
    """An output of text items (what an MCP tool gives: ``{"type": "text", "text": ...}``)
    as its text, the way the model reads it; anything else as it is."""
    items = output if isinstance(output, list) else [output]
    texts = [item.get("text") if isinstance(item, dict) and item.get("type") == "text"
             else getattr(item, "text", None) if getattr(item, "type", None) == "text" else None
             for item in items]
    if items and all(isinstance(t, str) for t in texts):
        return "\n".join(t for t in texts if isinstance(t, str))
    return output

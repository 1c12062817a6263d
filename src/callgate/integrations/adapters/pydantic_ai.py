"""pydantic-ai: a toolset whose every tool call passes callgate before it runs.

``CallgateToolset`` wraps any pydantic-ai toolset (a ``FunctionToolset``, an MCP server):

- ``allow``: the tool runs; what it returned is reported to the gate (taint, guards and
  behavioural statements see the text the model will read) and handed to the model, unless the
  gate withheld it;
- ``deny``: the tool does not run; ``ModelRetry`` with the refusal (reason ids, messages,
  witness) tells the model why, and its retry budget counts it;
- ``require-approval``: ``ApprovalRequired``, so the run ends with the call among its
  ``DeferredToolRequests``; once a human approves it (``DeferredToolResults``) the call runs
  under the decision already made, with the same arguments.

A tool that raises is reported as an error and its exception goes on to pydantic-ai. Any failure
of the gate is a refusal (fail closed). Install with ``pip install 'callgate[pydantic-ai]'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ApprovalRequired, ModelRetry, RunContext
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from callgate._model import Decision
from callgate.integrations.adapters._gate import (
    Gate,
    Mediation,
    ToolClass,
    refusal,
    withheld,
)
from callgate.temporal import Violation

__all__ = ["CallgateToolset"]


@dataclass
class _Pending:
    decision: Decision
    arguments: dict[str, Any]


@dataclass
class CallgateToolset(WrapperToolset[Any]):
    """``wrapped``'s tools, each call decided by ``gate`` (a ``Kernel`` or the sidecar client).

    ``classes`` maps a tool name to its kernel ``(tool_class, action)``; other tools are class
    ``function``, action ``call``.
    """

    gate: Gate
    classes: Mapping[str, ToolClass] = field(default_factory=dict)
    # calls awaiting a human, by pydantic-ai's tool call id: the decision they run under
    _pending: dict[str, _Pending] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._mediation = Mediation(self.gate, self.classes)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        """Run the call if the gate allows it (or a human approved what it asked approval for)."""
        decision = await self._decision(name, tool_args, ctx)
        if decision.verdict == "deny":
            raise ModelRetry(refusal(decision, name))
        if decision.verdict == "require-approval":
            if ctx.tool_call_id is not None:
                self._pending[ctx.tool_call_id] = _Pending(decision, dict(tool_args))
            raise ApprovalRequired(metadata={"callgate": refusal(decision, name)})
        try:
            output = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except Exception as exc:
            await asyncio.to_thread(self._mediation.report, decision,
                                    error=f"{type(exc).__name__}: {exc}")
            raise
        result = await asyncio.to_thread(self._mediation.report, decision, output=output)
        if result.status != "ok":
            raise ModelRetry(withheld(result, name))
        return output

    async def _decision(self, name: str, tool_args: dict[str, Any],
                        ctx: RunContext[Any]) -> Decision:
        pending = self._pending.pop(ctx.tool_call_id, None) if ctx.tool_call_id else None
        if ctx.tool_call_approved and pending is not None and pending.arguments == tool_args:
            decision = pending.decision  # approved: it runs under the decision that asked
        else:
            decision = await asyncio.to_thread(self._mediation.decide, name, tool_args)
        if ctx.tool_call_approved and decision.verdict == "require-approval":
            # a human approved these exact arguments (here, in another process, or changed by
            # the human), and the gate asked for nothing more than that approval
            return decision.model_copy(update={"verdict": "allow"})
        return decision

    async def end_run(self) -> list[Violation]:
        """End the gate's run: the behavioural obligations still open (fail closed on error)."""
        return await asyncio.to_thread(self._mediation.end_run)

"""MCP requests as kernel calls, and kernel decisions as what an MCP client reads.

A ``tools/call`` of tool ``T`` on server ``S`` is the call ``mcp__S__T`` of class ``mcp``,
action ``call``, with the tool's arguments as its parameters (so path-like and URL-like arguments
meet the path gate, grants' path and host constraints, rules and statements like any other); a
``resources/read`` is ``mcp__S__read_resource``, action ``read``, with the ``uri``. The gate adds
no policy of its own: it translates, asks the kernel, and words the answer for the model.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from callgate._model import Decision, Reason, Status, ToolResult
from callgate.integrations._refusal import refusal_text
from callgate.kernel import Kernel
from callgate.policy._schema import Policy
from callgate.policy._settings import McpServerSettings

__all__ = ["OBSERVATION_LIMIT", "Gate", "call_of", "kernel_tool", "observation"]

#: Characters of a result the behavioural trace and the audit log keep (the rest is cut).
OBSERVATION_LIMIT = 65536
#: Events whose tool names the gate remembers, to name a witness's events to the model.
_REMEMBERED = 4096
#: The checks whose deny does not depend on the run's history or the call's arguments.
_STANDING = frozenset({"capability", "rule", "rules", "tool-policy"})


def kernel_tool(server: str, tool: str) -> str:
    """The name a server's tool has in policies, the audit log and the trace."""
    return f"mcp__{server}__{tool}"


def call_of(server: str, tool: str, arguments: Mapping[str, Any] | None, *,
            action: str = "call") -> dict[str, Any]:
    """The kernel call for an MCP tool call (``action`` ``read`` for a resource read)."""
    return {"tool": kernel_tool(server, tool), "tool_class": "mcp", "action": action,
            "parameters": dict(arguments or {})}


def observation(result: types.CallToolResult | types.ReadResourceResult) -> str:
    """The text a result shows the model, bounded: text blocks, structured content, and a
    placeholder for each binary block."""
    parts: list[str] = []
    blocks: list[Any] = list(result.content) if isinstance(result, types.CallToolResult) \
        else list(result.contents)
    for block in blocks:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            resource = getattr(block, "resource", None)
            inner = getattr(resource, "text", None)
            parts.append(inner if isinstance(inner, str) else f"[{getattr(block, 'type', 'blob')}]")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    text = "\n".join(parts)
    return text[:OBSERVATION_LIMIT]


class Gate:
    """One run's decisions (a downstream connection): the kernel and the names of its events."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._names: OrderedDict[int, str] = OrderedDict()

    def prepare(self, call: dict[str, Any]) -> dict[str, Any]:
        """``call`` with its arguments as they will be checked and forwarded: where the policy
        checks this tool's paths, each path made canonical (the server opens what was checked,
        whatever its own working directory)."""
        parameters = self.kernel.opened_as_checked(call["tool"], call["tool_class"],
                                                   call["parameters"])
        return {**call, "parameters": parameters}

    def decide(self, call: dict[str, Any], refusal: Reason | None = None) -> Decision:
        """The kernel's decision on ``call``; ``refusal`` denies it outright (audited)."""
        before = self.kernel.trace_length
        decision = self.kernel.check(call) if refusal is None else \
            self.kernel.refuse(call, refusal)
        for seq in range(before + 1, self.kernel.trace_length + 1):
            self._names[seq] = call["tool"]
            if len(self._names) > _REMEMBERED:
                self._names.popitem(last=False)
        return decision

    def report(self, decision: Decision, *, output: str | None, error: str | None,
               taint: tuple[str, ...], status: Status = "ok", duration_ms: float = 0.0
               ) -> ToolResult:
        """Record what the upstream answered to an allowed call."""
        state: Status = "error" if error is not None and status == "ok" else status
        return self.kernel.report(decision.call_id, status=state, output=output, error=error,
                                  taint=taint, duration_ms=duration_ms)

    def explain(self, decision: Decision, tool: str) -> str:
        """What the model reads when a call is refused: the ids, the reasons, the witness."""
        return refusal_text(decision, tool, self._names)

    def denied_result(self, decision: Decision, tool: str) -> types.CallToolResult:
        """A denied call as the tool's result (``isError``), so the model can correct itself."""
        reasons = [{"id": r.id, "check": r.check, "message": r.message}
                   for r in decision.reasons]
        meta: dict[str, Any] = {"callgate/decision": {
            "verdict": decision.verdict, "reasons": reasons, "call_id": decision.call_id}}
        if decision.witness is not None:
            meta["callgate/decision"]["witness"] = decision.witness.model_dump()
        return types.CallToolResult(content=[types.TextContent(
            type="text", text=self.explain(decision, tool))], is_error=True,
            _meta=meta)


def untrusted(settings: McpServerSettings | None, tool: str) -> tuple[str, ...]:
    """The taint the server's declared source puts on ``tool``'s output."""
    if settings is None or settings.source is None:
        return ()
    if settings.untrusted_tools is not None and tool not in settings.untrusted_tools:
        return ()
    return (settings.source,)


def never_allowed(policy: Policy, tool: str) -> bool:
    """Whether the principal can never call ``tool`` (for ``hide_denied``): a fresh, unaudited
    kernel denies it with no arguments for a reason that does not depend on the run."""
    probe = Kernel(policy, audit=None)
    try:
        decision = probe.check({"tool": tool, "tool_class": "mcp", "action": "call",
                                "parameters": {}})
    finally:
        probe.close()
    return decision.verdict == "deny" and bool(decision.reasons) and all(
        r.check in _STANDING for r in decision.reasons)

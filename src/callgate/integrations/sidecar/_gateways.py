"""Decision points for gateways that already run: the translation of their request bodies
into kernel calls and of the kernel's decisions into their answers. No policy here.

- **Docker MCP Gateway** (``--interceptor before:http:URL`` / ``after:http:URL``): ``before``
  receives ``{"method": "tools/call", "params": {"name", "arguments"}}``; an empty answer lets
  the call go on, a ``CallToolResult`` replaces it (a refusal is ``isError`` naming the reason).
  ``after`` receives the ``CallToolResult``; it is reported to the kernel as the result of the
  oldest allowed call of the run still awaiting one, and answered empty (or replaced with an
  error when the kernel withheld the output).
- **ToolHive** ``httpv1`` authorizer: ``POST …/decision`` with a PORC body
  (``principal``, ``operation`` ``mcp:tool:call``, ``resource`` ``mrn:mcp:SERVER:tool:NAME``,
  ``context.mcp.args``), answered ``{"allow": bool}``; a request without arguments (ToolHive
  sends them only with ``include_args: true``, and not for empty ones) or for another operation
  is refused, since a call cannot be judged without what it does.
- **Claude Code** ``type: "http"`` hooks: the event's JSON in, the command hook's stdout out
  (``callgate.integrations.claude_code.HookService``, the same semantics).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from callgate._model import Decision, Reason
from callgate.integrations._refusal import refusal_text

__all__ = ["docker_call", "docker_observation", "docker_refusal", "toolhive_call"]

#: Characters of a tool result kept as its observation.
OBSERVATION_LIMIT = 65536


def _tool(server: str, name: str) -> str:
    return f"mcp__{server}__{name}"


def docker_call(body: Any, server: str) -> dict[str, Any] | Reason:
    """The kernel call of a Docker MCP Gateway ``before`` payload, or why there is none."""
    params = body.get("params") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("method") != "tools/call" or \
            not isinstance(params, dict):
        return Reason(id="gateway.bad-request", check="validate",
                      message="not a tools/call interceptor payload")
    name, arguments = params.get("name"), params.get("arguments", {})
    if not isinstance(name, str) or not name:
        return Reason(id="gateway.bad-request", check="validate",
                      message="params.name is not a tool name")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return Reason(id="gateway.bad-request", check="validate",
                      message="params.arguments is not an object")
    return {"tool": _tool(server, name), "tool_class": "mcp", "action": "call",
            "parameters": arguments}


def docker_refusal(decision: Decision, tool: str) -> dict[str, Any]:
    """The ``CallToolResult`` that replaces a call callgate did not allow."""
    return {"content": [{"type": "text", "text": refusal_text(decision, tool, {},
                                                              ran=", it was not run")}],
            "isError": True}


def docker_observation(body: Any) -> tuple[str, bool]:
    """The text a ``CallToolResult`` shows the model (bounded) and whether it is an error."""
    if not isinstance(body, dict):
        return "", True
    parts: list[str] = []
    for block in body.get("content") or ():
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'blob')}]")
    if body.get("structuredContent") is not None and not parts:
        parts.append(json.dumps(body["structuredContent"], sort_keys=True, default=str))
    return "\n".join(parts)[:OBSERVATION_LIMIT], bool(body.get("isError"))


def toolhive_call(body: Any) -> dict[str, Any] | Reason:
    """The kernel call of a ToolHive PORC decision request, or why it cannot be judged."""
    if not isinstance(body, dict):
        return Reason(id="gateway.bad-request", check="validate",
                      message="the decision request is not a JSON object")
    operation, resource = body.get("operation"), body.get("resource")
    if operation != "mcp:tool:call":
        return Reason(id="toolhive.operation", check="validate",
                      message=f"operation {operation!r} is not a tool call; callgate judges "
                              f"tool calls only")
    parts = resource.split(":", 4) if isinstance(resource, str) else []
    if len(parts) != 5 or parts[:2] != ["mrn", "mcp"] or parts[3] != "tool" or not parts[4]:
        return Reason(id="gateway.bad-request", check="validate",
                      message="resource is not mrn:mcp:SERVER:tool:NAME")
    context = body.get("context")
    mcp = context.get("mcp") if isinstance(context, Mapping) else None
    args = mcp.get("args") if isinstance(mcp, Mapping) else None
    if not isinstance(args, dict):
        return Reason(id="toolhive.no-arguments", check="validate",
                      message="the request carries no tool arguments (set include_args: true "
                              "in the authorizer's context); a call is not judged without them")
    return {"tool": _tool(parts[2], parts[4]), "tool_class": "mcp", "action": "call",
            "parameters": args}

"""The Claude Agent SDK: hooks and a permission callback that ask callgate about every tool call.

``CallgateHooks(gate, cwd=...)`` gives ``hooks`` (``HookMatcher`` callbacks) and
``can_use_tool`` for ``ClaudeAgentOptions``; ``options(**rest)`` builds the whole object. The
translation is the Claude Code hook's own (``callgate.integrations.claude_code``): the same
table maps each Claude Code tool to a kernel call, the same ``PreToolUse`` answer and reason
wording, the same bounded observation of an output.

- ``PreToolUse``: ``allow`` / ``deny`` with the reason; ``require-approval`` is ``ask``, so
  Claude Code asks ``can_use_tool``, which hands the call and the decision to ``approver``
  (an async callable; none means no one can approve: deny);
- ``PostToolUse`` / ``PostToolUseFailure``: the result is reported to the gate (taint, guards,
  behavioural statements see it);
- ``can_use_tool`` alone (no hooks) decides the call itself.

Any failure of the gate or of the translation is a deny (fail closed). Install with
``pip install 'callgate[claude-agent-sdk]'``; the SDK drives the Claude Code CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)
from claude_agent_sdk.types import HookInput, HookJSONOutput, PermissionResult

from callgate._model import Decision
from callgate.integrations._refusal import reason_line
from callgate.integrations.adapters._gate import Gate, Mediation, adapter_denial
from callgate.integrations.claude_code._service import (
    observation,
    pre_tool_answer,
    source_taint,
)
from callgate.integrations.claude_code._tools import to_call
from callgate.temporal import Violation

__all__ = ["Approver", "CallgateHooks"]

#: Decisions kept for calls whose results have not come back yet (oldest dropped first).
MAX_PENDING = 1024

#: Asked about a call the gate wants approved: (tool, input, decision) -> approved?
Approver = Callable[[str, dict[str, Any], Decision], Awaitable[bool]]


class CallgateHooks:
    """The hooks and permission callback of one run, deciding with ``gate`` (a ``Kernel`` or
    the sidecar client). ``cwd`` is the session's directory (relative paths of file tools
    resolve against it); ``approver`` is asked about ``require-approval`` calls."""

    def __init__(self, gate: Gate, *, cwd: str | os.PathLike[str] | None = None,
                 approver: Approver | None = None) -> None:
        self._mediation = Mediation(gate)
        self._cwd = os.path.realpath(os.fspath(cwd or os.getcwd()))
        self._approver = approver
        self._decided: OrderedDict[str, Decision] = OrderedDict()

    @property
    def hooks(self) -> dict[Any, list[HookMatcher]]:
        """``ClaudeAgentOptions.hooks``: callgate's callbacks for every tool."""
        return {"PreToolUse": [HookMatcher(matcher=None, hooks=[self.pre_tool_use])],
                "PostToolUse": [HookMatcher(matcher=None, hooks=[self.post_tool_use])],
                "PostToolUseFailure": [HookMatcher(matcher=None, hooks=[self.post_tool_use])]}

    def options(self, **rest: Any) -> ClaudeAgentOptions:
        """``ClaudeAgentOptions`` with callgate's hooks and ``can_use_tool``, and ``rest``."""
        return ClaudeAgentOptions(hooks=self.hooks, can_use_tool=self.can_use_tool,
                                  cwd=rest.pop("cwd", self._cwd), **rest)

    async def pre_tool_use(self, data: HookInput, tool_use_id: str | None,
                           context: HookContext) -> HookJSONOutput:
        """The ``PreToolUse`` answer: the gate's decision as allow / deny / ask."""
        tool = str(data.get("tool_name", ""))
        decision = await asyncio.to_thread(self._decide, tool, data.get("tool_input"))
        use_id = tool_use_id or data.get("tool_use_id")
        if decision.verdict != "deny" and isinstance(use_id, str) and use_id:
            self._keep(use_id, decision)
        verdict = {"allow": "allow", "require-approval": "ask"}.get(decision.verdict, "deny")
        answer: HookJSONOutput = json.loads(pre_tool_answer(verdict,
                                                            reason_line(decision)).stdout)
        return answer

    async def post_tool_use(self, data: HookInput, tool_use_id: str | None,
                            context: HookContext) -> HookJSONOutput:
        """``PostToolUse`` / ``PostToolUseFailure``: the result reported to the gate."""
        use_id = tool_use_id or data.get("tool_use_id")
        decision = self._decided.pop(use_id, None) if isinstance(use_id, str) else None
        if decision is not None:
            failed = data.get("hook_event_name") == "PostToolUseFailure"
            text = observation(data.get("error") if failed else data.get("tool_response"))
            taint = source_taint(data, self._cwd)  # a file read outside the project
            if failed:
                await asyncio.to_thread(self._mediation.report, decision, error=text,
                                        taint=taint)
            else:
                await asyncio.to_thread(self._mediation.report, decision, output=text,
                                        taint=taint)
        return {}

    async def can_use_tool(self, tool: str, tool_input: dict[str, Any],
                           context: ToolPermissionContext) -> PermissionResult:
        """Claude Code's permission question: the ``PreToolUse`` decision for this call (or a
        new one), and the approver for what needs approval."""
        use_id = context.tool_use_id or ""
        decision = self._decided.get(use_id)
        if decision is None:
            decision = await asyncio.to_thread(self._decide, tool, tool_input)
            if decision.verdict != "deny" and use_id:
                self._keep(use_id, decision)
        if decision.verdict == "allow":
            return PermissionResultAllow()
        if decision.verdict == "require-approval" and self._approver is not None:
            try:
                if await self._approver(tool, tool_input, decision):
                    return PermissionResultAllow()
            except Exception as exc:
                return PermissionResultDeny(message=f"callgate deny: the approver failed: "
                                                    f"{type(exc).__name__}: {exc}")
        self._decided.pop(use_id, None)
        return PermissionResultDeny(message=reason_line(decision))

    async def end_run(self) -> list[Violation]:
        """End the gate's run: the behavioural obligations still open (fail closed on error)."""
        return await asyncio.to_thread(self._mediation.end_run)

    def _decide(self, tool: str, tool_input: Any) -> Decision:
        if not isinstance(tool_input, Mapping):
            return adapter_denial(f"the input of {tool} is not a mapping")
        try:
            mapped = to_call(tool, tool_input, self._cwd)
        except Exception as exc:
            return adapter_denial(f"the {tool} call cannot be mapped: {type(exc).__name__}")
        if mapped.call is None:
            return adapter_denial(mapped.problem or f"the {tool} call cannot be mapped")
        return self._mediation.decide_call(tool, mapped.call)

    def _keep(self, use_id: str, decision: Decision) -> None:
        self._decided[use_id] = decision
        while len(self._decided) > MAX_PENDING:
            self._decided.popitem(last=False)

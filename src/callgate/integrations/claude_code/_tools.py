"""Claude Code's tools as callgate calls: the one table that says what each tool is.

A tool becomes a call with a tool class and an action the policy's grants and rules speak of:
``Bash`` is a ``shell`` ``exec`` (its command goes through the shell parser), ``Read`` and the
editing tools are ``file`` calls whose ``path`` goes through the path gate, ``WebFetch`` is an
``http`` ``get`` (its output is tainted ``web``), ``mcp__server__tool`` is an ``mcp`` call.
A tool this table does not know becomes class ``unknown``, which no preset grants: a new tool of
a later Claude Code is denied until the policy says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MappedCall", "to_call"]

#: Claude Code's own bookkeeping tools: class ``session``, action ``call``.
SESSION_TOOLS = frozenset({
    "TodoWrite", "TodoRead", "ExitPlanMode", "EnterPlanMode", "AskUserQuestion", "TaskCreate",
    "TaskGet", "TaskList", "TaskUpdate", "TaskOutput", "TaskStop", "KillShell", "KillBash",
    "BashOutput", "Skill", "SlashCommand", "ToolSearch", "ListMcpResourcesTool", "ListAgents",
    "ReportFindings", "ScheduleWakeup",
})
#: tool -> (class, action, the input key holding the path)
FILE_TOOLS: dict[str, tuple[str, str, str]] = {
    "Read": ("file", "read", "file_path"),
    "NotebookRead": ("file", "read", "notebook_path"),
    "Write": ("file", "write", "file_path"),
    "Edit": ("file", "write", "file_path"),
    "MultiEdit": ("file", "write", "file_path"),
    "NotebookEdit": ("file", "write", "notebook_path"),
    "Glob": ("file", "list", "path"),
    "LS": ("file", "list", "path"),
    "Grep": ("file", "search", "path"),
}
SHELL_TOOLS = frozenset({"Bash", "PowerShell"})
AGENT_TOOLS = frozenset({"Agent", "Task"})
#: tools whose default path is the session's directory when the input names none
_DEFAULT_HERE = frozenset({"Glob", "LS", "Grep"})


@dataclass(frozen=True, slots=True)
class MappedCall:
    """A Claude Code tool call as a callgate call, or why it cannot be one."""

    call: dict[str, Any] | None
    problem: str | None = None


def _bad(tool: str, why: str) -> MappedCall:
    return MappedCall(None, f"the {tool} call is malformed: {why}")


def to_call(tool: str, tool_input: Mapping[str, Any], cwd: str) -> MappedCall:
    """The callgate call for one Claude Code tool call (``cwd``: the session's directory)."""
    params = dict(tool_input)
    if tool in SHELL_TOOLS:
        command = params.get("command")
        if not isinstance(command, str):
            return _bad(tool, "command is not a string")
        return MappedCall(_call(tool, "shell", "exec", {"command": command}))
    if tool in FILE_TOOLS:
        tool_class, action, key = FILE_TOOLS[tool]
        path = params.pop(key, None)
        if path is None and tool in _DEFAULT_HERE:
            path = cwd
        if not isinstance(path, str) or not path:
            return _bad(tool, f"{key} is not a non-empty string")
        return MappedCall(_call(tool, tool_class, action, {"path": path, **params}))
    if tool == "WebFetch":
        if not isinstance(params.get("url"), str):
            return _bad(tool, "url is not a string")
        return MappedCall(_call(tool, "http", "get", params))
    if tool == "WebSearch":
        if not isinstance(params.get("query"), str):
            return _bad(tool, "query is not a string")
        return MappedCall(_call(tool, "http", "search", params))
    if tool in AGENT_TOOLS:
        return MappedCall(_call(tool, "agent", "spawn", params))
    if tool in SESSION_TOOLS:
        return MappedCall(_call(tool, "session", "call", params))
    if tool == "ReadMcpResourceTool":
        return MappedCall(_call(tool, "mcp", "read", params))
    if tool.startswith("mcp__") and tool.count("__") >= 2:
        return MappedCall(_call(tool, "mcp", "call", params))
    return MappedCall(_call(tool, "unknown", "call", params))


def _call(tool: str, tool_class: str, action: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"tool": tool, "tool_class": tool_class, "action": action, "parameters": parameters}

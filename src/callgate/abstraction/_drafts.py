"""Raw calls to event drafts: shell lines, scripts, coding-agent tools and function calls.

A draft is an event before numbering, status, output and value flow are attached; the
``Abstractor`` finishes drafts into ``Event`` values. This module holds the mapping tables
(documented in ``docs/abstraction.md``) and the shell and script grounding.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from callgate._identifiers import URL_AUTHORITY, authority_hostname
from callgate.abstraction._catalog import ground
from callgate.abstraction._scripts import (
    Effect,
    ScriptError,
    javascript_effects,
    python_effects,
)
from callgate.abstraction._shell import MAX_SHELL_DEPTH, ShellCommand, parse_commands, peel

#: Deepest chain of scripts followed (a script that runs a script that runs …).
MAX_SCRIPT_DEPTH = 4
#: Largest script file read from disk, in bytes.
MAX_SCRIPT_BYTES = 1_000_000

_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", ">&"})

#: Claude Code tools: tool name -> (action, parameter renames). Other parameters keep their name.
CLAUDE_CODE_TOOLS: dict[str, tuple[str, dict[str, str]]] = {
    "Read": ("read_file", {"file_path": "path"}),
    "Write": ("write_file", {"file_path": "path"}),
    "Edit": ("edit_file", {"file_path": "path"}),
    "MultiEdit": ("edit_file", {"file_path": "path"}),
    "NotebookEdit": ("edit_notebook", {"notebook_path": "path"}),
    "NotebookRead": ("read_notebook", {"notebook_path": "path"}),
    "WebFetch": ("web_fetch", {}),
    "WebSearch": ("web_search", {}),
    "Glob": ("glob", {}),
    "Grep": ("search_files", {"-i": "ignore_case", "-n": "line_numbers", "-A": "after",
                              "-B": "before", "-C": "context"}),
    "LS": ("list_dir", {}),
    "Task": ("spawn_agent", {}),
    "TodoWrite": ("update_todos", {}),
    "ExitPlanMode": ("exit_plan_mode", {}),
}
#: Output taint of mapped actions: what the returned content may hold.
ACTION_TAINT: dict[str, str] = {
    "read_file": "retrieved-doc",
    "read_notebook": "retrieved-doc",
    "search_files": "retrieved-doc",
    "web_fetch": "web",
    "web_search": "web",
    "http_request": "web",
    "spawn_agent": "model-generated",
}
#: Output taint of callgate tool classes.
CLASS_TAINT: dict[str, str] = {"http": "web", "retrieval": "rag", "email": "email"}
_PATH_EFFECTS = {"read_file": "reads", "read_notebook": "reads", "write_file": "writes",
                 "edit_file": "writes", "edit_notebook": "writes", "delete_file": "deletes"}


@dataclass(slots=True)
class Draft:
    """An event before numbering: action, named arguments, derived flag and own taint."""

    action: str
    args: dict[str, Any]
    derived: bool = False
    taint: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class ScriptContext:
    """Where scripts are looked up, and whether they are read at all."""

    resolve: bool = True
    working_dir: str | None = None


def _host_of(url: Any) -> str | None:
    """The host ``urlsplit`` reads in ``url`` (a URL without ``://`` is read as a bare host);
    parsed once for all the URLs below one authority."""
    if not isinstance(url, str):
        return None
    text = url if "://" in url else f"//{url}"
    found = URL_AUTHORITY.match(text)
    try:
        return urlsplit(text).hostname if found is None else authority_hostname(found.group())
    except ValueError:
        return None


def _add_effects(action: str, args: dict[str, Any]) -> dict[str, Any]:
    """Add the generic ``reads`` / ``writes`` / ``deletes`` / ``host`` of a mapped action."""
    key = _PATH_EFFECTS.get(action)
    if key and isinstance(args.get("path"), str):
        args.setdefault(key, [args["path"]])
    host = _host_of(args.get("url"))
    if host:
        args.setdefault("host", host)
    return args


# -- shell -----------------------------------------------------------------------------------


def shell_drafts(
    command: str, ctx: ScriptContext, *, derived: bool = False, depth: int = 0
) -> list[Draft]:
    """Drafts of every simple command of a shell line (and of the scripts they run)."""
    drafts: list[Draft] = []
    for cmd in parse_commands(command, depth=depth):
        drafts.extend(command_drafts(cmd, ctx, derived=derived, depth=depth, line=command))
    return drafts


def command_drafts(
    cmd: ShellCommand, ctx: ScriptContext, *, derived: bool, depth: int, line: str = ""
) -> list[Draft]:
    """The draft of one simple command, followed by drafts of the script it runs, if any."""
    if not cmd.words:
        if cmd.parse_error is not None:
            args: dict[str, Any] = {"parse_error": cmd.parse_error, "argv": line[:4096]}
            return [Draft("parse_error", args, derived)]
        return [Draft("assign", {"assignments": dict(cmd.assignments)}, derived)]
    grounded = ground(cmd.words)
    args = grounded.args
    args["argv"] = " ".join(cmd.words)
    args["argv_list"] = list(cmd.words)
    _shell_context(cmd, args)
    action = grounded.action
    if not action:
        # an empty command name (``"" x``, or one the parser had to invent) runs nothing known
        action = "parse_error"
        args.setdefault("parse_error", "empty command name")
    draft = Draft(action, args, derived, {grounded.taint} if grounded.taint else set())
    out = [draft]
    if grounded.language and ctx.resolve and depth < MAX_SCRIPT_DEPTH:
        out.extend(_script_drafts(grounded.language, args, cmd.stdin, ctx, depth + 1))
    return out


def _shell_context(cmd: ShellCommand, args: dict[str, Any]) -> None:
    """Redirections, wrappers, prefix assignments and parse state of a command as arguments."""
    for redirect in cmd.redirects:
        target = redirect.target
        if not target or target.isdigit() or target == "-" or redirect.op in ("<&", ">&-"):
            continue
        key = "writes" if redirect.op in _WRITE_OPS else "reads" if redirect.op == "<" else None
        if key and target not in args.get(key, []):
            args.setdefault(key, []).append(target)
    if cmd.wrappers:
        args["wrappers"] = list(cmd.wrappers)
    if cmd.assignments:
        args["env"] = dict(cmd.assignments)
    if cmd.stdin is not None:
        args["stdin"] = cmd.stdin
    if cmd.piped_from:
        args["piped_from"] = cmd.piped_from
    if cmd.dynamic:
        args["dynamic"] = True
    if cmd.parse_error:
        args["parse_error"] = cmd.parse_error


def _script_drafts(
    language: str, args: dict[str, Any], stdin: str | None, ctx: ScriptContext, depth: int
) -> list[Draft]:
    source: str | None = None
    if isinstance(args.get("code"), str):
        source = args["code"]
    elif isinstance(args.get("script"), str) and args["script"] != "-":
        source, error = _read_script(args["script"], ctx)
        if error is not None:
            return [Draft("parse_error", {"parse_error": error, "script": args["script"],
                                          "language": language}, True)]
    elif stdin is not None:
        source = stdin
    if source is None or args.get("module"):
        return []
    return script_source_drafts(language, source, ctx, depth)


def _read_script(path: str, ctx: ScriptContext) -> tuple[str | None, str | None]:
    full = path if os.path.isabs(path) or ctx.working_dir is None else os.path.join(
        ctx.working_dir, path)
    try:
        with open(full, "rb") as handle:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        return None, f"script not readable: {exc.strerror or exc}"
    if len(data) > MAX_SCRIPT_BYTES:
        return None, f"script larger than {MAX_SCRIPT_BYTES} bytes"
    return data.decode("utf-8", "replace"), None


def script_source_drafts(language: str, source: str, ctx: ScriptContext, depth: int) -> list[Draft]:
    """Derived drafts of a script's effects; a script that does not parse gives parse_error."""
    if language == "shell":
        return shell_drafts(source, ctx, derived=True, depth=min(depth, MAX_SHELL_DEPTH))
    try:
        if language == "python":
            effects = python_effects(source)
        elif language == "javascript":
            effects = javascript_effects(source)
        else:
            return []
    except ScriptError as exc:
        return [Draft("parse_error", {"parse_error": str(exc), "language": language}, True)]
    out: list[Draft] = []
    for effect in effects:
        out.extend(_effect_drafts(effect, ctx, depth))
    return out


def _effect_drafts(effect: Effect, ctx: ScriptContext, depth: int) -> list[Draft]:
    if effect.action == "subprocess":
        command = effect.args.get("command")
        if isinstance(command, str):
            return shell_drafts(command, ctx, derived=True, depth=depth)
        argv = [str(w) for w in effect.args.get("argv", []) if w is not None]
        if not argv:
            return []
        drafts: list[Draft] = []
        for cmd in peel(ShellCommand(words=tuple(argv), depth=depth)):
            drafts.extend(command_drafts(cmd, ctx, derived=True, depth=depth))
        return drafts
    args = _add_effects(effect.action, dict(effect.args))
    taint = ACTION_TAINT.get(effect.action)
    return [Draft(effect.action, args, True, {taint} if taint else set())]


# -- tool calls ------------------------------------------------------------------------------


def tool_drafts(
    tool: str, params: Mapping[str, Any], raw: Mapping[str, Any], ctx: ScriptContext
) -> list[Draft]:
    """Drafts of one tool call, by the kind of tool it is."""
    if raw.get("tool_class") is not None:
        return _callgate_drafts(tool, params, raw, ctx)
    if tool == "Bash":
        command = params.get("command")
        if not isinstance(command, str):
            return [Draft("parse_error", {"parse_error": "Bash call without a command string"})]
        return shell_drafts(command, ctx)
    if tool in CLAUDE_CODE_TOOLS:
        action, renames = CLAUDE_CODE_TOOLS[tool]
        args = _add_effects(action, {renames.get(k, k): v for k, v in params.items()})
        taint = ACTION_TAINT.get(action)
        return [Draft(action, args, False, {taint} if taint else set())]
    if tool.startswith("mcp__"):
        _, server, name = [*tool.split("__", 2), "", ""][:3]
        args = {**params, "mcp_server": server, "mcp_tool": name}
        return [Draft(tool, args)]
    return [Draft(tool, dict(params))]


def _callgate_drafts(
    tool: str, params: Mapping[str, Any], raw: Mapping[str, Any], ctx: ScriptContext
) -> list[Draft]:
    tool_class = str(raw.get("tool_class"))
    action = raw.get("action")
    args = {**params, "tool_class": tool_class, "tool_action": action}
    taint = CLASS_TAINT.get(tool_class)
    if tool_class == "file" and action in ("read", "get", "list"):
        taint = "retrieved-doc"
    drafts = [Draft(tool, _add_effects("", args), False, {taint} if taint else set())]
    if tool_class == "shell":
        command = params.get("command")
        argv = params.get("argv")
        if isinstance(command, str):
            drafts.extend(shell_drafts(command, ctx))
        elif isinstance(argv, list) and argv and all(isinstance(w, str) for w in argv):
            for cmd in peel(ShellCommand(words=tuple(argv))):
                drafts.extend(command_drafts(cmd, ctx, derived=False, depth=0))
    return drafts

"""``callgate mcp wrap``: put every stdio server of an MCP client's configuration behind the proxy.

The formats are those of Claude Code (``.mcp.json``; ``~/.claude.json``, which also keeps
servers under ``projects.PATH.mcpServers``), Claude Desktop and Cursor: an object whose
``mcpServers`` maps a name to ``{"command", "args", "env", …}``. A wrapped entry runs
``callgate mcp proxy --policy P [--audit A] [--pass-env KEY…] --name NAME -- COMMAND ARGS…``;
everything else in the entry stays. The client still sets the entry's ``env`` on the process it
starts (now the proxy), so each of its keys is passed on to the server with ``--pass-env``; the
proxy gives the server nothing else of its environment. An entry whose name cannot be a server
name in policies (``Google Drive``) runs under a name made from it (``Google-Drive``). The
wrapped form describes itself, so ``--undo`` takes the original command back from after
``--name NAME --`` and needs no other record. An entry already wrapped (under any
policy) is left as it is. Remote entries (``url``, ``type`` http or sse) are not wrapped: a
stdio proxy cannot stand in front of them (``callgate mcp serve`` can).

The file is replaced atomically with its mode kept, a copy of the original bytes is kept once as
``FILE.callgate-backup``, a symlink is refused (rewriting it would replace the link), and a file
that is not UTF-8 JSON is refused at its line and column, untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from callgate._errors import CallgateError
from callgate._jsonlimits import MAX_JSON_DEPTH, JSONTooDeepError, loads_bounded

__all__ = ["LAUNCHERS", "WrapReport", "launcher_of", "server_name", "wrap_config"]

MAX_CONFIG_BYTES = 16 << 20
#: Commands that start another program: the server's name must be given, not taken from them.
LAUNCHERS = frozenset({"npx", "uvx", "bunx", "pnpx", "pipx", "node", "deno", "bun", "python",
                       "python3", "uv", "docker", "podman", "sh", "bash", "zsh", "env", "npm",
                       "pnpm", "yarn", "java", "ruby", "go", "cargo", "dotnet"})
_PREFIX = ["mcp", "proxy"]
_REMOTE = "remote server: put `callgate mcp serve` in front of it"


@dataclass(frozen=True, slots=True)
class WrapReport:
    """What a wrap (or undo) did: entry names changed, left as they were, and skipped (why);
    ``renamed`` maps an entry to the server name it runs under when its own cannot be one."""

    path: str
    wrapped: tuple[str, ...]
    already: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    changed: bool
    renamed: dict[str, str] = field(default_factory=dict)


def launcher_of(command: str) -> str:
    """The program a command names, without directory or version (``python3.11`` → python)."""
    base = os.path.basename(command)
    return re.sub(r"[\d.]+$", "", base) or base


def server_name(text: str) -> str:
    """A valid server name made from ``text``: other characters as ``-``, no ``__``, nothing
    but letters, digits or ``.``/``-`` at the ends, at most 63 characters."""
    name = re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_.-]", "-", text))
    name = re.sub(r"-{2,}", "-", name)[:63].strip("-._")
    return name or "server"

def wrap_config(path: str | os.PathLike[str], *, policy: str | os.PathLike[str] | None = None,
                audit: str | os.PathLike[str] | None = None, callgate_path: str | None = None,
                undo: bool = False) -> WrapReport:
    """Wrap (or with ``undo`` restore) every stdio server of the configuration at ``path``."""
    source = os.fspath(path)
    if os.path.islink(source):
        raise CallgateError(f"{source} is a symlink; rewrite its target explicitly")
    raw, data = _read(source)
    prefix: list[str] = []
    if not undo:
        if policy is None or not os.path.isfile(policy):
            raise CallgateError(f"the policy file {policy!r} does not exist")
        exe = callgate_path or shutil.which("callgate") or os.path.join(
            os.path.dirname(sys.executable), "callgate")
        if not os.path.isabs(exe):
            raise CallgateError(f"the callgate executable path {exe!r} is not absolute")
        prefix = [exe, *_PREFIX, "--policy", os.path.abspath(policy)]
        if audit is not None:
            prefix += ["--audit", os.path.abspath(audit)]
    done: list[str] = []
    already: list[str] = []
    skipped: list[tuple[str, str]] = []
    renamed: dict[str, str] = {}
    for label, servers in _server_maps(data):
        taken: set[str] = set()
        for name, entry in servers.items():
            where = f"{label}{name}"
            if not isinstance(entry, dict):
                raise CallgateError(f"{source}: mcpServers.{name} must be an object")
            if "url" in entry or entry.get("type") in ("http", "sse", "streamable-http"):
                skipped.append((where, _REMOTE))
                continue
            _check_entry(source, name, entry)
            server = _unique(server_name(name), taken)
            if server != name:
                renamed[where] = server
            outcome = _undo(entry) if undo else _wrap(entry, prefix, server)
            (done if outcome else already).append(where)
    changed = bool(done)
    if changed:
        _write(source, raw, data, backup=not undo)
    return WrapReport(source, tuple(done), tuple(already), tuple(skipped), changed,
                      {k: v for k, v in renamed.items() if k in done and not undo})


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3`` … when another entry of the file took it."""
    found, count = name, 1
    while found in taken:
        count += 1
        found = f"{name[:60]}-{count}"
    taken.add(found)
    return found


def _read(source: str) -> tuple[bytes, dict[str, Any]]:
    try:
        with open(source, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise CallgateError(f"cannot read {source}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise CallgateError(f"{source} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise CallgateError(f"{source}:{line}:{column}: not valid UTF-8") from exc
    try:
        data = loads_bounded(text, MAX_JSON_DEPTH)
    except JSONTooDeepError as exc:
        raise CallgateError(f"{source}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise CallgateError(f"{source}:{exc.lineno}:{exc.colno}: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise CallgateError(f"{source}: the top level must be an object")
    return raw, data


def _server_maps(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, mcpServers) of the file and, for ~/.claude.json, of each project."""
    found: list[tuple[str, dict[str, Any]]] = []
    candidates: list[tuple[str, Any]] = [("", data.get("mcpServers"))]
    projects = data.get("projects")
    if isinstance(projects, dict):
        candidates += [(f"{p}:", v.get("mcpServers")) for p, v in projects.items()
                       if isinstance(v, dict)]
    for label, servers in candidates:
        if servers is None:
            continue
        if not isinstance(servers, dict):
            raise CallgateError(f"{label}mcpServers must be an object of server entries")
        found.append((label, servers))
    return found


def _check_entry(source: str, name: str, entry: dict[str, Any]) -> None:
    if not isinstance(entry.get("command"), str) or not entry["command"]:
        raise CallgateError(f"{source}: mcpServers.{name}.command must be a non-empty string")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise CallgateError(f"{source}: mcpServers.{name}.args must be a list of strings")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and k and "=" not in k
                                            and not k.startswith("-") for k in env):
        raise CallgateError(f"{source}: mcpServers.{name}.env must be an object of variables")


def _separator(entry: dict[str, Any]) -> int | None:
    """Where the original command starts in a wrapped entry's args (after ``--name N --``)."""
    args = entry.get("args", [])
    if args[:2] != _PREFIX or "--name" not in args:
        return None
    at = args.index("--name") + 2
    return at + 1 if at < len(args) and args[at] == "--" else None


def _is_wrapped(entry: dict[str, Any]) -> bool:
    return _separator(entry) is not None


def _wrap(entry: dict[str, Any], prefix: list[str], name: str) -> bool:
    if _is_wrapped(entry):
        return False
    original = [entry["command"], *entry.get("args", [])]
    passed = [arg for key in entry.get("env", {}) for arg in ("--pass-env", key)]
    entry["command"] = prefix[0]
    entry["args"] = [*prefix[1:], *passed, "--name", name, "--", *original]
    return True


def _undo(entry: dict[str, Any]) -> bool:
    start = _separator(entry)
    if start is None:
        return False
    original = entry["args"][start:]
    if not original:
        raise CallgateError("a wrapped entry names no command after --")
    entry["command"] = original[0]
    if original[1:]:
        entry["args"] = original[1:]
    else:
        del entry["args"]
    return True


def _write(source: str, raw: bytes, data: dict[str, Any], *, backup: bool) -> None:
    backup_path = source + ".callgate-backup"
    mode = os.stat(source).st_mode & 0o7777
    if backup and not os.path.exists(backup_path):
        with open(backup_path, "xb") as handle:
            handle.write(raw)
        os.chmod(backup_path, mode)
    directory = os.path.dirname(os.path.abspath(source))
    fd, temp = tempfile.mkstemp(prefix=".callgate-wrap-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, source)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise

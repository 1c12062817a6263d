"""Taint tracking: labels attach at boundaries, propagate forward and are never removed.

The run carries the union of every label it has seen. A call's effective taint is its explicit
labels plus the run's: whatever the agent read earlier is in its context when it makes the call.

A ``shell`` call's output is ``web`` when the command catalog says a command in it reads from
the network (``curl``, ``wget``, ``git clone``/``fetch``/``pull``, package installs, ``ssh`` …),
however it is wrapped (``sudo``, ``bash -c``, pipelines, command substitutions, ``eval``, an
inline Python or JavaScript snippet). When what ran cannot be known (the line does not parse, the
program is a variable, the call names no command) the output is ``web`` too: fail closed.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from callgate._model import UNTRUSTED_SOURCES, TaintLabel, ToolCall
from callgate.abstraction import (
    ScriptContext,
    ShellCommand,
    abstract_shell,
    default_catalog,
    ground,
    script_source_drafts,
)

#: The taint an executor of each tool class puts on its output (the boundary it reads across).
CLASS_OUTPUT_TAINT: dict[str, str] = {
    "http": "web",
    "retrieval": "rag",
    "email": "email",
    "mcp": "tool-output",
}


class TaintTracker:
    """The taint of one run: monotonic, a union of every label seen so far.

    One label is kept per source (the first origin it came from), so the cost of a call does
    not grow with the number of distinct origins a long run has seen.
    """

    def __init__(self) -> None:
        self._labels: dict[str, TaintLabel] = {}
        self._sources: frozenset[str] = frozenset()

    @property
    def sources(self) -> frozenset[str]:
        """Every taint source the run has seen."""
        return self._sources

    @property
    def labels(self) -> tuple[TaintLabel, ...]:
        return tuple(self._labels.values())

    def absorb(self, labels: Iterable[TaintLabel]) -> None:
        """Add labels to the run. There is no way to remove one."""
        changed = False
        for label in labels:
            if label.source not in self._labels:
                self._labels[label.source] = label
                changed = True
        if changed:
            self._sources = frozenset(self._labels)

    def input_taint(self, call: ToolCall) -> frozenset[str]:
        """The sources a pending call is tainted by: its own labels plus the run's."""
        if not call.taint:
            return self._sources
        return self._sources | call.taint_sources()

    def output_labels(self, call: ToolCall,
                      produced: Iterable[TaintLabel] = ()) -> list[TaintLabel]:
        """Labels for a call's output: its inputs' taint, the boundary's, and ``tool-output``."""
        labels = [
            TaintLabel(source=src, origin=first.origin, propagated_from=call.id)
            for src, first in self._labels.items()
        ]
        labels.extend(self._own_labels(call, produced, frozenset()))
        return labels

    def absorb_output(self, call: ToolCall, produced: Iterable[TaintLabel] = ()) -> None:
        """``absorb(output_labels(call, produced))`` without building the labels of sources
        the run already holds (which ``absorb`` would drop): a decided call's output."""
        self.absorb(self._own_labels(call, produced, self._sources))

    @staticmethod
    def _own_labels(call: ToolCall, produced: Iterable[TaintLabel],
                    known: frozenset[str]) -> list[TaintLabel]:
        """The labels a call's output gets beyond the run's, leaving out those of ``known``
        sources: its own labels, the producer's, the boundary's and ``tool-output``."""
        labels = [*call.taint, *produced]
        boundary = CLASS_OUTPUT_TAINT.get(call.tool_class)
        if boundary is not None:
            if boundary not in known:
                labels.append(TaintLabel(source=boundary, origin=_origin_of(call)))
        elif call.tool_class == "shell" and NETWORK_SOURCE not in known:
            fetched = shell_network_origin(call.parameters)
            if fetched is not None:
                labels.append(TaintLabel(source=NETWORK_SOURCE, origin=fetched))
        if "tool-output" not in known:
            labels.append(TaintLabel(source="tool-output", origin=call.tool))
        return labels


def is_untrusted(sources: Iterable[str]) -> bool:
    """True when any source is one an attacker may control."""
    return any(src in UNTRUSTED_SOURCES for src in sources)


def _origin_of(call: ToolCall) -> str:
    url = call.parameters.get("url")
    return url if isinstance(url, str) else call.tool


# -- shell commands that read from the network ------------------------------------------------

#: The taint source the kernel carries from the command catalog (``taint: web`` entries).
NETWORK_SOURCE = "web"
#: How many nested ``eval`` strings are followed before the command is taken to fetch.
_MAX_EVAL_DEPTH = 4
#: Command lines up to this length have their analysis cached (agents repeat commands).
_CACHED_CHARS = 4096
#: Scripts given inline are read for their effects; script files are not opened.
_INLINE_ONLY = ScriptContext(resolve=False)
#: Programs whose first word names the program they run (``busybox wget``, ``coproc curl``).
_RUNS_ITS_FIRST_WORD = frozenset({"busybox", "toybox", "coproc"})
#: Script operands that are the interpreter's standard input.
_STDIN_SCRIPTS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def shell_network_origin(parameters: Mapping[str, Any]) -> str | None:
    """Where a shell call's output may come from the network, or None when it runs locally.

    The call's ``command`` (a shell line) or ``argv`` (a list of words) is split into simple
    commands; the first one the catalog marks as a network read (its ``taint: web``, or a
    program of the ``network`` category) gives the origin: its URL or host, else its program.
    A call whose commands cannot be known gives ``"unknown command"``: fail closed.
    """
    command, argv = parameters.get("command"), parameters.get("argv")
    if isinstance(command, str):
        return _line_origin(command)
    if isinstance(argv, list) and argv and all(isinstance(w, str) for w in argv):
        return _line_origin(shlex.join(argv))
    return "unknown command"


def _line_origin(line: str, depth: int = 0) -> str | None:
    if len(line) <= _CACHED_CHARS:
        return _line_origin_cached(line, depth)
    return _analysed_origin(line, depth)


@functools.lru_cache(maxsize=1024)
def _line_origin_cached(line: str, depth: int) -> str | None:
    return _analysed_origin(line, depth)


def _analysed_origin(line: str, depth: int) -> str | None:
    try:
        for cmd in abstract_shell(line):
            origin = _command_origin(cmd, depth)
            if origin is not None:
                return origin
    except Exception as exc:  # any failure to analyse a command fails closed
        return f"unknown command ({type(exc).__name__})"
    return None


def _command_origin(cmd: ShellCommand, depth: int) -> str | None:
    if cmd.parse_error is not None:
        return f"unknown command ({cmd.parse_error})"
    if not cmd.words:
        return None
    program = cmd.words[0]
    if "$" in program or "`" in program or not program:
        return f"unknown command ({program!r})"
    if cmd.program == "eval":
        if depth >= _MAX_EVAL_DEPTH:
            return "unknown command (eval nested too deeply)"
        return _line_origin(" ".join(cmd.words[1:]), depth + 1)
    if cmd.program in _RUNS_ITS_FIRST_WORD and len(cmd.words) > 1:
        if depth >= _MAX_EVAL_DEPTH:
            return f"unknown command ({cmd.program} nested too deeply)"
        # Judged with its input (``echo x | busybox sh``) and re-parsed, so the wrappers the
        # parser peels (``busybox sh -c '…'``) are seen through.
        inner = dataclasses.replace(cmd, words=cmd.words[1:])
        return _command_origin(inner, depth + 1) or _line_origin(shlex.join(inner.words),
                                                                 depth + 1)
    if cmd.program == "alias" and any("=" in word for word in cmd.words[1:]):
        # sh expands aliases in scripts: a later word names a program the line never shows.
        return "unknown command (alias)"
    grounded = ground(cmd.words)
    _, spec = default_catalog().program(program)
    if grounded.taint == NETWORK_SOURCE or (spec is not None and spec.category == "network"):
        return _where(grounded.args, grounded.action)
    if grounded.language is not None:
        if cmd.piped_from is not None and _reads_program_from_stdin(cmd, grounded.language,
                                                                    grounded.args):
            return f"unknown command ({cmd.program} runs what {cmd.piped_from} prints)"
        return _script_origin(grounded.language, grounded.args, cmd.stdin, depth)
    return None


def _reads_program_from_stdin(cmd: ShellCommand, language: str,
                              args: Mapping[str, Any]) -> bool:
    """Whether an interpreter takes its program from its standard input (``| sh``,
    ``| python3 -``, ``| bash -s -- arg``) rather than from its words or a script file."""
    if cmd.stdin is not None or args.get("code") is not None or args.get("module"):
        return False
    if language == "shell":
        for word in cmd.words[1:]:
            if word == "--" or not word.startswith("-"):
                break
            if not word.startswith("--") and "s" in word[1:]:
                return True  # sh -s: the words after it are arguments, the program is stdin
    script = args.get("script")
    return script is None or script in _STDIN_SCRIPTS


def _script_origin(language: str, args: Mapping[str, Any], stdin: str | None,
                   depth: int) -> str | None:
    module, rest = args.get("module"), args.get("script_args", [])
    if isinstance(module, str) and module:  # ``python -m pip install x`` runs pip
        words = (module, *(w for w in rest if isinstance(w, str)))
        return _command_origin(ShellCommand(words=words), depth + 1)
    code = args.get("code")
    script = args.get("script")
    source = code if isinstance(code, str) else stdin if script in (None, "-") else None
    if source is None:
        return None  # a script file: judged by the sandbox's network policy, not read here
    for draft in script_source_drafts(language, source, _INLINE_ONLY, depth + 1):
        if draft.action == "parse_error":
            return f"unknown command ({draft.args.get('parse_error')})"
        if NETWORK_SOURCE in draft.taint:
            return _where(draft.args, draft.action)
    return None


def _where(args: Mapping[str, Any], program: str) -> str:
    for key in ("url", "host"):
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return program

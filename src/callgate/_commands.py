"""Command checks for shell capabilities: one argv, no shell syntax, an allowed program.

Commands run as an argv, never through a shell, so a command string is only accepted when
``shlex`` splitting means exactly what a shell would: any unquoted shell construct (``;``, ``&``,
``|``, ``<``, ``>``, ``(``, ``)``, ``{``, ``}``, ``$``, backticks), ``$`` or a backtick inside
double quotes (where a shell still expands them), an unquoted ``~`` a shell would expand, a
``#`` that would start a comment, and any newline, carriage return or NUL, even quoted, is
refused with a reason that names it. Single-quoted and backslash-escaped characters are literal in
both readings and are accepted (``grep 'a|b' notes.txt``). Glob characters in arguments stay
literal: nothing expands them, so ``ls *.txt`` lists a file named ``*.txt``.

The program is ``argv[0]``. A bare name must be on the allow-list. A program given as a path
(``/bin/ls``) is allowed as ``ls`` only when it is the very file that searching ``PATH`` for ``ls``
finds (both resolved with ``realpath``), so a look-alike such as ``/tmp/ls`` is refused; an
allow-list entry may also be an absolute path, which then names that file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Sequence

from callgate._errors import CallgateError

_ALWAYS_BAD = {"\n": "\\n", "\r": "\\r", "\x00": "\\0"}
_UNQUOTED_META = frozenset(";&|<>(){}$`")
_TWO_CHAR = ("&&", "||", "$(", ">>", "<<", ">&", "<&", "&>", "|&")
_KIND: dict[str, str] = {
    ";": "compound shell commands",
    "&&": "compound shell commands",
    "||": "compound shell commands",
    "\\n": "compound shell commands",
    "\\r": "compound shell commands",
    "&": "background jobs",
    "|": "pipelines",
    "|&": "pipelines",
    "$(": "command substitutions",
    "`": "command substitutions",
    "$": "variable expansions",
    "(": "subshells",
    ")": "subshells",
    "{": "brace groups and expansions",
    "}": "brace groups and expansions",
    "\\0": "NUL bytes",
    "~": "tilde expansions",
    "#": "comments",
}
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_GLOB_CHARS = frozenset("*?[")
_SHOW = 120


class CommandRejected(CallgateError):  # noqa: N818 - reads as "the command was rejected"
    """A command cannot be turned into one argv safely; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _show(command: str) -> str:
    return repr(command if len(command) <= _SHOW else command[:_SHOW] + "…")


def _scan_unquoted(command: str) -> str | None:
    """The first shell construct a shell would act on, as written, or ``None``."""
    quote: str | None = None
    previous = " "  # the character before, as the shell saw it ("" when it was quoted)
    i = 0
    while i < len(command):
        char = command[i]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            if quote == '"' and command[i + 1 : i + 2] in ("$", "`"):
                return command[i + 1]  # shlex keeps this backslash, a shell drops it
            i += 1  # the escaped character is literal
        elif quote == '"':
            if char == '"':
                quote = None
            elif char in "$`":
                return command[i : i + 2] if command[i : i + 2] == "$(" else char
        elif char in "'\"":
            quote = char
        elif char in _UNQUOTED_META:
            pair = command[i : i + 2]
            return pair if pair in _TWO_CHAR else char
        elif char in "~#" and (previous.isspace() or (char == "~" and previous in ("=", ":"))):
            return char
        previous = char if quote is None else ""
        i += 1
    return None


def _shell_construct(command: str) -> str | None:
    for char, shown in _ALWAYS_BAD.items():
        if char in command:
            return shown
    for char in command:
        # Other control characters split nothing in either reading, but they hide what a
        # reviewer of the audit log would read (escape sequences, backspaces).
        if (ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F:
            return f"\\x{ord(char):02x}"
    return _scan_unquoted(command)


def _construct_reason(token: str, command: str) -> str:
    kind = _KIND.get(token, "control characters" if token.startswith("\\x") else "redirections")
    return f"{kind} are not allowed: '{token}' in {_show(command)}"


def parse_command(command: str | Sequence[str]) -> tuple[str, ...]:
    """The argv a command runs as. Raises ``CommandRejected`` for shell syntax or a bad argv.

    A string is split with ``shlex`` after the shell-construct scan; a sequence is taken as the
    argv itself (its items must be strings without NUL bytes).
    """
    if isinstance(command, str):
        token = _shell_construct(command)
        if token is not None:
            raise CommandRejected(_construct_reason(token, command))
        try:
            argv = tuple(shlex.split(command, comments=False, posix=True))
        except ValueError as exc:
            raise CommandRejected(f"command {_show(command)} cannot be parsed: {exc}") from exc
    else:
        if not all(isinstance(item, str) for item in command):
            raise CommandRejected("argv items must all be strings")
        argv = tuple(command)
        if any("\x00" in item for item in argv):
            raise CommandRejected("NUL bytes are not allowed in argv")
    if not argv or not argv[0]:
        raise CommandRejected("empty command")
    return argv


def _program_shape(program: str, from_string: bool) -> str | None:
    """Why ``program`` cannot name a program at all, or ``None``."""
    if from_string and _GLOB_CHARS & set(program):
        return f"globs are not allowed in the program position: {program!r}"
    if from_string and _ENV_ASSIGNMENT.match(program):
        return f"environment assignments are not allowed: {program!r}"
    if "/" in program and not os.path.isabs(program):
        return f"program path {program!r} must be absolute"
    return None


def _same_file(path: str, other: str | None) -> bool:
    return other is not None and os.path.realpath(path) == os.path.realpath(other)


def _entry_allows(program: str, entry: str, search_path: str | None) -> bool:
    """Whether one allow-list entry (a bare name or an absolute path) admits ``program``."""
    if "/" in entry:  # an absolute entry names one file, however the program is spelled
        if not os.path.isabs(entry):
            return False
        found = program if "/" in program else shutil.which(program, path=search_path)
        return found is not None and _same_file(found, entry)
    if "/" not in program:
        return program == entry
    return os.path.basename(program) == entry and _same_file(
        program, shutil.which(entry, path=search_path)
    )


def _program_reason(program: str, allowed: Sequence[str], search_path: str | None) -> str:
    listed = ", ".join(allowed) if allowed else "none"
    if "/" not in program:
        return f"command {program!r} is not in the allowed commands ({listed})"
    name = os.path.basename(program)
    found = shutil.which(name, path=search_path)
    if name in allowed and found is not None:
        return f"program {program} is not the allowed {name} (which is {found})"
    return f"program {program} is not in the allowed commands ({listed})"


def check_command(
    command: str | Sequence[str],
    allowed: Sequence[str] | None,
    search_path: str | None = None,
) -> str | None:
    """``None`` when ``command`` may run, else the reason it may not.

    Shell syntax is refused whatever ``allowed`` says, since the command will run as an argv and
    a construct a shell would act on cannot mean the same thing there. ``allowed=None`` leaves
    the program unchecked; an empty list allows none. ``search_path`` is the ``PATH`` used to
    find the real file behind an allowed name (default: this process's ``PATH``).
    """
    try:
        argv = parse_command(command)
    except CommandRejected as exc:
        return exc.reason
    program = argv[0]
    shape = _program_shape(program, isinstance(command, str))
    if shape is not None:
        return shape
    if allowed is None:
        return None
    try:
        if any(_entry_allows(program, entry, search_path) for entry in allowed):
            return None
        return _program_reason(program, allowed, search_path)
    except (OSError, ValueError) as exc:  # realpath on an unencodable name, and the like
        return f"program {program!r} cannot be resolved: {exc}"

"""Command checks for shell capabilities: one argv, no shell syntax, an allowed program.

Commands run as an argv, never through a shell, so a command string is only accepted when ``shlex``
splitting means exactly what a shell would (the scan is ``_shellwords``): any unquoted shell
construct (``;``, ``&``, ``|``, ``<``, ``>``, ``(``, ``)``, ``{``, ``}``, ``$``, backticks), ``$``
or a backtick inside double quotes (where a shell still expands them), an unquoted ``~`` a shell
would expand, a ``#`` that would start a comment, and any newline, carriage return or NUL, even
quoted, is refused with a reason that names it. Single-quoted and backslash-escaped characters are
literal in both readings and are accepted (``grep 'a|b' notes.txt``). Glob characters in arguments
stay literal: nothing expands them, so ``ls *.txt`` lists a file named ``*.txt``.

The program is ``argv[0]``. A bare name must be on the allow-list. A program given as a path
(``/bin/ls``) is allowed as ``ls`` only when it is the very file that searching ``PATH`` for ``ls``
finds (both resolved with ``realpath``), so a look-alike such as ``/tmp/ls`` is refused; an
allow-list entry may also be an absolute path, which then names that file.

What the program runs is checked too: a wrapper (``timeout 5 ls``, ``env ls``) needs the program
it wraps to be allowed as well, and an option, operand, configuration key or environment
assignment that makes an allowed program run a command its argv does not show (``git -c
core.fsmonitor=…``, ``sed '1e …'``, ``tar --to-command=…``, ``find -exec``) is refused with a
reason naming it (the catalog's ``runs_commands`` section). A string longer than
``MAX_COMMAND_CHARS`` is refused before it is read, and so is an argv whose words joined by
blanks are.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence

from callgate._errors import CallgateError
from callgate.abstraction._shell import ShellCommand, peel
from callgate.matchers._shellwords import MAX_COMMAND_CHARS, shell_construct, split_words

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


def _construct_reason(token: str, command: str) -> str:
    kind = _KIND.get(token, "control characters" if token.startswith("\\x") else "redirections")
    return f"{kind} are not allowed: '{token}' in {_show(command)}"


def parse_command(command: str | Sequence[str]) -> tuple[str, ...]:
    """The argv a command runs as. Raises ``CommandRejected`` for shell syntax or a bad argv.

    A string longer than ``MAX_COMMAND_CHARS`` is refused before anything reads it; a shorter
    one is split like ``shlex.split`` (in linear time) after the shell-construct scan. A
    sequence is taken as the argv itself (its items must be strings without NUL bytes, and
    joined by blanks no longer than ``MAX_COMMAND_CHARS``).
    """
    if isinstance(command, str):
        if len(command) > MAX_COMMAND_CHARS:
            raise CommandRejected(
                f"command {_show(command)} is longer than {MAX_COMMAND_CHARS} characters")
        token = shell_construct(command)
        if token is not None:
            raise CommandRejected(_construct_reason(token, command))
        try:
            argv = split_words(command)
        except ValueError as exc:
            raise CommandRejected(f"command {_show(command)} cannot be parsed: {exc}") from exc
    else:
        if not all(isinstance(item, str) for item in command):
            raise CommandRejected("argv items must all be strings")
        argv = tuple(command)
        if sum(len(item) + 1 for item in argv) > MAX_COMMAND_CHARS:
            raise CommandRejected(
                f"argv {_show(' '.join(argv[:20]))} is longer than {MAX_COMMAND_CHARS} "
                "characters")
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


def _program_allowed(program: str, allowed: Sequence[str], search_path: str | None) -> str | None:
    try:
        if any(_entry_allows(program, entry, search_path) for entry in allowed):
            return None
        return _program_reason(program, allowed, search_path)
    except (OSError, ValueError) as exc:  # realpath on an unencodable name, and the like
        return f"program {program!r} cannot be resolved: {exc}"


def _what_runs(argv: tuple[str, ...], allowed: Sequence[str] | None,
               search_path: str | None) -> str | None:
    """Why a program that ``argv`` runs is refused: an option that runs a command, a wrapped
    program that is not allowed itself, a ``sh -c`` string that does not parse."""
    for cmd in peel(ShellCommand(words=argv)):
        if cmd.parse_error is not None:
            return f"command {_show(' '.join(argv))} cannot be parsed: {cmd.parse_error}"
        if cmd.runs_command is not None:
            return cmd.runs_command
        if allowed is None:
            continue
        for program in [w.split()[0] for w in cmd.wrappers] + list(cmd.words[:1]):
            why = _program_allowed(program, allowed, search_path)
            if why is not None:
                return why
    return None


def check_command(
    command: str | Sequence[str],
    allowed: Sequence[str] | None,
    search_path: str | None = None,
) -> str | None:
    """``None`` when ``command`` may run, else the reason it may not.

    Shell syntax is refused whatever ``allowed`` says, since the command will run as an argv and
    a construct a shell would act on cannot mean the same thing there; so are options that make
    the program run a command its argv does not show (``git -c core.pager=…``, ``sed '1e …'``).
    ``allowed=None`` leaves the programs unchecked; an empty list allows none. A wrapper
    (``timeout``, ``env``, ``sudo`` …) is allowed only when the program it runs is allowed too.
    ``search_path`` is the ``PATH`` used to find the real file behind an allowed name (default:
    this process's ``PATH``).
    """
    try:
        argv = parse_command(command)
    except CommandRejected as exc:
        return exc.reason
    program = argv[0]
    shape = _program_shape(program, isinstance(command, str))
    if shape is not None:
        return shape
    if allowed is not None:
        why = _program_allowed(program, allowed, search_path)
        if why is not None:
            return why
    return _what_runs(argv, allowed, search_path)

"""The shell executor: commands run as argv lists in the OS sandbox, never through a shell.

A call gives either ``argv`` (a list of strings, run as is) or ``command`` (a string). A command
string is parsed with the trace abstraction's parser (tree-sitter-bash) and every simple command
in it is checked, including those inside substitutions, ``sh -c`` strings and wrappers such as
``sudo``. A string that is one plain simple command runs as the argv the parser read. Anything
more (pipes, lists, redirections, substitutions, expansions, globs, assignments, here-documents,
wrappers) is a metacharacter construct: refused unless ``allow_metacharacters``, and then run as
``["sh", "-c", command]`` inside the same sandbox, after every part passed the checks.

Checks, each a denied result with a stable reason id:

* ``shell.unparseable`` - the string does not parse (or exceeds the parser's bounds);
* ``shell.command-not-allowed`` - a program (or wrapper) is not in ``allowed_commands``;
* ``shell.interpreter`` - a program is an interpreter (``python``, ``node``, ``perl``, ``ruby``,
  ``bash``, ``sh`` …, any version suffix) or an ``-c``/``-e`` code string reaches one, unless
  ``allow_interpreters``;
* ``shell.metacharacter`` - a construct beyond one simple command, unless allowed;
* ``shell.wrapper`` - a wrapper (``sudo``, ``env``, ``timeout`` …) without
  ``allow_metacharacters`` (its argv would not be the one that was checked);
* ``shell.runs-command`` - an option, operand, configuration key or environment assignment
  makes an allowed program run a command its words do not show (``git -c core.pager=…``,
  ``sed '1e …'``, ``tar --to-command=…``, ``find -exec``, ``xargs``, ``GIT_SSH_COMMAND=…``);
  the reason names it. No setting lifts this: what such an option runs is not checked at all.

The process runs through ``SubprocessExecutor`` in the sandbox of ``tool_policy``. With no
declared policy the executor uses ``DEFAULT_SHELL_POLICY``: read the working directory (and the
runtime directories every sandbox binds), write nothing, no network, only ``PATH`` in the
environment, 30 s wall time, 1 MiB of output, 64 processes.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from typing import Any

from callgate._model import ToolCall, ToolResult
from callgate.abstraction import ShellCommand, abstract_shell
from callgate.abstraction._shell import peel
from callgate.executors._result import Outcome, Refusal, denied, failed, guarded
from callgate.matchers._shellwords import MAX_COMMAND_CHARS, shell_construct
from callgate.policy._schema import EnvironmentPolicy, FilesystemPolicy, Limits, ToolPolicy
from callgate.sandbox import BackendName
from callgate.sandbox._executor import SubprocessExecutor

#: The sandbox of a shell call whose tool declares no policy: read-only working directory.
DEFAULT_SHELL_POLICY = ToolPolicy(
    risk="high",
    filesystem=FilesystemPolicy(read=("./**",), write=()),
    network="deny",
    environment=EnvironmentPolicy(allow=("PATH",)),
    exec="allow",
    limits=Limits(wall_seconds=30, output_kb=1024, processes=64),
)
#: Programs that run code given to them.
INTERPRETERS = frozenset({
    "python", "python2", "python3", "pypy", "pypy3", "node", "nodejs", "deno", "bun", "perl",
    "ruby", "irb", "php", "lua", "luajit", "tclsh", "wish", "bash", "sh", "dash", "zsh",
    "ksh", "csh", "tcsh", "fish", "busybox", "awk", "gawk", "mawk", "nawk", "osascript",
    "pwsh", "powershell", "Rscript", "julia", "guile", "racket", "expect", "gdb",
})
#: Flags that hand an interpreter a code string.
CODE_FLAGS = frozenset({"-c", "-e", "-E", "--eval", "--command", "-r", "--exec"})
_VERSION = re.compile(r"(?:[-.]?\d+(?:\.\d+)*)$")
def program_name(word: str) -> str:
    """A program's base name without a version suffix: ``/usr/bin/python3.12`` → ``python``."""
    base = word.rsplit("/", 1)[-1]
    stripped = _VERSION.sub("", base)
    return stripped or base


def is_interpreter(word: str) -> bool:
    """True when ``word`` names an interpreter, in any path or version spelling."""
    base = word.rsplit("/", 1)[-1]
    return base in INTERPRETERS or program_name(word) in INTERPRETERS


def unquoted_metacharacter(command: str) -> str | None:
    """The first shell construct in ``command`` (the kernel's command check uses the same
    scanner, ``callgate.matchers._shellwords.shell_construct``), or None."""
    return shell_construct(command)


class ShellExecutor:
    """Runs ``shell`` calls (actions ``exec`` and ``run``) as argv lists in the sandbox.

    ``allowed_commands`` is the program allow-list (base names; ``None`` leaves programs to the
    kernel's capability check, an empty list allows none). Output: ``exit_code``, ``stdout``,
    ``stderr``, ``backend``; a non-zero exit is an ``error`` result with ``process.exit``.
    """

    tool_class = "shell"

    def __init__(self, tool_policy: ToolPolicy | None, *, working_dir: str,
                 allowed_commands: Sequence[str] | None, allow_metacharacters: bool = False,
                 allow_interpreters: bool = False, backend: BackendName = "auto",
                 allow_unconfined: bool = False) -> None:
        self.policy = tool_policy if tool_policy is not None else DEFAULT_SHELL_POLICY
        self.working_dir = os.path.realpath(working_dir)
        self.allowed = None if allowed_commands is None else frozenset(
            program_name(c) for c in allowed_commands) | frozenset(allowed_commands)
        self.allow_metacharacters = allow_metacharacters
        self.allow_interpreters = allow_interpreters
        self._runner = SubprocessExecutor(self.policy, working_dir=self.working_dir,
                                          backend=backend, allow_unconfined=allow_unconfined)

    def __call__(self, call: ToolCall) -> ToolResult:
        """Same as ``execute``."""
        return self.execute(call)

    def execute(self, call: ToolCall) -> ToolResult:
        """Check the command, then run its argv in the sandbox (never raises)."""
        if call.tool_class != self.tool_class:
            return _refused(call, denied("executor.tool-class",
                                         f"shell executor got a {call.tool_class} call"))
        try:
            argv = self.plan(call.parameters)
        except Refusal as refusal:
            return _refused(call, refusal)
        except Exception as exc:  # fail closed: an unexpected error runs nothing
            return _refused(call, failed("executor.internal", f"{type(exc).__name__}: {exc}"))
        return self._runner.execute(call.model_copy(update={"parameters": {"argv": argv}}))

    def plan(self, params: dict[str, Any]) -> list[str]:
        """The argv that will run for ``params``; raises ``Refusal`` when a check fails."""
        argv, command = params.get("argv"), params.get("command")
        if (argv is None) == (command is None):
            raise failed("params.invalid", "give exactly one of 'argv' (a list) or 'command'")
        if argv is not None:
            if not isinstance(argv, list) or not argv or not all(
                    isinstance(a, str) for a in argv):
                raise failed("params.invalid", "'argv' must be a non-empty list of strings")
            self._check_argv(argv)
            return list(argv)
        if not isinstance(command, str) or not command.strip():
            raise failed("params.invalid", "'command' must be a non-empty string")
        return self._plan_string(command)

    def _plan_string(self, command: str) -> list[str]:
        commands = abstract_shell(command)
        broken = next((c.parse_error for c in commands if c.parse_error), None)
        if broken is not None or not commands:
            raise denied("shell.unparseable", broken or "the command holds no simple command")
        for cmd in commands:
            self._check_command(cmd)
        compound = _compound(commands, command)
        if compound is None:
            return list(commands[0].words)
        if not self.allow_metacharacters:
            rid = "shell.wrapper" if compound.startswith("wrapper") else "shell.metacharacter"
            raise denied(rid, f"{compound}; only a single plain command may run")
        return ["sh", "-c", command]

    def _check_argv(self, argv: list[str]) -> None:
        # An argv runs as is, but a wrapper at its head (sudo, env, timeout, bash -c) runs
        # another program: peel it the way the parser peels a line, and check what it runs.
        # The same bound as a command string keeps reading it short.
        if sum(len(word) + 1 for word in argv) > MAX_COMMAND_CHARS:
            raise denied("shell.unparseable",
                         f"argv longer than {MAX_COMMAND_CHARS} characters")
        self._check_words(argv)
        for cmd in peel(ShellCommand(words=tuple(argv))):
            if cmd.parse_error is not None:
                raise denied("shell.unparseable", cmd.parse_error)
            self._check_command(cmd)
            if cmd.wrappers and not self.allow_metacharacters:
                raise denied("shell.wrapper", f"wrapper {' '.join(cmd.wrappers)!r} runs "
                             "another program; only a single plain command may run")

    def _check_command(self, cmd: ShellCommand) -> None:
        if cmd.runs_command is not None:
            raise denied("shell.runs-command", cmd.runs_command)
        self._check_wrappers(cmd)
        if cmd.words:
            self._check_words(list(cmd.words))

    def _check_wrappers(self, cmd: ShellCommand) -> None:
        for wrapper in cmd.wrappers:
            words = wrapper.split()
            if is_interpreter(words[0]) and not self.allow_interpreters:
                raise denied("shell.interpreter",
                             f"{words[0]!r} runs code given to it ({wrapper!r})")
            self._check_allowed(words[0])

    def _check_words(self, words: list[str]) -> None:
        program = words[0]
        if not self.allow_interpreters:
            if is_interpreter(program):
                raise denied("shell.interpreter", f"{program_name(program)!r} is an interpreter")
            flags = [w for w in words[1:] if w in CODE_FLAGS]
            if flags and program_name(program) in {"env", "xargs", "find", "nice"}:
                raise denied("shell.interpreter", f"{program!r} passes code ({flags[0]})")
        self._check_allowed(program)

    def _check_allowed(self, program: str) -> None:
        if self.allowed is None:
            return
        base = program.rsplit("/", 1)[-1]
        if program in self.allowed:
            return
        if base not in self.allowed and program_name(base) not in self.allowed:
            raise denied("shell.command-not-allowed", f"{base!r} is not an allowed command")
        if "/" in program:
            # A path is the allowed program only when it is the file PATH lookup finds: a
            # look-alike /tmp/ls is not ls.
            found = shutil.which(base)
            if found is None or os.path.realpath(found) != os.path.realpath(program):
                raise denied("shell.command-not-allowed",
                             f"{program!r} is not the {base!r} found on PATH")


def _compound(commands: list[ShellCommand], text: str) -> str | None:
    """Why ``commands`` are more than one plain simple command, or None."""
    if len(commands) > 1:
        return f"{len(commands)} commands in one line"
    cmd = commands[0]
    for present, why in ((cmd.wrappers, f"wrapper {' '.join(cmd.wrappers)!r}"),
                         (cmd.redirects, "a redirection"), (cmd.assignments, "an assignment"),
                         (cmd.stdin is not None, "a here-document"),
                         (cmd.piped_from, "a pipe"), (cmd.dynamic, "an expansion"),
                         (cmd.depth, "a nested command"), (not cmd.words, "no program")):
        if present:
            return why
    meta = unquoted_metacharacter(text)
    return None if meta is None else f"the shell metacharacter {meta!r}"


def _refused(call: ToolCall, refusal: Refusal) -> ToolResult:
    def stop() -> Outcome:
        raise refusal

    return guarded(call, stop)

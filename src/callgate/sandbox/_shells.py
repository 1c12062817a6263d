"""Which shells a sandboxed tool may run: none, unless it needs one.

The runtime directories every sandbox shows (``/usr``, ``/bin`` …) hold the host's shells, so a
tool that was never meant to run one could still ``system()`` its way into ``/bin/sh``. The
rule:

* the host's shells are hidden (covered by an empty mode-000 file, so reading or running them
  fails with ``EACCES``): every regular file listed in ``/etc/shells`` and every program named
  like a shell (``SHELL_NAMES``) in the standard program directories, each where it really is,
  so every symlink to it (``/bin/sh -> dash``) fails too;
* **unless the command the sandbox runs is itself a shell** (``sh -c …``, ``/bin/bash x.sh``):
  then the shells stay, because the tool is one;
* **or the policy declares the shell by name** in ``filesystem.read`` (``/bin/sh``,
  ``/usr/bin/bash``): that shell, and only that one, stays. A tool that runs ``make`` (whose
  recipes run through ``/bin/sh``) declares ``/bin/sh``.

Hidden here means the host's shells, not every way to run code: interpreters (``python3``,
``perl``) are not shells, and a shell binary inside a declared root is the tool's own.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence

#: Program names that are shells (a multi-call binary such as busybox counts as one).
SHELL_NAMES = frozenset({
    "sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "ksh93", "mksh", "lksh", "pdksh",
    "csh", "tcsh", "fish", "yash", "posh", "busybox", "toybox",
})
#: Where shells are looked for by name, besides ``/etc/shells``.
PROGRAM_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")
SHELLS_FILE = "/etc/shells"
#: The search path a command name is resolved with when the tool declares no ``PATH``
#: (the one ``execvp`` uses).
DEFAULT_PATH = "/bin:/usr/bin"


def _listed(shells_file: str) -> list[str]:
    try:
        with open(shells_file, encoding="utf-8", errors="replace") as handle:
            return [line.strip() for line in handle if line.startswith("/")]
    except OSError:
        return []


def _stamp(path: str) -> tuple[int, int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (info.st_dev, info.st_ino, info.st_mtime_ns)


def host_shells(shells_file: str = SHELLS_FILE) -> frozenset[str]:
    """The real (symlink-resolved) paths of the host's shells that exist as regular files.

    Recomputed whenever ``shells_file``, a program directory or ``/etc/alternatives`` changes
    (a shell installed, removed or re-pointed changes its directory's modification time).
    """
    watched = (shells_file, *PROGRAM_DIRS, "/etc/alternatives")
    return _host_shells(shells_file, tuple(_stamp(path) for path in watched))


@functools.lru_cache(maxsize=8)
def _host_shells(shells_file: str, stamps: tuple[tuple[int, int, int], ...]) -> frozenset[str]:
    del stamps  # the cache key: the watched paths as they are now
    candidates = _listed(shells_file)
    candidates += [os.path.join(d, name) for d in PROGRAM_DIRS for name in SHELL_NAMES]
    # (``isfile`` follows links: a name that leads to no regular file is dropped by one ``stat``
    # before anything is resolved)
    return frozenset(os.path.realpath(path) for path in candidates if os.path.isfile(path))


def _resolve(program: str, env: Mapping[str, str], working_dir: str) -> str | None:
    if "/" in program:
        return os.path.realpath(os.path.join(working_dir, program))
    found = shutil.which(program, path=env.get("PATH", DEFAULT_PATH))
    return None if found is None else os.path.realpath(os.path.join(working_dir, found))


def is_shell_command(
    command: Sequence[str], shells: Iterable[str], env: Mapping[str, str], working_dir: str
) -> bool:
    """True when ``command`` runs a shell: named like one, or resolving to one of ``shells``."""
    if not command:
        return False
    program = command[0]
    if os.path.basename(program) in SHELL_NAMES:
        return True
    return _resolve(program, env, working_dir) in set(shells)


def hidden_shells(
    command: Sequence[str], named: Iterable[str], env: Mapping[str, str], working_dir: str
) -> tuple[str, ...]:
    """The shells to hide for ``command``; ``named`` are the declared roots, resolved."""
    shells = host_shells()
    if is_shell_command(command, shells, env, working_dir):
        return ()
    declared = set(named)
    return tuple(sorted(path for path in shells if path not in declared))

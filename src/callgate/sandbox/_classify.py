"""Turn what a confined run left behind into a confinement reason (a denial), or None.

The signals, in the order they are checked:

* the runner killed the tool: wall time (``sandbox.limit.wall``) or output size
  (``sandbox.limit.output``);
* the tool died of ``SIGXCPU`` (exit status 128+24 from the launcher, or -24):
  ``sandbox.limit.cpu``;
* the pids cgroup counted a refused fork, or stderr shows a refused fork ("Cannot fork",
  "Resource temporarily unavailable") while a process limit is declared:
  ``sandbox.limit.processes``;
* stderr shows an allocation failure ("Cannot allocate memory", ``MemoryError``) while a memory
  limit is declared: ``sandbox.limit.memory``;
* stderr shows ``EROFS`` ("Read-only file system") on a path: ``sandbox.write``;
* stderr shows ``EACCES`` ("Permission denied") on a masked credential path, or ``ENOENT``
  (bwrap) / ``EACCES`` (firejail) on a path that exists on the host but is outside every
  visible root: ``sandbox.read``;
* the tool died of ``SIGSYS`` (a system call through another ABI, which the seccomp filter
  kills): ``sandbox.syscall``;
* stderr shows ``EACCES`` on a hidden shell (``/bin/sh``, or any path resolving to one):
  ``sandbox.exec``;
* with the network unshared, stderr shows ``ENETUNREACH`` / ``ECONNREFUSED`` / a failed name
  lookup, or a socket family the filter refuses (``EAFNOSUPPORT`` from bwrap's filter,
  ``EOPNOTSUPP`` on a socket or connect line from firejail's): ``sandbox.network``;
* stderr shows a missing variable (``KeyError: 'X'``, "X: parameter not set", "X: unbound
  variable") for a variable that exists on the host but was withheld: ``sandbox.environment``.

A tool that swallows its errors is still confined; it is just not reported.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass

from callgate.sandbox._spec import SandboxSpec, is_within

_EXIT_SIGXCPU = 128 + signal.SIGXCPU
_EXIT_SIGSYS = 128 + signal.SIGSYS
_QUOTED = re.compile(r"['\"‘`]([^'\"’`]+)['\"’`]")
_STRIP = "'\"`‘’,()[]"
_FORK = ("cannot fork", "can't fork", "resource temporarily unavailable", "errno 11]")
_MEMORY = ("cannot allocate memory", "memoryerror", "out of memory", "errno 12]")
_NET = (
    "network is unreachable",
    "connection refused",
    "temporary failure in name resolution",
    "name or service not known",
    "could not resolve host",
    "no address associated with hostname",
    "address family not supported",
)
_NOT_SUPPORTED = "operation not supported"
_SOCKET_WORDS = ("socket", "connect")
_ENV = (
    re.compile(r"KeyError: '([A-Za-z_][A-Za-z0-9_]*)'"),
    re.compile(r"([A-Za-z_][A-Za-z0-9_]*): (?:parameter not set|unbound variable)"),
)
_CREATE_WORDS = ("cannot create", "can't create", "cannot touch", "cannot open")


@dataclass(frozen=True)
class Confinement:
    """Why the sandbox counts a run as stopped: a stable id and a sentence."""

    reason_id: str
    reason: str


def _paths(line: str, cwd: str) -> list[str]:
    """Path-like words of an error line, absolute, in order (quoted ones first)."""
    words = _QUOTED.findall(line)
    words += [w.strip(_STRIP) for w in line.split() if "/" in w or w.startswith((".", "'."))]
    words = [w.rstrip(":") for w in words if w and not w.startswith("[")]
    return [os.path.normpath(os.path.join(cwd, w)) for w in words if w.strip(_STRIP)]


def _hidden(path: str, spec: SandboxSpec) -> bool:
    """True when ``path`` (or, for a create, its directory) is on the host but not shown."""
    shown = (*spec.visible(), "/proc", "/dev", *(("/tmp",) if spec.scratch else ()))
    if any(is_within(path, root) for root in shown):
        return False
    if os.path.lexists(path):
        return True
    parent = os.path.dirname(path)
    # The parent is shown as an empty directory when it leads to a visible root.
    leads_somewhere = any(is_within(root, parent) for root in shown)
    return os.path.isdir(parent) and not leads_somewhere


def _write(line: str, low: str, spec: SandboxSpec) -> Confinement | None:
    if "read-only file system" not in low:
        return None
    paths = _paths(line, spec.working_dir)
    path = paths[-1] if paths else "?"
    return Confinement("sandbox.write", f"write outside declared roots blocked (EROFS): {path}")


def _exec(line: str, low: str, spec: SandboxSpec) -> Confinement | None:
    if "permission denied" not in low or not spec.hidden_shells:
        return None
    for path in _paths(line, spec.working_dir):
        if os.path.realpath(path) in spec.hidden_shells:
            return Confinement(
                "sandbox.exec",
                f"shell {path} is not available: the command is not a shell and the policy "
                f"does not declare it by name",
            )
    return None


def _read(line: str, low: str, spec: SandboxSpec) -> Confinement | None:
    denied = "permission denied" in low
    missing = "no such file or directory" in low or "directory nonexistent" in low
    if not (denied or missing):
        return None
    for path in _paths(line, spec.working_dir):
        if denied and any(is_within(path, m) for m in spec.masked):
            return Confinement(
                "sandbox.read",
                f"read of a credential path not declared by name blocked (EACCES): {path}",
            )
        if not _hidden(path, spec):
            continue
        if denied:  # firejail hides with EACCES rather than absence
            return Confinement(
                "sandbox.read", f"read outside declared roots blocked (EACCES): {path}"
            )
        if any(word in low for word in _CREATE_WORDS) and not os.path.lexists(path):
            return Confinement(
                "sandbox.write", f"write outside declared roots blocked (not visible): {path}"
            )
        return Confinement(
            "sandbox.read", f"read outside declared roots blocked (not visible, ENOENT): {path}"
        )
    return None


def _network(line: str, low: str, spec: SandboxSpec) -> Confinement | None:
    if spec.network:
        return None
    refused_family = _NOT_SUPPORTED in low and any(word in low for word in _SOCKET_WORDS)
    if not refused_family and not any(marker in low for marker in _NET):
        return None
    return Confinement(
        "sandbox.network", f"network connection blocked (network not declared): {line.strip()}"
    )


def _environment(line: str, low: str, spec: SandboxSpec) -> Confinement | None:
    del low
    for pattern in _ENV:
        for name in pattern.findall(line):
            if name in spec.withheld_env:
                return Confinement(
                    "sandbox.environment",
                    f"environment variable {name} is not declared and was withheld",
                )
    return None


_LINE_CHECKS: tuple[Callable[[str, str, SandboxSpec], Confinement | None], ...] = (
    _write,
    _exec,
    _read,
    _network,
    _environment,
)


def _limits(
    exit_code: int | None, low_err: str, pids_hit: bool, spec: SandboxSpec
) -> Confinement | None:
    limits = spec.limits
    if exit_code in (_EXIT_SIGSYS, -signal.SIGSYS):
        return Confinement(
            "sandbox.syscall",
            "a system call through another ABI (i386 or x32) was refused (SIGSYS)",
        )
    if limits.cpu_seconds is not None and exit_code in (_EXIT_SIGXCPU, -signal.SIGXCPU):
        return Confinement(
            "sandbox.limit.cpu", f"CPU limit of {limits.cpu_seconds} s reached (SIGXCPU)"
        )
    if limits.processes is not None and (pids_hit or any(m in low_err for m in _FORK)):
        return Confinement(
            "sandbox.limit.processes",
            f"process limit of {limits.processes} reached (fork refused, EAGAIN)",
        )
    if limits.memory_mb is not None and any(m in low_err for m in _MEMORY):
        return Confinement(
            "sandbox.limit.memory",
            f"memory limit of {limits.memory_mb} MiB reached (allocation refused, ENOMEM)",
        )
    return None


def classify(
    *,
    exit_code: int | None,
    stderr: bytes,
    killed_for: str | None,
    pids_limit_hit: bool,
    spec: SandboxSpec,
) -> Confinement | None:
    """The confinement reason for a finished run, or None when nothing was stopped."""
    limits = spec.limits
    if killed_for == "wall":
        return Confinement(
            "sandbox.limit.wall", f"wall time limit of {limits.wall_seconds} s reached; killed"
        )
    if killed_for == "output":
        return Confinement(
            "sandbox.limit.output", f"output limit of {limits.output_kb} KiB exceeded; killed"
        )
    text = stderr.decode("utf-8", "replace")
    found = _limits(exit_code, text.lower(), pids_limit_hit, spec)
    if found is not None:
        return found
    for check in _LINE_CHECKS:
        for line in text.splitlines():
            found = check(line, line.lower(), spec)
            if found is not None:
                return found
    return None

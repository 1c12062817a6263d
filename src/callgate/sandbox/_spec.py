"""From a tool's declared policy to what a sandbox must do: mounts, masks, environment, limits.

This module is pure apart from reading the filesystem to expand globs (and creating missing
write roots inside the working directory). Backends turn a ``SandboxSpec`` into an argv.

Glob rules (no widening):

* a trailing ``/**`` names the directory before it: ``./build/**`` binds exactly ``./build``;
* any other wildcard (``/srv/*/out/**``, ``./src/*.py``) is expanded at launch time to the
  paths that exist then, and each match is bound exactly; paths created later are not covered;
* relative patterns resolve against the working directory; every root is resolved with
  ``realpath`` so a symlink cannot point a root somewhere else;
* a missing write root inside the working directory is created when the pattern names a
  directory (``./build/**``; a build directory often does not exist before the first build);
  any other missing root is left out, which can only narrow what the tool may touch.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from callgate._errors import SandboxError
from callgate._policy import Limits, NetworkHosts, ToolPolicy

#: Directories a program needs to load at all; bound read-only whatever the policy says.
#: They hold code and shared data, not secrets.
RUNTIME_ROOTS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
)
#: Files a program needs to resolve names when the network is allowed.
NETWORK_FILES: tuple[str, ...] = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
)
#: Credential directories under a home directory, hidden unless declared by name.
SENSITIVE_DIRS: tuple[str, ...] = (".ssh", ".aws", ".gnupg")
#: Files (or directories) whose name starts with this are hidden unless declared by name.
SENSITIVE_PREFIX = ".env"
#: How deep and how wide the search for sensitive names below a declared root goes.
SCAN_DEPTH = 3
SCAN_BUDGET = 20_000

_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs, with every path absolute and resolved."""

    read_roots: tuple[str, ...]
    write_roots: tuple[str, ...]
    runtime_roots: tuple[str, ...]
    masked: tuple[str, ...]
    env: Mapping[str, str]
    withheld_env: frozenset[str]
    network: bool
    working_dir: str
    scratch: bool
    limits: Limits

    def visible(self) -> tuple[str, ...]:
        """Every root the tool can see, declared or runtime."""
        return self.runtime_roots + self.read_roots + self.write_roots


def _has_wildcard(text: str) -> bool:
    return any(ch in _WILDCARDS for ch in text)


def _absolute(pattern: str, working_dir: str) -> str:
    expanded = os.path.expanduser(pattern)
    return os.path.normpath(os.path.join(working_dir, expanded))


def literal_root(pattern: str, working_dir: str) -> str:
    """The path a pattern names once its trailing ``/**`` is removed (not resolved)."""
    path = _absolute(pattern, working_dir)
    while path.endswith("/**"):
        path = path[: -len("/**")] or "/"
    return "/" if path == "/**" else path


def expand_glob(pattern: str, working_dir: str) -> list[str]:
    """The concrete, resolved paths a pattern covers now; never a parent of a match."""
    path = literal_root(pattern, working_dir)
    if not _has_wildcard(path):
        return [os.path.realpath(path)]
    matches = glob.glob(path, recursive=True)
    return sorted({os.path.realpath(match) for match in matches})


def is_within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """Drop paths that lie below another path of the same set."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(is_within(path, root) for root in kept):
            kept.append(path)
    return tuple(sorted(kept))


def _write_roots(patterns: Iterable[str], working_dir: str) -> tuple[str, ...]:
    roots: list[str] = []
    for pattern in patterns:
        names_directory = pattern.rstrip("/").endswith("**") or pattern.endswith("/")
        for path in expand_glob(pattern, working_dir):
            # Only a directory pattern is created: a missing file root would otherwise become
            # a directory of that name.
            creatable = names_directory and is_within(path, working_dir)
            if creatable and not os.path.lexists(path):
                try:
                    os.makedirs(path, exist_ok=True)
                except OSError as exc:
                    raise SandboxError(f"cannot create write root {path}: {exc}") from exc
            if os.path.exists(path):
                roots.append(path)
    return _outermost(roots)


def _read_roots(patterns: Iterable[str], working_dir: str, writes: tuple[str, ...]) -> tuple[
    str, ...
]:
    found = [p for pattern in patterns for p in expand_glob(pattern, working_dir)]
    present = [p for p in found if os.path.exists(p)]
    return tuple(p for p in _outermost(present) if not any(is_within(p, w) for w in writes))


def _is_sensitive_name(name: str) -> bool:
    return name in SENSITIVE_DIRS or name.startswith(SENSITIVE_PREFIX)


def _scan(root: str, budget: list[int]) -> list[str]:
    """Sensitive names at most ``SCAN_DEPTH`` levels below ``root``, within a shared budget."""
    found: list[str] = []
    frontier = [(root, 0)]
    while frontier and budget[0] > 0:
        directory, depth = frontier.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            budget[0] -= 1
            if _is_sensitive_name(entry.name):
                found.append(entry.path)
            elif depth + 1 < SCAN_DEPTH and entry.is_dir(follow_symlinks=False):
                frontier.append((entry.path, depth + 1))
    return found


def _homes(environ: Mapping[str, str]) -> set[str]:
    homes = {"/root"}
    # No user database is not fatal: HOME and the scan below still find credentials.
    with contextlib.suppress(OSError):
        homes.update(entry.pw_dir for entry in pwd.getpwall() if entry.pw_dir not in ("", "/"))
    if environ.get("HOME"):
        homes.add(environ["HOME"])
    return {os.path.realpath(home) for home in homes}


def off_path(top: str, keep: Iterable[str]) -> list[str]:
    """Entries met on the way from ``top`` down to each path of ``keep`` that lead elsewhere.

    Hiding them hides everything below ``top`` except ``keep`` (and the directories leading
    to it). The result is finite: one listing per directory on those ways. Symlinks are left:
    a link's target is hidden or shown on its own account.
    """
    kept = sorted({path for path in keep if is_within(path, top)})
    if top in kept:
        return []
    ways = {top}
    for path in kept:
        parent = os.path.dirname(path)
        while parent not in ways and is_within(parent, top):
            ways.add(parent)
            parent = os.path.dirname(parent)
    found: set[str] = set()
    for directory in sorted(ways):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            # Mounting over a symlink would hide its target, which may be a kept path; a link
            # whose target is not kept already leads to something hidden.
            if os.path.islink(path):
                continue
            if path not in ways and not any(is_within(path, k) for k in kept):
                found.add(path)
    return sorted(found)


def sensitive_paths(
    visible: tuple[str, ...], named: tuple[str, ...], environ: Mapping[str, str]
) -> tuple[str, ...]:
    """Credential paths inside the visible roots that were not declared by name.

    ``named`` are the declared roots before nesting was removed. A credential path is
    declared by name when a declared root is that path or lies below it; a root above it
    (``~/**``) does not name it. Declaring ``~/.ssh/known_hosts`` shows that file only: the
    rest of ``~/.ssh`` stays hidden.
    """
    candidates: set[str] = set()
    for home in _homes(environ):
        # Only homes that overlap a visible root can expose anything (this keeps a large
        # user database cheap).
        if any(is_within(home, root) or is_within(root, home) for root in visible):
            candidates.update(os.path.join(home, name) for name in SENSITIVE_DIRS)
    budget = [SCAN_BUDGET]
    for root in visible:
        if os.path.isdir(root):
            candidates.update(_scan(root, budget))
    # A symlinked credential directory is masked where it really is; if that place is not
    # visible the link already dangles inside the sandbox.
    resolved = {os.path.realpath(path) for path in candidates if os.path.lexists(path)}
    masked: set[str] = set()
    for path in resolved:
        if not os.path.exists(path) or not any(is_within(path, root) for root in visible):
            continue
        below = [root for root in named if is_within(root, path)]
        if path in below:
            continue
        masked.update(off_path(path, below) if below else [path])
    return tuple(sorted(masked))


def _environment(
    policy: ToolPolicy, environ: Mapping[str, str]
) -> tuple[dict[str, str], frozenset[str]]:
    env_policy = policy.environment
    allowed: tuple[str, ...] = () if env_policy in (None, "deny") else env_policy.allow  # type: ignore[union-attr]
    env = {name: environ[name] for name in allowed if name in environ}
    return env, frozenset(name for name in environ if name not in env)


def check_supported(policy: ToolPolicy) -> None:
    """Refuse policies the sandbox cannot enforce, before anything runs."""
    if isinstance(policy.network, NetworkHosts):
        raise SandboxError(
            "a network host allow-list cannot be enforced by the OS sandbox (it cannot force "
            "traffic through the egress proxy); declare network 'deny' or 'allow'"
        )
    if policy.exec == "deny":
        raise SandboxError("the tool declares exec: deny; a subprocess tool needs exec: allow")


def build_spec(
    policy: ToolPolicy, *, working_dir: str, environ: Mapping[str, str]
) -> SandboxSpec:
    """Resolve a tool policy into a ``SandboxSpec`` (globs are expanded now)."""
    check_supported(policy)
    cwd = os.path.realpath(os.path.join(working_dir, policy.working_dir or "."))
    fs = policy.filesystem
    write_globs, read_globs = (fs.write or (), fs.read or ()) if fs else ((), ())
    writes = _write_roots(write_globs, cwd)
    reads = _read_roots(read_globs, cwd, writes)
    named = tuple(p for pattern in (*write_globs, *read_globs) for p in expand_glob(pattern, cwd))
    network = policy.network == "allow"
    runtime = RUNTIME_ROOTS + (NETWORK_FILES if network else ())
    runtime_present = tuple(p for p in runtime if os.path.lexists(p))
    env, withheld = _environment(policy, environ)
    return SandboxSpec(
        read_roots=reads,
        write_roots=writes,
        runtime_roots=runtime_present,
        masked=sensitive_paths(reads + writes, named, environ),
        env=env,
        withheld_env=withheld,
        network=network,
        working_dir=cwd,
        scratch=policy.scratch,
        limits=policy.limits,
    )

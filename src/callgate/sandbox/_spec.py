"""From a tool's declared policy to what a sandbox must do: mounts, masks, environment, limits.

This module is pure apart from reading the filesystem to expand globs (and creating missing
write roots inside the working directory). Backends turn a ``SandboxSpec`` into an argv.

Glob rules (no widening):

* a trailing ``/**`` names the directory before it: ``./build/**`` binds exactly ``./build``;
* any other wildcard (``/srv/*/out/**``, ``./src/*.py``) is expanded at launch time to the
  paths that exist then, and each match is bound exactly; paths created later are not covered;
* relative patterns resolve against the working directory, ``~`` and ``~/…`` against the home
  directory (``~user`` is a relative name, as in the path gate);
* a root that a symlink leads out of where it was written (``./build -> /elsewhere``,
  ``./src -> /etc``, or a wildcard match such as ``./srv/b -> /etc``) is refused with
  ``SandboxError`` unless the pattern is listed in ``filesystem.follow_symlinks``; the rule is
  ``callgate.matchers._paths.root_escape``, the path gate's own. Every root is then bound at its
  ``realpath``;
* a missing write root inside the working directory is created when the pattern names a
  directory (``./build/**``; a build directory often does not exist before the first build);
  any other missing root is left out, which can only narrow what the tool may touch.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from callgate._errors import SandboxError
from callgate.matchers._paths import root_escape
from callgate.policy._schema import Limits, NetworkHosts, ToolPolicy
from callgate.sandbox._credentials import SCAN_LIMIT, is_within, off_path, sensitive_paths
from callgate.sandbox._shells import hidden_shells

__all__ = [
    "SCAN_LIMIT", "SandboxSpec", "build_spec", "check_supported", "expand_glob", "is_within",
    "literal_root", "off_path", "sensitive_paths",
]

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
#: Files a program needs to resolve names and trust TLS servers when the network is allowed.
#: Of ``/etc/ssl`` only the public parts: ``/etc/ssl/private`` holds the host's TLS keys, which
#: a sandbox started by root (kernel uid 0) could otherwise read.
NETWORK_FILES: tuple[str, ...] = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
)
_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs, with every path absolute and resolved."""

    read_roots: tuple[str, ...]
    write_roots: tuple[str, ...]
    runtime_roots: tuple[str, ...]
    masked: tuple[str, ...]
    hidden_shells: tuple[str, ...]
    env: Mapping[str, str]
    withheld_env: frozenset[str]
    network: bool
    working_dir: str
    scratch: bool
    limits: Limits

    def visible(self) -> tuple[str, ...]:
        """Every root the tool can see, declared or runtime."""
        return self.runtime_roots + self.read_roots + self.write_roots

    def covered(self) -> tuple[str, ...]:
        """Every path covered by an empty mode-000 file or directory (credentials, shells)."""
        return self.masked + self.hidden_shells


def _has_wildcard(text: str) -> bool:
    return any(ch in _WILDCARDS for ch in text)


def _absolute(pattern: str, working_dir: str) -> str:
    if pattern == "~" or pattern.startswith("~/"):
        pattern = os.path.expanduser("~") + pattern[1:]
    return os.path.normpath(os.path.join(working_dir, pattern))


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


def _outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """Drop paths that lie below another path of the same set."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(is_within(path, root) for root in kept):
            kept.append(path)
    return tuple(sorted(kept))


def _write_roots(expanded: Mapping[str, list[str]], working_dir: str) -> tuple[str, ...]:
    roots: list[str] = []
    for pattern, paths in expanded.items():
        names_directory = pattern.rstrip("/").endswith("**") or pattern.endswith("/")
        for path in paths:
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


def _read_roots(expanded: Mapping[str, list[str]], writes: tuple[str, ...]) -> tuple[str, ...]:
    found = [p for paths in expanded.values() for p in paths]
    present = [p for p in found if os.path.exists(p)]
    return tuple(p for p in _outermost(present) if not any(is_within(p, w) for w in writes))


def _environment(
    policy: ToolPolicy, environ: Mapping[str, str]
) -> tuple[dict[str, str], frozenset[str]]:
    env_policy = policy.environment
    allowed: tuple[str, ...] = () if env_policy in (None, "deny") else env_policy.allow  # type: ignore[union-attr]  # `in` does not narrow
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


def _match_escape(pattern: str, match: str, working_dir: str) -> str | None:
    """``root_escape`` asked of one path a wildcard matched, spelled the way ``pattern`` is."""
    if _has_wildcard(match):
        return (f"{match!r}, matched by {pattern!r}, holds wildcard characters, so whether it "
                f"leads out through a symlink cannot be checked; declare it by its own path")
    if pattern.startswith("/"):
        spelled = match
    elif pattern == "~" or pattern.startswith("~/"):
        spelled = "~/" + os.path.relpath(match, os.path.expanduser("~"))
    else:
        spelled = "./" + os.path.relpath(match, working_dir)
    return root_escape(spelled, working_dir)


def check_roots(patterns: Iterable[str], working_dir: str, follow: Collection[str]) -> None:
    """Refuse a root that a symlink leads out of where it was written (unless followed).

    The rule is ``callgate.matchers._paths.root_escape``, asked of each pattern's literal root and,
    for a pattern with a wildcard, of each path it matches now.
    """
    for pattern in patterns:
        problem = root_escape(pattern, working_dir, follow=follow)
        literal = literal_root(pattern, working_dir)
        # ``./src/**`` has no wildcard left once its trailing ``/**`` is cut: the glob would
        # only give back the root ``root_escape`` just judged.
        if problem is None and pattern not in follow and _has_wildcard(literal):
            for match in glob.glob(literal, recursive=True):
                problem = problem or _match_escape(pattern, match, working_dir)
        if problem is not None:
            raise SandboxError(f"sandbox root refused: {problem}")


def tool_working_dir(declared: str | None, working_dir: str, follow: Collection[str]) -> str:
    """The real directory a tool's ``working_dir`` names, below ``working_dir``.

    It is what the tool's relative roots are written against, so it is a root too: one that a
    symlink leads out of where it was written (``working_dir: ./sub`` with ``./sub -> /etc``)
    is refused like any other, unless listed in ``filesystem.follow_symlinks``.
    """
    if not declared:
        return os.path.realpath(working_dir)
    if _has_wildcard(declared):
        raise SandboxError(
            f"sandbox working directory refused: {declared!r} holds wildcard characters, so "
            f"whether it leads out through a symlink cannot be checked"
        )
    # Taken literally, as the path gate takes a tool's working_dir: "~" is no home here.
    spelled = "./" + declared if declared.startswith("~") else declared
    problem = None if declared in follow else root_escape(spelled, working_dir)
    if problem is not None:
        raise SandboxError(f"sandbox working directory refused: {problem}")
    return os.path.realpath(os.path.join(working_dir, declared))


def _scanned(roots: tuple[str, ...], runtime: tuple[str, ...]) -> tuple[str, ...]:
    """The declared roots the credential scan walks: those a runtime root does not already
    show to every tool (declaring ``/usr/**`` changes nothing about what ``/usr`` holds)."""
    return tuple(r for r in roots if not any(is_within(r, rt) for rt in runtime))


def build_spec(
    policy: ToolPolicy,
    *,
    working_dir: str,
    environ: Mapping[str, str],
    command: Sequence[str] = (),
    scan_limit: int = SCAN_LIMIT,
) -> SandboxSpec:
    """Resolve a tool policy into a ``SandboxSpec`` for running ``command`` (globs expand now).

    Raises ``SandboxError`` when a root leads out through a symlink or the credential scan
    cannot finish within ``scan_limit`` entries.
    """
    check_supported(policy)
    fs = policy.filesystem
    cwd = tool_working_dir(policy.working_dir, working_dir, fs.follow_symlinks if fs else ())
    write_globs, read_globs = (fs.write or (), fs.read or ()) if fs else ((), ())
    check_roots((*write_globs, *read_globs), cwd, fs.follow_symlinks if fs else ())
    # Each pattern expanded once, in order (a write root missing now is made, then seen).
    write_paths = {pattern: expand_glob(pattern, cwd) for pattern in write_globs}
    writes = _write_roots(write_paths, cwd)
    read_paths = {pattern: expand_glob(pattern, cwd) for pattern in read_globs}
    reads = _read_roots(read_paths, writes)
    named = tuple(p for paths in (*write_paths.values(), *read_paths.values()) for p in paths)
    network = policy.network == "allow"
    runtime = RUNTIME_ROOTS + (NETWORK_FILES if network else ())
    runtime_present = tuple(p for p in runtime if os.path.lexists(p))
    env, withheld = _environment(policy, environ)
    return SandboxSpec(
        read_roots=reads,
        write_roots=writes,
        runtime_roots=runtime_present,
        masked=sensitive_paths(_scanned(reads + writes, runtime_present), named, scan_limit),
        hidden_shells=hidden_shells(command, named, env, cwd),
        env=env,
        withheld_env=withheld,
        network=network,
        working_dir=cwd,
        scratch=policy.scratch,
        limits=policy.limits,
    )

"""From a policy to ready executors: scopes derived from the principal's grants.

``ExecutorSettings`` is the ``executors:`` section of a policy file: what a policy cannot say
about the world (which database name is which file, which local addresses are opened, where the
retrieval corpus lives, how the shell may run). ``build_executors`` combines it with the
principal's grants so each executor is no wider than what the principal was granted:

* file: read scopes from the ``allowed_paths`` of grants whose actions read (``read``, ``list``
  or all), write scopes from grants whose actions write
  (``callgate.matchers._paths.WRITE_ACTIONS`` or all); no writing grant means no write scope at
  all. A grant without ``allowed_paths`` scopes the working directory. A glob the file executor
  cannot hold exactly (``./src/*.py``) becomes the directory before its first wildcard: the
  kernel's path gate still checks the glob itself. A scope whose root a symlink leads out of the
  working directory is refused unless the grant lists it under ``follow_symlinks`` (the same rule
as the loader's); * database: the configured databases named by ``allowed_databases`` (all when
  unconstrained), tables from ``allowed_tables``;
* shell: programs from ``allowed_commands``; a tool declared under ``tools:`` with
  ``tool_class: shell`` gets its own executor in its declared sandbox, other shell calls run in
  ``DEFAULT_SHELL_POLICY``;
* http: loopback and private addresses closed unless listed in ``http.allowed_addresses``;
  names in ``http.hosts`` resolve to the address given (for tests and local deployments); with
  ``http.system_dns: false`` no other name resolves.

The settings themselves are part of the policy schema (``callgate.policy._settings``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from callgate._errors import ExecutorError
from callgate._model import ToolCall, ToolResult
from callgate.matchers._paths import WRITE_ACTIONS, root_escape
from callgate.policy._settings import (
    ExecutorSettings,
    HttpSettings,  # noqa: F401 (importable from its old home)
    ShellSettings,
)

if TYPE_CHECKING:
    from callgate.executors._http import Resolver
    from callgate.policy._schema import Capability, Policy, ToolPolicy

ExecutorFn = Callable[[ToolCall], ToolResult]

_READ_ACTIONS = frozenset({"read", "list"})
_WILDCARDS = frozenset("*?[")


def static_resolver(hosts: Mapping[str, str], *, fallback: Resolver | None) -> Resolver:
    """A resolver answering names in ``hosts`` itself, others with ``fallback`` (or not)."""
    table = {k.lower().rstrip("."): v for k, v in hosts.items()}

    def resolve(host: str, port: int) -> list[str]:
        name = host.lower().rstrip(".")
        if name in table:
            return [table[name]]
        if fallback is None:
            raise OSError(f"{host} is not in the configured hosts and system DNS is off")
        return fallback(host, port)

    return resolve


def _grants(policy: Policy, tool_class: str) -> list[Capability]:
    principal = policy.principal
    return [c for c in (principal.capabilities if principal else ()) if c.tool_class == tool_class]


def _union(values: Iterable[tuple[str, ...] | None]) -> tuple[str, ...] | None:
    """The union of constraint lists; None (unconstrained) when any is None."""
    out: list[str] = []
    for value in values:
        if value is None:
            return None
        out.extend(v for v in value if v not in out)
    return tuple(out)


def executor_scope(pattern: str) -> str:
    """A path pattern as the file executor holds it: exact, ``dir/**``, or widened to the
    directory before its first wildcard (the kernel's gate checks the glob itself)."""
    pattern = os.path.expanduser(pattern)  # the kernel's path gate expands ~ the same way
    stem = pattern[:-3] if pattern.endswith("/**") else pattern
    if not _WILDCARDS & set(stem):
        return pattern
    parts = stem.split("/")
    cut = next(i for i, part in enumerate(parts) if _WILDCARDS & set(part))
    base = "/".join(parts[:cut]) or ("/" if pattern.startswith("/") else ".")
    return base.rstrip("/") + "/**" if base != "/" else "/**"


def _file_scopes(grants: list[Capability], actions: frozenset[str],
                 wd: str) -> list[str] | None:
    relevant = [g for g in grants if not g.actions or actions & set(g.actions)]
    if not relevant:
        return []
    for grant in relevant:
        for pattern in grant.constraints.allowed_paths or ():
            _refuse_escape(pattern, wd, grant.constraints.follow_symlinks or ())
    paths = _union(g.constraints.allowed_paths for g in relevant)
    return None if paths is None else [executor_scope(p) for p in paths]


def _refuse_escape(path: str, wd: str, follow: tuple[str, ...]) -> None:
    why = root_escape(path, wd, follow=follow)
    if why is not None:
        raise ExecutorError(f"cannot build executors: {why}")


def _local(path: str, wd: str, follow: tuple[str, ...]) -> str:
    """A configured file path, relative ones under the working directory, roots checked."""
    _refuse_escape(path, wd, follow)
    return os.path.join(wd, os.path.expanduser(path))


def build_executors(policy: Policy, *, working_dir: str, settings: ExecutorSettings | None = None,
                    resolver: Resolver | None = None) -> dict[str, ExecutorFn]:
    """Executors keyed by tool class (and by declared shell tool name), scoped by the grants.

    ``settings`` defaults to ``policy.executors`` and then to ``ExecutorSettings()``;
    ``resolver`` replaces system DNS for names not in ``settings.http.hosts``. Raises
    ``ExecutorError`` when a setting is invalid.
    """
    from callgate.executors._database import DatabaseExecutor
    from callgate.executors._file import FileExecutor
    from callgate.executors._http import HttpExecutor, system_resolver
    from callgate.executors._retrieval import RetrievalExecutor

    settings = settings or getattr(policy, "executors", None) or ExecutorSettings()
    wd = os.path.realpath(working_dir)
    out: dict[str, ExecutorFn] = {}
    files = _grants(policy, "file")
    out["file"] = FileExecutor(working_dir=wd,
                               allowed_read=_file_scopes(files, _READ_ACTIONS, wd),
                               allowed_write=_file_scopes(files, WRITE_ACTIONS, wd))
    h = settings.http
    fallback = resolver or (system_resolver if h.system_dns else None)
    out["http"] = HttpExecutor(
        timeout_s=h.timeout_s, max_response_bytes=h.max_response_bytes,
        cross_host_redirects=h.cross_host_redirects,
        allowed_addresses=frozenset(h.allowed_addresses),
        resolver=static_resolver(h.hosts, fallback=fallback))
    databases = _databases(policy, settings, wd)
    if databases:
        tables = _union(g.constraints.allowed_tables for g in _grants(policy, "database"))
        out["database"] = DatabaseExecutor(databases=databases, allowed_tables=tables,
                                           allow_ddl=settings.allow_ddl)
    if settings.retrieval_root is not None:
        follow, index = settings.follow_symlinks, settings.retrieval_index
        out["retrieval"] = RetrievalExecutor(
            root=_local(settings.retrieval_root, wd, follow),
            index_path=index if index in (None, ":memory:") else _local(index, wd, follow))
    out.update(_shell_executors(policy, settings.shell, wd))
    return out


def _databases(policy: Policy, settings: ExecutorSettings, wd: str) -> dict[str, str]:
    allowed = _union(g.constraints.allowed_databases for g in _grants(policy, "database"))
    out = {}
    for name, target in settings.databases.items():
        if allowed is not None and name not in allowed:
            continue
        local = target == ":memory:" or "://" in target
        out[name] = target if local else _local(target, wd, settings.follow_symlinks)
    return out


def _shell_executors(policy: Policy, shell: ShellSettings, wd: str) -> dict[str, ExecutorFn]:
    from callgate.executors._shell import ShellExecutor

    commands = _union(g.constraints.allowed_commands for g in _grants(policy, "shell"))

    def make(tool_policy: ToolPolicy | None) -> ExecutorFn:
        return ShellExecutor(tool_policy, working_dir=wd,
                             allowed_commands=commands,
                             allow_metacharacters=shell.allow_metacharacters,
                             allow_interpreters=shell.allow_interpreters, backend=shell.backend,
                             allow_unconfined=shell.allow_unconfined)

    out = {"shell": make(None)}
    for name, declared in policy.tools.items():
        if declared.tool_class == "shell":
            out[name] = make(declared)
    return out

"""The path roots a policy declares, and which of them a symlink leads out of where written.

A policy names places in several sections: capability ``allowed_paths``, tool policies'
``filesystem`` read and write lists (which also become sandbox mounts), and the ``executors``
section's retrieval root, retrieval index and database files. Each is written relative to the
kernel's working directory (a tool's own ``working_dir`` for its filesystem lists) or absolute.
``root_problems`` applies ``_paths.root_escape`` to every one of them, with the opt-in list that
sits beside it, and says where in the policy each escaping root was written; the loader turns
those places into file:line:column problems, and code that builds a policy object in Python can
call it directly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

from callgate.matchers._paths import root_escape
from callgate.policy._schema import Policy, ToolPolicy

Where = tuple[str | int, ...]


class DeclaredRoot(NamedTuple):
    """One path a policy declares: where it is written, the text, its base and opt-ins."""

    where: Where
    pattern: str
    base: str
    follow: tuple[str, ...]


def declared_roots(policy: Policy, working_dir: str) -> Iterator[DeclaredRoot]:
    """Every path pattern of ``policy``, relative ones taken against ``working_dir``."""
    principal = policy.principal
    for i, grant in enumerate(principal.capabilities if principal else ()):
        c = grant.constraints
        for j, pattern in enumerate(c.allowed_paths or ()):
            where: Where = ("principal", "capabilities", i, "constraints", "allowed_paths", j)
            yield DeclaredRoot(where, pattern, working_dir, c.follow_symlinks or ())
    for name, tool in policy.tools.items():
        yield from tool_roots(name, tool, working_dir)
    settings = policy.executors
    if settings is None:
        return
    follow = settings.follow_symlinks
    for key in ("retrieval_root", "retrieval_index"):
        value = getattr(settings, key)
        if value is not None and value != ":memory:":
            yield DeclaredRoot(("executors", key), value, working_dir, follow)
    for db, target in settings.databases.items():
        if target != ":memory:" and "://" not in target:
            yield DeclaredRoot(("executors", "databases", db), target, working_dir, follow)


def tool_roots(name: str, tool: ToolPolicy, working_dir: str) -> Iterator[DeclaredRoot]:
    """The filesystem patterns of one tool policy, against its own or the given directory."""
    fs = tool.filesystem
    if fs is None:
        return
    base = os.path.join(working_dir, tool.working_dir) if tool.working_dir else working_dir
    for kind in ("read", "write"):
        for j, pattern in enumerate(getattr(fs, kind) or ()):
            yield DeclaredRoot(("tools", name, "filesystem", kind, j), pattern, base,
                               fs.follow_symlinks)


def root_problems(policy: Policy, working_dir: str) -> list[tuple[Where, str]]:
    """``(where, why)`` for every declared root a symlink leads out of where it was written."""
    found = []
    for root in declared_roots(policy, working_dir):
        why = root_escape(root.pattern, root.base, follow=root.follow)
        if why is not None:
            found.append((root.where, why))
    return found

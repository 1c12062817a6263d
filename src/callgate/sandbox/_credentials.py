"""Which credential paths inside the visible roots the sandbox covers, found by a complete scan.

"Credential" is the one project-wide definition of a sensitive path
(``callgate.matchers._sensitive``): ``.ssh``, ``.aws``, ``.env*``, ``id_rsa``, ``*credential*``,
``secrets.yaml`` … A bind mount cannot hide "every ``.env`` below here" by rule, so every declared
root is walked, to any depth, before each run (``os.scandir``: one listing per directory and no
``stat`` per entry).

The walk fails closed:

* it visits at most ``limit`` entries over all roots (``SCAN_LIMIT`` by default); a walk that
  would need more raises ``SandboxError`` naming the root, and the tool does not start;
* a directory it cannot list is covered whole (the tool may still know names inside it);
* symlinks are not followed: a link's target is covered where it really is, if visible.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from callgate._errors import SandboxError
from callgate.matchers._sensitive import SENSITIVE_PATH, is_sensitive_name

#: How many directory entries the credential scan may visit per run, over all roots.
SCAN_LIMIT = 100_000


def is_within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _sensitive(parent_name: str, name: str) -> bool:
    """The shared definition, asked of one name (or, for ``.config/gcloud``, two)."""
    if is_sensitive_name(name):
        return True
    # Names sensitive only under a parent; the parent itself was not (or it was not entered).
    return not is_sensitive_name(parent_name) and bool(
        SENSITIVE_PATH.search(f"/{parent_name}/{name}")
    )


class _Walk:
    """One scan over several roots, sharing one entry limit."""

    def __init__(self, limit: int) -> None:
        self.remaining = limit
        self.limit = limit
        self.found: list[str] = []
        self.unlistable: list[str] = []

    def root(self, root: str) -> None:
        stack = [root]
        while stack:
            directory = stack.pop()
            try:
                self._directory(root, directory, stack)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since it was listed: nothing to cover
            except OSError:
                self.unlistable.append(directory)

    def _directory(self, root: str, directory: str, stack: list[str]) -> None:
        parent_name = os.path.basename(directory)
        with os.scandir(directory) as entries:
            for entry in entries:
                self.remaining -= 1
                if self.remaining < 0:
                    raise SandboxError(
                        f"the credential scan of {root} needs more than {self.limit} directory "
                        f"entries, so credential files below it cannot all be hidden; declare "
                        f"narrower read/write roots, or raise scan_limit"
                    )
                if _sensitive(parent_name, entry.name):
                    self.found.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)


def scan(roots: Iterable[str], limit: int = SCAN_LIMIT) -> tuple[list[str], list[str]]:
    """(credential paths, directories that could not be listed) below ``roots``."""
    walk = _Walk(limit)
    for root in roots:
        if os.path.isdir(root):
            walk.root(root)
    return walk.found, walk.unlistable


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
    visible: tuple[str, ...], named: tuple[str, ...], limit: int = SCAN_LIMIT
) -> tuple[str, ...]:
    """Credential paths inside the visible roots that were not declared by name.

    ``named`` are the declared roots before nesting was removed. A credential path is
    declared by name when a declared root is that path or lies below it; a root above it
    (``~/**``) does not name it. Declaring ``~/.ssh/known_hosts`` shows that file only: the
    rest of ``~/.ssh`` stays hidden. Raises ``SandboxError`` when the scan cannot finish.
    """
    found, unlistable = scan(visible, limit)
    # A symlinked credential is masked where it really is; if that place is not visible the
    # link already dangles inside the sandbox.
    resolved = {os.path.realpath(path) for path in found}
    resolved.update(unlistable)
    masked: set[str] = set()
    for path in resolved:
        if not os.path.exists(path) or not any(is_within(path, root) for root in visible):
            continue
        below = [root for root in named if is_within(root, path)]
        if path in below:
            continue
        masked.update(off_path(path, below) if below else [path])
    return tuple(sorted(masked))

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

**The walk is cached per directory** (``ScanCache``, one per process: ``SCAN_CACHE``). What a
directory's listing gave (its credential names, its subdirectories, its entry count) is reused
while the directory's stamp — device, inode, ``st_mtime`` and ``st_ctime`` — is what it was
when it was listed: creating, removing or renaming an entry changes the directory's ``st_mtime``
and ``st_ctime``, so a credential file created after a run is found by the next one, and only
the directories that changed are listed again. A listing is reused only when it can be trusted:

* a directory whose stamp cannot be read now is listed again;
* a listing whose directory changed within ``RACY_MARGIN_NS`` before it was listed is not kept
  (a filesystem stamps changes with a coarse clock — a tick, two seconds on FAT — so a change
  just after the listing could leave the same stamp), nor one stamped in the future;
* ``st_ctime`` cannot be set back by a user (``utime`` sets it to now), so restoring a
  directory's ``st_mtime`` after planting a file does not hide the change.

Entries of a reused listing count against the limit as if they had been listed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from callgate._errors import SandboxError
from callgate.matchers._sensitive import SENSITIVE_PATH, is_sensitive_name

#: How many directory entries the credential scan may visit per run, over all roots.
SCAN_LIMIT = 100_000
#: A listing is kept only if its directory last changed at least this long before it was
#: listed: longer than any filesystem's timestamp granularity (FAT: two seconds).
RACY_MARGIN_NS = 3_000_000_000
#: Directory listings the cache keeps (all dropped when it is full).
CACHE_DIRECTORIES = 100_000

#: (st_dev, st_ino, st_mtime_ns, st_ctime_ns) of a directory.
Stamp = tuple[int, int, int, int]


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


def _stamp(directory: str) -> Stamp | None:
    try:
        info = os.stat(directory, follow_symlinks=False)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class Listing:
    """What one directory's listing gave the scan."""

    stamp: Stamp | None
    entries: int
    found: tuple[str, ...]
    subdirs: tuple[str, ...]


class ScanCache:
    """Directory listings of earlier scans, reused while each directory's stamp is unchanged.

    ``clock`` gives the time (ns since the epoch) a listing is checked against; ``margin_ns``
    is how long before the listing its directory must have last changed for it to be kept.
    Thread-safe; holds at most ``max_directories`` listings (all dropped when it is full).
    """

    def __init__(
        self,
        *,
        margin_ns: int = RACY_MARGIN_NS,
        clock: Callable[[], int] = time.time_ns,
        max_directories: int = CACHE_DIRECTORIES,
    ) -> None:
        self.margin_ns = margin_ns
        self.clock = clock
        self.max_directories = max_directories
        self._listings: dict[str, Listing] = {}
        self._lock = threading.Lock()

    def get(self, directory: str) -> Listing | None:
        """The kept listing of ``directory`` if its stamp is still the one listed, else None."""
        kept = self._listings.get(directory)  # one dict read: atomic
        if kept is None or _stamp(directory) == kept.stamp:
            return kept
        with self._lock:
            if self._listings.get(directory) is kept:
                del self._listings[directory]
        return None

    def put(self, directory: str, listing: Listing, listed_at: int) -> None:
        """Keep ``listing`` (made at ``listed_at``) if its stamp can be trusted later."""
        if listing.stamp is None:
            return
        _, _, mtime, ctime = listing.stamp
        newest = max(mtime, ctime)
        if newest > listed_at - self.margin_ns or newest > self.clock() + self.margin_ns:
            return  # changed too recently (or stamped in the future): not to be trusted
        with self._lock:
            if len(self._listings) >= self.max_directories:
                self._listings.clear()
            self._listings[directory] = listing

    def clear(self) -> None:
        """Forget every listing."""
        with self._lock:
            self._listings.clear()

    def __len__(self) -> int:
        return len(self._listings)


#: The process's cache of directory listings.
SCAN_CACHE = ScanCache()


class _Walk:
    """One scan over several roots, sharing one entry limit."""

    def __init__(self, limit: int, cache: ScanCache | None) -> None:
        self.remaining = limit
        self.limit = limit
        self.cache = cache
        self.found: list[str] = []
        self.unlistable: list[str] = []

    def root(self, root: str) -> None:
        stack = [root]
        while stack:
            directory = stack.pop()
            try:
                listing = self._listing(root, directory)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since it was listed: nothing to cover
            except OSError:
                self.unlistable.append(directory)
                continue
            self.found.extend(listing.found)
            stack.extend(listing.subdirs)

    def _count(self, root: str, entries: int) -> None:
        self.remaining -= entries
        if self.remaining < 0:
            raise SandboxError(
                f"the credential scan of {root} needs more than {self.limit} directory "
                f"entries, so credential files below it cannot all be hidden; declare "
                f"narrower read/write roots, or raise scan_limit"
            )

    def _listing(self, root: str, directory: str) -> Listing:
        kept = None if self.cache is None else self.cache.get(directory)
        if kept is not None:
            self._count(root, kept.entries)
            return kept
        listed_at = time.time_ns() if self.cache is None else self.cache.clock()
        stamp = _stamp(directory)  # before the listing: a change during it shows next time
        parent_name = os.path.basename(directory)
        found: list[str] = []
        subdirs: list[str] = []
        seen: list[os.DirEntry[str]] = []
        remaining = self.remaining
        with os.scandir(directory) as listed:
            for entry in listed:
                seen.append(entry)
                if len(seen) > remaining:  # past the limit: stop listing here
                    self._count(root, len(seen))
        entries = len(seen)
        self._count(root, entries)
        # Every text ``_sensitive`` asks about an entry (``/name``, ``/parent/name``) is a
        # piece of ``/parent/name``: an entry whose path holds none of the definition's
        # literals is not sensitive, and the screen looks at all of them in one pass.
        asked = SENSITIVE_PATH.possible_each([f"/{parent_name}/{entry.name}" for entry in seen])
        if True in asked:
            for entry, ask in zip(seen, asked, strict=True):
                if ask and _sensitive(parent_name, entry.name):
                    found.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.path)
        else:  # the common case: no entry to look at more closely
            subdirs = [entry.path for entry in seen if entry.is_dir(follow_symlinks=False)]
        listing = Listing(stamp, entries, tuple(found), tuple(subdirs))
        if self.cache is not None:
            self.cache.put(directory, listing, listed_at)
        return listing


def scan(
    roots: Iterable[str], limit: int = SCAN_LIMIT, cache: ScanCache | None = SCAN_CACHE
) -> tuple[list[str], list[str]]:
    """(credential paths, directories that could not be listed) below ``roots``.

    ``cache`` holds the listings of earlier scans (None: list every directory).
    """
    walk = _Walk(limit, cache)
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
    visible: tuple[str, ...],
    named: tuple[str, ...],
    limit: int = SCAN_LIMIT,
    cache: ScanCache | None = SCAN_CACHE,
) -> tuple[str, ...]:
    """Credential paths inside the visible roots that were not declared by name.

    ``named`` are the declared roots before nesting was removed. A credential path is
    declared by name when a declared root is that path or lies below it; a root above it
    (``~/**``) does not name it. Declaring ``~/.ssh/known_hosts`` shows that file only: the
    rest of ``~/.ssh`` stays hidden. Raises ``SandboxError`` when the scan cannot finish.
    ``cache`` holds the listings of earlier scans (see ``ScanCache``).
    """
    found, unlistable = scan(visible, limit, cache)
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

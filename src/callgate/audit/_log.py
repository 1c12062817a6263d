"""The append-only segment: the chain itself, one record per line, one ``write()`` per append.

``<db>.log`` beside the SQLite database holds the canonical JSON text of every event, in
sequence order, each followed by a newline (canonical JSON holds no raw newline). It is the
log's truth: the database is an index of it, built behind it in batches, and can be rebuilt
from it.

Writers take turns with ``flock``, waiting at most ``LOCK_TIMEOUT`` for each other: an append
holds the file's exclusive lock while it takes in what other writers appended (their lines past
the point it last saw), writes its own line with one ``write()`` (the file is opened
``O_APPEND``) and, for ``durability="fsync"``, waits for ``fdatasync``. A line in the file
survives the writer's process being killed the moment the append returns: it is in the
operating system's cache, which the file system writes out whatever becomes of the process.
Readers hold the shared lock while they read the tail.

A writer killed inside ``write()`` (a record of several pages, interrupted between them) leaves
a last line without its newline: a *torn tail*, which no append ever acknowledged. The next
writer cuts it off under the exclusive lock; readers ignore it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final, NamedTuple

from callgate._errors import AuditError
from callgate.audit._keys import display

#: Bytes read at a time when a tail is taken in.
_CHUNK: Final = 1 << 20
#: Seconds an append or a read waits for another writer's lock (as SQLite's busy timeout).
LOCK_TIMEOUT: Final = 10.0


def log_path_for(db: str | os.PathLike[str]) -> Path:
    """The segment of the log whose index is ``db``: ``<db>.log``."""
    return Path(os.fspath(db) + ".log")


class Line(NamedTuple):
    """One complete line of the segment: its byte range and its text (newline left out)."""

    start: int
    end: int
    text: str


class Segment:
    """The segment file of one store (read and append; or read only)."""

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool) -> None:
        self.path = os.fspath(path)
        self.read_only = read_only
        self.lock_timeout = LOCK_TIMEOUT
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_APPEND | os.O_CREAT
        try:
            self._fd = os.open(self.path, flags | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            raise AuditError(f"the log's segment {display(self.path)} is missing") from None
        except OSError as exc:
            raise AuditError(f"cannot open the log's segment {display(self.path)}: {exc}") from exc

    def close(self) -> None:
        """Close the file (and release any lock held on it)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        """Hold the segment's lock for the block (see :meth:`lock`)."""
        self.lock(exclusive=exclusive)
        try:
            yield
        finally:
            self.unlock()

    def lock(self, *, exclusive: bool) -> None:
        """Take the segment's lock: exclusive to append, shared to read a tail. Another writer
        holding it longer than ``lock_timeout`` seconds is an AuditError (a stopped or hung
        process must not hold every decision forever). Release it with :meth:`unlock`."""
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline: float | None = None
        pause = 0.0005
        while True:
            try:
                fcntl.flock(self._fd, mode)
                return
            except BlockingIOError:
                now = time.monotonic()
                deadline = now + self.lock_timeout if deadline is None else deadline
                if now >= deadline:
                    raise AuditError(
                        f"the log's segment {display(self.path)} is locked by another writer"
                        f" (waited {self.lock_timeout:g} s)") from None
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 0.05)
            except OSError as exc:
                raise AuditError(
                    f"cannot lock the log's segment {display(self.path)}: {exc}") from exc

    def unlock(self) -> None:
        """Release the lock :meth:`lock` took."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def size(self) -> int:
        """The segment's length in bytes now (where its end is: ``lseek`` answers without
        building the ``stat`` result ``fstat`` would; reads and appends do not use the offset)."""
        return os.lseek(self._fd, 0, os.SEEK_END)

    def read(self, start: int, stop: int) -> bytes:
        """The bytes in ``[start, stop)`` (fewer when the file is shorter)."""
        parts: list[bytes] = []
        while start < stop:
            data = os.pread(self._fd, min(_CHUNK, stop - start), start)
            if not data:
                break
            parts.append(data)
            start += len(data)
        return b"".join(parts)

    def lines(self, start: int, stop: int) -> tuple[list[Line], int]:
        """The complete lines in ``[start, stop)`` and the offset just past the last of them
        (a torn tail after it is left out). Raises AuditError for a line that is not UTF-8."""
        data = self.read(start, stop)
        out: list[Line] = []
        at = 0
        while True:
            end = data.find(b"\n", at)
            if end < 0:
                break
            try:
                text = data[at:end].decode("utf-8")
            except UnicodeDecodeError:
                raise AuditError(f"line at byte {start + at} of {display(self.path)} is not "
                                 "UTF-8 text: the segment was edited") from None
            out.append(Line(start + at, start + end + 1, text))
            at = end + 1
        return out, start + at

    def append(self, data: bytes, *, at: int, sync: bool) -> None:
        """Write ``data`` at the end, which is ``at`` bytes (hold the exclusive lock). On any
        failure the segment is cut back to ``at``, as far as the file system allows, and
        AuditError is raised."""
        try:
            written = os.write(self._fd, data)  # a regular file takes it whole, bar a full disk
            # (the rest, if any, through a view: no copy, and no view made when none is left)
            view = memoryview(data)[written:] if written < len(data) else None
            while view:
                written = os.write(self._fd, view)
                if written <= 0:  # pragma: no cover - a regular file writes or raises
                    raise OSError(errno.EIO, "short write")
                view = view[written:]
            if sync:
                os.fdatasync(self._fd)
        except OSError as exc:
            self.cut(at)
            raise AuditError(f"cannot append to the log's segment {display(self.path)}: {exc}"
                             ) from exc

    def cut(self, size: int) -> bool:
        """Truncate to ``size`` bytes (a torn tail, a failed append); whether it worked. (When
        it did not, the next writer cuts the torn tail itself; readers ignore it.)"""
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            return False
        return True

    def sync_directory(self) -> None:
        """Make the segment's directory entry durable (after creating it)."""
        try:
            fd = os.open(os.path.dirname(os.path.abspath(self.path)) or ".", os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

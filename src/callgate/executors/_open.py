"""Open exactly the path that was decided: no symlink followed in any component.

The kernel judges a call on the canonical form of its path (``realpath`` at decision time), so
that form holds no symlink, ``.`` or ``..``. Opening it again by name would walk the filesystem a
second time, and a directory swapped for a symlink in between would send the open somewhere no
rule judged. Here the open refuses to follow any symlink at all: if one appeared after the
decision, the open fails with ``ELOOP`` instead of reaching a new target. The real path of the
descriptor is then compared with the path asked for, so a rename during the open is caught too.

Two ways to do that open, with the same outcome:

* ``openat2`` with ``RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (Linux 5.6 and later), one
  system call that the kernel resolves with no symlink allowed. Python has no wrapper; it is
  reached through ``ctypes`` on the machines whose syscall number is known here.
* otherwise a walk from ``/``: each directory component opened with ``O_NOFOLLOW`` relative to
  the descriptor of the one before, the last one with ``O_NOFOLLOW`` and the caller's flags.

Everything done after the open goes through the descriptor (or relative to a directory
descriptor for the last name), so no second path lookup happens.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
from typing import Any

from callgate.executors._result import denied

_OPENAT2 = {"x86_64": 437, "amd64": 437, "aarch64": 437, "arm64": 437}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_AT_FDCWD = -100
_F_GETPATH = 50  # macOS fcntl: the path of a descriptor
#: Flags for a directory opened only to be walked through or used as ``dir_fd``.
DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _Openat2:
    """The ``openat2`` system call through ``ctypes``; ``None`` from ``open`` when unusable."""

    def __init__(self) -> None:
        number = _OPENAT2.get(platform.machine().lower()) if sys.platform == "linux" else None
        self.number = number
        self._syscall: Any = None
        if number is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            self._syscall = libc.syscall
            self._syscall.restype = ctypes.c_long

    def open(self, path: str, flags: int, mode: int) -> int | None:
        """A descriptor for ``path`` resolved with no symlink, or ``None`` to walk instead.

        Raises ``OSError`` for what the kernel refused (``ELOOP`` for a symlink on the way).
        """
        if self._syscall is None or self.number is None:
            return None
        # No O_NOFOLLOW: RESOLVE_NO_SYMLINKS already refuses a trailing symlink, as ELOOP,
        # where O_NOFOLLOW with O_DIRECTORY would report ENOTDIR.
        how = _OpenHow(flags & ~os.O_NOFOLLOW, mode if flags & os.O_CREAT else 0,
                       _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        fd = self._syscall(ctypes.c_long(self.number), ctypes.c_int(_AT_FDCWD),
                           ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code == errno.ENOSYS:  # an old kernel or a seccomp filter: never ask again
            self._syscall = None
            return None
        if code in (errno.EPERM, errno.EINVAL, errno.E2BIG):
            return None  # a filter or flags this kernel lacks; the walk reports real errors
        raise OSError(code, os.strerror(code), path)


_openat2 = _Openat2()


def segments(path: str) -> list[str]:
    """The names of a canonical absolute path, refusing any other form.

    Canonical here means what ``realpath`` returns: absolute, no empty, ``.`` or ``..`` segment,
    no trailing slash, no NUL. ``/`` has no segments. Anything else is denied
    (``path.not-canonical``): a ``..`` climbs from wherever a symlink led, which is exactly what
    this module does not allow.
    """
    if not path.startswith("/") or "\x00" in path:
        raise denied("path.not-canonical", f"{path!r} is not an absolute path")
    if path == "/":
        return []
    names = path[1:].split("/")
    if any(name in ("", ".", "..") for name in names):
        raise denied("path.not-canonical", f"{path!r} holds an empty, '.' or '..' segment")
    return names


def open_exact(path: str, flags: int, mode: int = 0o644, *, use_openat2: bool = True) -> int:
    """Open the canonical absolute ``path`` without following a symlink anywhere in it.

    ``flags`` are ``os.open`` flags for the last component (``O_NOFOLLOW`` and ``O_CLOEXEC`` are
    added). A symlink in any component raises ``OSError`` with ``ELOOP``; a path that is not
    canonical, or a descriptor whose real path is not ``path``, is denied (``path.not-canonical``,
    ``path.changed``). ``use_openat2=False`` forces the component walk.
    """
    segments(path)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _openat2.open(path, flags, mode) if use_openat2 else None
    if fd is None:
        fd = _walk(path, flags, mode)
    try:
        verify(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_parent(path: str, *, use_openat2: bool = True) -> tuple[int, str]:
    """A verified directory descriptor for the parent of ``path`` and the last name in it.

    The descriptor (``DIR_FLAGS``) serves as ``dir_fd`` for creating, stat-ing or removing that
    one name, so the operation cannot be redirected by a change to the directories above.
    """
    names = segments(path)
    if not names:
        raise denied("path.invalid", "/ has no parent directory")
    parent = "/" + "/".join(names[:-1])
    return open_exact(parent, DIR_FLAGS, use_openat2=use_openat2), names[-1]


def open_in(dir_fd: int, name: str, flags: int, mode: int = 0o644) -> int:
    """Open one ``name`` in the directory ``dir_fd`` without following it if it is a symlink."""
    if name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise denied("path.invalid", f"{name!r} is not a single name")
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, "a symlink is not followed here", name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk(path: str, flags: int, mode: int) -> int:
    """Open ``path`` one component at a time, each relative to the one before, none followed."""
    names = segments(path)
    if not names:
        return os.open("/", flags, mode)
    fd = os.open("/", DIR_FLAGS)
    try:
        for name in names[:-1]:
            next_fd = _open_dir(fd, name)
            os.close(fd)
            fd = next_fd
        return _open_last(fd, names[-1], flags, mode)
    finally:
        os.close(fd)


def _open_dir(dir_fd: int, name: str) -> int:
    # O_DIRECTORY with O_NOFOLLOW refuses a symlink (as ENOTDIR), O_PATH or not.
    try:
        return os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        raise _symlink_or(exc, dir_fd, name) from exc


def _open_last(dir_fd: int, name: str, flags: int, mode: int) -> int:
    try:
        return open_in(dir_fd, name, flags, mode)
    except OSError as exc:
        raise _symlink_or(exc, dir_fd, name) from exc


def _symlink_or(exc: OSError, dir_fd: int, name: str) -> OSError:
    """``ELOOP`` when ``name`` is a symlink (``O_DIRECTORY`` reports one as ``ENOTDIR``)."""
    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
        return exc
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return exc
    if not is_link:
        return exc
    return OSError(errno.ELOOP, "a symlink is not followed here", name)


def verify(fd: int, path: str) -> None:
    """Check that ``fd`` holds ``path`` itself: ``ELOOP`` for a symlink, else ``path.changed``."""
    info = os.fstat(fd)
    if stat.S_ISLNK(info.st_mode):
        raise OSError(errno.ELOOP, "a symlink is not followed here", path)
    real = descriptor_path(fd)
    if real != path:
        raise denied("path.changed", f"{path} was opened as {real}: it changed after the check")


def descriptor_path(fd: int) -> str:
    """The real path the kernel holds for an open descriptor; fails closed when unknown."""
    if sys.platform.startswith("linux"):
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:  # no /proc: nothing can be verified, so nothing is used
            raise denied("path.unverifiable", f"cannot read the descriptor's path: {exc}") from exc
    elif sys.platform == "darwin":
        import fcntl

        raw = fcntl.fcntl(fd, _F_GETPATH, b"\x00" * 1024)
        real = os.fsdecode(raw.split(b"\x00", 1)[0])
    else:
        raise denied("path.unverifiable", "cannot verify the real path of an open file here")
    if not real.startswith(os.sep):
        raise denied("path.unverifiable", f"descriptor does not name a path: {real!r}")
    return real

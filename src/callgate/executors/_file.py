"""The file executor: read, write, list and delete exactly the path that was decided.

The kernel judges a call on the canonical path (``realpath`` at decision time) and hands that
string here. Opening it again by name would resolve it a second time, and a directory swapped
for a symlink in between would send the open to a file no rule judged. So every operation opens
the path with *no symlink followed in any component* (``callgate.executors._open``: ``openat2``
with ``RESOLVE_NO_SYMLINKS``, or an ``O_NOFOLLOW`` walk), verifies that the descriptor's real
path is that same path, checks it against this executor's own trees, and then works only through
the descriptor. A symlink that appeared after the decision makes the call a denial
(``path.symlink``), never a read of the new target. Writes and deletes work on one name relative
to a verified descriptor of the parent directory. Regular files with more than one hard link are
refused: a hard link would let a path inside a tree name a file that lives outside it.

Called directly (without the kernel), the executor takes paths relative to ``working_dir`` too,
but the path must already be canonical apart from ``.`` and repeated slashes: a symlink in it is
refused and so is ``..``, which climbs from wherever a symlink led.

Scopes are written as exact paths or ``dir/**`` trees, relative to ``working_dir`` or absolute;
they are canonicalised (``realpath``) once, when the executor is built.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from callgate._errors import ExecutorError
from callgate._model import TaintLabel, ToolCall, ToolResult
from callgate.executors._open import descriptor_path, open_exact, open_in, open_parent, verify
from callgate.executors._result import (
    Outcome,
    check_action,
    denied,
    failed,
    guarded,
    param_str,
)

__all__ = ["FileExecutor", "PathScope", "descriptor_path"]

_ACTIONS = ("read", "write", "list", "delete")
_GLOB_CHARS = frozenset("*?[]{}")
_OPEN_FLAGS = os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


class PathScope:
    """A set of canonical exact paths and trees; ``contains`` answers for a canonical path."""

    def __init__(self, patterns: Sequence[str], base: str) -> None:
        exact: set[str] = set()
        trees: list[str] = []
        for pattern in patterns:
            is_tree = pattern.endswith("/**") or pattern == "**"
            stem = pattern[:-3] if pattern.endswith("/**") else ("" if is_tree else pattern)
            if "\x00" in pattern or _GLOB_CHARS & set(stem):
                raise ExecutorError(f"unsupported path pattern {pattern!r}: use a path or dir/**")
            canonical = os.path.realpath(os.path.join(base, stem or "."))
            (trees.append if is_tree else exact.add)(canonical)
        self.exact = frozenset(exact)
        self.trees = tuple(trees)

    def contains(self, real: str) -> bool:
        """Whether the canonical path ``real`` is one of the exact paths or inside a tree."""
        if real in self.exact:
            return True
        return any(real == tree or real.startswith(tree.rstrip(os.sep) + os.sep)
                   for tree in self.trees)


class FileExecutor:
    """Confined file access: ``read``, ``write``, ``list``, ``delete``.

    ``allowed_read`` / ``allowed_write`` are exact paths or ``dir/**`` trees; ``None`` means the
    ``working_dir`` tree and an empty sequence allows nothing. Writing does not imply reading.
    Parameters: ``path``; ``content`` and ``append`` for write; ``encoding`` (``utf-8`` by
    default, any Python codec, or ``base64`` for bytes). Output is tainted ``tool-output`` with
    origin ``file:<real path>``.
    """

    tool_class = "file"

    def __init__(
        self,
        *,
        working_dir: str,
        allowed_read: Sequence[str] | None,
        allowed_write: Sequence[str] | None,
        max_bytes: int = 10 * 2**20,
        max_entries: int = 10_000,
    ) -> None:
        if max_bytes <= 0 or max_entries <= 0:
            raise ExecutorError("max_bytes and max_entries must be positive")
        self._root = os.path.realpath(working_dir)
        if not os.path.isdir(self._root):
            raise ExecutorError(f"working_dir is not a directory: {working_dir}")
        self._read = PathScope(["**"] if allowed_read is None else allowed_read, self._root)
        self._write = PathScope(["**"] if allowed_write is None else allowed_write, self._root)
        self.max_bytes = max_bytes
        self.max_entries = max_entries

    def __call__(self, call: ToolCall) -> ToolResult:
        """Same as ``execute``: lets the executor be registered where a callable is expected."""
        return self.execute(call)

    def execute(self, call: ToolCall) -> ToolResult:
        """Run an allowed file call under this executor's own checks."""

        def run() -> Outcome:
            check_action(call, self.tool_class, _ACTIONS)
            params = call.parameters
            path = self._lexical(param_str(params, "path"))
            handler = {
                "read": self._do_read,
                "write": self._do_write,
                "list": self._do_list,
                "delete": self._do_delete,
            }[call.action]
            try:
                output, origin = handler(path, params)
            except OSError as exc:
                raise _os_refusal(exc, path) from exc
            return Outcome(output, [TaintLabel(source="tool-output", origin=f"file:{origin}")])

        return guarded(call, run)

    def _lexical(self, raw: str) -> str:
        if not raw or "\x00" in raw:
            raise denied("path.invalid", "path is empty or contains a NUL byte")
        # No lexical collapse of "..": the OS resolves it after symlinks, so the early check
        # below realpaths the whole path and the exact open refuses ".." outright.
        return os.path.join(self._root, raw)

    def _require(self, scope: PathScope, real: str, verb: str) -> None:
        if not scope.contains(real):
            raise denied("path.outside-allowed", f"{verb} of {real} is outside the allowed paths")

    def _decided(self, scope: PathScope, path: str, verb: str) -> str:
        """The exact form to open, in ``scope``; the open then guarantees it is what is held.

        ``open_exact`` follows no symlink and verifies the descriptor's real path, so checking
        the exact form here is checking the descriptor, before anything is opened. The
        ``realpath`` check first only words the common refusal well (``path.outside-allowed``
        for a ``..`` or a symlink leading out).
        """
        self._require(scope, os.path.realpath(path), verb)
        exact = _exact_form(path)
        self._require(scope, exact, verb)
        return exact

    # -- read and list ---------------------------------------------------------------------
    def _do_read(self, path: str, params: Mapping[str, Any]) -> tuple[Any, str]:
        encoding = param_str(params, "encoding", default="utf-8")
        real = self._decided(self._read, path, "read")
        fd = open_exact(real, os.O_RDONLY | _OPEN_FLAGS)
        try:
            _require_single_regular(fd, real)
            if os.fstat(fd).st_size > self.max_bytes:
                raise denied("file.too-large", f"{real} is larger than {self.max_bytes} bytes")
            data = _read_at_most(fd, self.max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:
            raise denied("file.too-large", f"{real} grew past {self.max_bytes} bytes")
        content = _decode(data, encoding)
        return {"path": real, "content": content, "encoding": encoding, "size": len(data)}, real

    def _do_list(self, path: str, params: Mapping[str, Any]) -> tuple[Any, str]:
        real = self._decided(self._read, path, "list")
        fd = open_exact(real, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
        try:
            entries: list[dict[str, Any]] = []
            truncated = False
            with os.scandir(fd) as listing:
                for entry in listing:
                    if len(entries) >= self.max_entries:
                        truncated = True
                        break
                    entries.append(_describe(entry))
        finally:
            os.close(fd)
        entries.sort(key=lambda item: str(item["name"]))
        return {"path": real, "entries": entries, "truncated": truncated}, real

    # -- write and delete ------------------------------------------------------------------
    def _open_parent(self, path: str) -> tuple[int, str, str]:
        """Open the parent directory exactly; return its fd, the last name and the target path."""
        name = os.path.basename(path)
        if name in ("", ".", ".."):
            raise denied("path.invalid", f"{path} does not name a file")
        parent = os.path.realpath(os.path.dirname(path))
        self._require(self._write, os.path.join(parent, name), "write")
        target = _exact_form(path)
        self._require(self._write, target, "write")
        dfd, name = open_parent(target)
        return dfd, name, target

    def _do_write(self, path: str, params: Mapping[str, Any]) -> tuple[Any, str]:
        data = _encode(param_str(params, "content"), param_str(params, "encoding",
                                                               default="utf-8"))
        append = params.get("append", False)
        if not isinstance(append, bool):
            raise failed("params.invalid", "parameter 'append' must be a boolean")
        if len(data) > self.max_bytes:
            raise denied("file.too-large", f"content is larger than {self.max_bytes} bytes")
        dfd, name, target = self._open_parent(path)
        try:
            # No O_TRUNC: nothing is changed before the descriptor has been verified.
            fd = open_in(dfd, name, os.O_WRONLY | os.O_CREAT | _OPEN_FLAGS, 0o644)
        finally:
            os.close(dfd)
        try:
            verify(fd, target)
            _require_single_regular(fd, target)
            if append:
                os.lseek(fd, 0, os.SEEK_END)
            else:
                os.ftruncate(fd, 0)
            _write_all(fd, data)
        finally:
            os.close(fd)
        return {"path": target, "bytes_written": len(data), "append": append}, target

    def _do_delete(self, path: str, params: Mapping[str, Any]) -> tuple[Any, str]:
        dfd, name, target = self._open_parent(path)
        try:
            info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                raise failed("file.is-directory", f"{target} is a directory")
            os.unlink(name, dir_fd=dfd)  # removes a symlink itself, never what it points to
        finally:
            os.close(dfd)
        return {"path": target, "deleted": True}, target


def _exact_form(path: str) -> str:
    """``path`` without ``.`` and empty segments; ``..`` is refused, never collapsed."""
    names = [name for name in path.split("/") if name not in ("", ".")]
    if ".." in names:
        raise denied("path.not-canonical",
                     f"{path}: '..' is not followed here; pass the canonical path")
    return "/" + "/".join(names)


def _require_single_regular(fd: int, real: str) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise denied("file.not-regular", f"{real} is not a regular file")
    if info.st_nlink > 1:
        raise denied("file.hard-link", f"{real} has {info.st_nlink} hard links")


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _decode(data: bytes, encoding: str) -> str:
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode(encoding)
    except LookupError as exc:
        raise failed("params.encoding", f"unknown encoding {encoding!r}") from exc
    except UnicodeDecodeError as exc:
        raise failed("file.decode", f"content is not valid {encoding}: {exc.reason}") from exc


def _encode(content: str, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except binascii.Error as exc:
            raise failed("params.encoding", "content is not valid base64") from exc
    try:
        return content.encode(encoding)
    except LookupError as exc:
        raise failed("params.encoding", f"unknown encoding {encoding!r}") from exc
    except UnicodeEncodeError as exc:
        raise failed("params.encoding", f"content cannot be encoded: {exc.reason}") from exc


def _describe(entry: os.DirEntry[str]) -> dict[str, Any]:
    info = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(info.st_mode):
        kind = "dir"
    elif stat.S_ISREG(info.st_mode):
        kind = "file"
    else:
        kind = "other"
    return {"name": entry.name, "type": kind, "size": info.st_size}


def _os_refusal(exc: OSError, path: str) -> Exception:
    """Map an OS error to a stable reason id (symlinks refused by O_NOFOLLOW are denials)."""
    code = exc.errno
    if code == errno.ELOOP:
        return denied("path.symlink", f"{path}: a symlink on the way is not followed (the path "
                      "changed after it was decided, or is not canonical)")
    reasons = {
        errno.ENOENT: "file.not-found",
        errno.EACCES: "file.permission",
        errno.EPERM: "file.permission",
        errno.ENOTDIR: "file.not-a-directory",
        errno.EISDIR: "file.is-directory",
        errno.ENXIO: "file.not-regular",
    }
    reason = reasons.get(code if code is not None else -1, "file.os-error")
    return failed(reason, f"{path}: {exc.strerror or exc}")

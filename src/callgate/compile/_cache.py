"""Model responses cached on disk, so that compiling twice costs nothing and is reproducible.

An entry is one file, named by its key (a SHA-256 of the specification, the signature, the model,
the service's base URL, the exact prompt, the prompt version and the attempt number), holding
``{"v": 1, "key": KEY, "text": TEXT}`` in ASCII. Entries are written atomically (a temporary file
in the same directory, then ``os.replace``, which replaces a symlink rather than following it)
with mode 0600 in a directory of mode 0700, and read without following a symlink: anything at an
entry's name that is not a regular file (a FIFO would block a plain ``open``) is a miss. The
cache never fails a compile: an entry that cannot be read, is too large, is not JSON or names
another key is a miss, and a directory that cannot be written costs only the caching (a warning
on the ``callgate.compile`` logger).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("callgate.compile")

_FORMAT_VERSION = 1
_KEY = re.compile(r"^[0-9a-f]{64}$")
#: An entry larger than this is not read (a model answer is far smaller; see the providers).
_MAX_ENTRY_BYTES = 8 * 1024 * 1024
#: An entry is opened without following a symlink and without blocking (on a FIFO, say).
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/callgate/compile``, else ``~/.cache/callgate/compile``.

    ``environ`` defaults to ``os.environ``, read at call time; an empty or relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG base directory specification asks.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "callgate" / "compile"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".cache" / "callgate" / "compile"


class ResponseCache:
    """Model responses on disk, one file per key under ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._warned = False

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r})"

    @staticmethod
    def key(
        *,
        spec_sha256: str,
        signature_sha256: str,
        model: str,
        service: str,
        prompt_sha256: str,
        prompt_version: str,
        attempt: int,
    ) -> str:
        """The SHA-256 hex of the fields as canonical JSON (sorted keys, no spaces).

        ``service`` is where the model is served (the provider's base URL, without userinfo or
        query: the key file never holds a secret); ``prompt_sha256`` is the hash of the exact
        prompt sent (system and user message), so that anything the prompt carries changes it.
        """
        fields = {
            "attempt": attempt,
            "model": model,
            "prompt_sha256": prompt_sha256,
            "prompt_version": prompt_version,
            "service": service,
            "signature_sha256": signature_sha256,
            "spec_sha256": spec_sha256,
            "v": _FORMAT_VERSION,
        }
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"not a cache key (64 lower-case hex digits): {key!r}")
        return self.directory / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The cached text for ``key``, or ``None`` when there is none or it cannot be read."""
        path = self._path(key)
        try:
            data = _read_entry(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.debug("compile cache: cannot read %s (%s); treated as a miss", path, exc)
            return None
        if data is None:
            log.debug("compile cache: %s is not a regular file or is too large; treated as a "
                      "miss", path)
            return None
        try:
            entry = json.loads(data)
        except (ValueError, RecursionError):
            log.debug("compile cache: %s is not JSON; treated as a miss", path)
            return None
        if (
            not isinstance(entry, dict)
            or entry.get("v") != _FORMAT_VERSION
            or entry.get("key") != key
            or not isinstance(entry.get("text"), str)
        ):
            log.debug("compile cache: %s is not an entry for its key; treated as a miss", path)
            return None
        text: str = entry["text"]
        return text

    def put(self, key: str, text: str) -> None:
        """Store ``text`` under ``key``; a failure to write is logged, never raised."""
        path = self._path(key)
        # ASCII: a model's text may hold a lone surrogate, which UTF-8 cannot encode
        payload = json.dumps({"v": _FORMAT_VERSION, "key": key, "text": text}).encode("ascii")
        if len(payload) > _MAX_ENTRY_BYTES:
            log.debug("compile cache: the response for %s is too large to cache", key)
            return
        temp: str | None = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
            temp = None
        except OSError as exc:
            self._warn(f"cannot write {path} ({exc}); the response is not cached")
        finally:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)

    def _warn(self, message: str) -> None:
        # once per cache at warning level: a read-only directory would otherwise warn per entry
        if self._warned:
            log.debug("compile cache: %s", message)
        else:
            self._warned = True
            log.warning("compile cache: %s", message)


def _read_entry(path: Path) -> bytes | None:
    """The bytes of the regular file at ``path`` (never a symlink's target, never blocking), or
    ``None`` when it is something else or larger than :data:`_MAX_ENTRY_BYTES`."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_size > _MAX_ENTRY_BYTES:
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= _MAX_ENTRY_BYTES:
            chunk = os.read(fd, _MAX_ENTRY_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return None if size > _MAX_ENTRY_BYTES else b"".join(chunks)
    finally:
        os.close(fd)

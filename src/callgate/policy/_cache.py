"""The policy cache: what validating a policy text gave, kept per user and authenticated.

Validating a policy composes its YAML in pure Python and runs the schema's validators; a command
that decides one call would pay for that on every start. ``PolicyCache`` keeps the result (the
validated ``Policy`` and the place of every node) so that the same text loads again from it.

**Where.** One directory per user: ``$XDG_CACHE_HOME/callgate``, else ``~/.cache/callgate``,
created mode 0700. It is read only while it is a real directory (not a symlink) owned by the
user and closed to group and others; a write first closes it (``chmod 0700``) if it is the
user's own. Every file in it is opened relative to the directory's descriptor, never through a
symlink.

**Key.** An entry is named by a SHA-256 over the text's bytes together with everything else
that decides what validating them gives: callgate's version, a digest of the modules that parse
and validate a policy (loader, YAML stage, schema, pattern checks; a source checkout changes
them without changing the version), and the versions of Python, pydantic and PyYAML. A changed
file, or a changed callgate, finds no entry and is validated again.

**Trust.** An entry must be as trustworthy as the file it stands for:

* it is authenticated: an HMAC-SHA256 over its key and contents, with a 32-byte secret made once
  from ``os.urandom`` and kept beside the entries (``key``, mode 0600). An entry whose MAC does
  not verify (corrupted, cut short, copied from another user or machine, written by anyone
  without the secret) is ignored and written again;
* only regular files owned by the user, not writable by group or others (the key: not readable
  either), are read; an entry that is not is ignored and replaced, a key that is not is
  replaced (every entry made with the old one is then ignored);
* the contents are unpickled only after the MAC verifies, and then by an unpickler that admits
  no class but the policy schema's own models: no function, no other class, so a pickle naming
  ``os.system`` fails to load rather than running it. What it gives must be a ``Policy`` with its
  places, or the entry is ignored;
* an entry is written to a fresh temporary file in the directory and renamed into place, so a
  reader sees a whole entry or none.

Only texts that validate are stored, and only files of the user's own are cached: the user can
write the cache, so an entry must not stand for a file the user cannot change (a policy an
administrator owns is validated on every load). The same holds for an agent acting as the user:
it must no more write the cache than the policy file. The ``coding-agent`` preset refuses writes
under ``~/.cache/callgate`` and ``~/.local/state/callgate`` through the file tools and the
shell, and the secret (``key``) is a sensitive path, masked in sandboxes and fingerprinted when
read. Whatever goes wrong with the cache (a directory that cannot be created or written, a full
disk, a foreign entry) costs the speed-up, never the answer: the text is validated as if there
were no cache.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import io
import os
import pickle
import re
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from callgate._model import StrictModel
from callgate.policy import _schema, _settings
from callgate.policy._schema import Policy

if TYPE_CHECKING:
    from callgate.policy._compose import NodePath, Place

    Compiled = tuple[Policy, dict[NodePath, Place]]

__all__ = ["PolicyCache"]

#: The first bytes of every entry (and part of every key): the format of this module.
MAGIC = b"callgate policy cache 1\n"
#: Bytes of the per-user secret the entries are authenticated with.
SECRET_BYTES = 32
#: Larger entries are not read (a policy is at most 1 MiB of text).
MAX_ENTRY_BYTES = 16 << 20
#: Entries kept; past this the oldest are removed when one is written.
MAX_ENTRIES = 256
#: Seconds after which a temporary file left by a writer that died is removed.
STALE_TEMP_S = 3600

_KEY_FILE = "key"
_SUFFIX = ".policy"
_TEMP = ".tmp-"
_MAC_BYTES = hashlib.sha256().digest_size
_POSIX = all(hasattr(os, name) for name in ("O_NOFOLLOW", "O_DIRECTORY", "geteuid", "fchmod"))
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_CLOEXEC", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
    getattr(os, "O_CLOEXEC", 0)
#: The modules whose code decides what validating a text gives (their digest is in every key).
_CODE = ("policy/_loader.py", "policy/_compose.py", "policy/_precomposed.py", "policy/_schema.py",
         "policy/_settings.py",
         "policy/_cache.py", "_model.py", "matchers/_regex.py")


class _Unusable(Exception):  # noqa: N818 - internal signal: an entry is there but not used
    """A cache file is present but is not one this user's cache may read."""


class PolicyCache:
    """A per-user store of validated policies, authenticated and never trusted blindly.

    ``directory`` is where entries live (see ``default``); nothing is created until an entry is
    stored. ``hits``, ``misses``, ``stored`` and ``ignored`` count what happened (``ignored``:
    entries present but not used: foreign, unauthenticated or unreadable).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        self.hits = 0
        self.misses = 0
        self.stored = 0
        self.ignored = 0

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> PolicyCache | None:
        """The user's cache: ``$XDG_CACHE_HOME/callgate``, else ``$HOME/.cache/callgate``.

        ``environ`` defaults to the process environment at call time. None when neither
        variable holds an absolute path, or on a system without the POSIX calls the cache
        needs (then policies are simply validated on every load).
        """
        env = os.environ if environ is None else environ
        base = env.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):
            home = env.get("HOME", "")
            if not os.path.isabs(home):
                return None
            base = os.path.join(home, ".cache")
        return cls(os.path.join(base, "callgate")) if _POSIX else None

    @staticmethod
    def may_stand_for(owner: int) -> bool:
        """Whether an entry may stand for a file owned by ``owner`` (a uid): only for a file of
        the user's own. The user can write the cache; an entry standing for a file the user
        cannot change (an administrator's policy) would be less trustworthy than the file."""
        return _POSIX and owner == os.geteuid()

    def get(self, kind: str, content: bytes) -> Compiled | None:
        """What validating ``content`` (a ``file``'s bytes or a ``text``'s) gave, if stored."""
        found = None
        key = _entry_key(kind, content)
        fd = _open_directory(self.directory, create=False) if key is not None else None
        if fd is not None:
            assert key is not None
            try:
                found = self._read(fd, key)
            finally:
                os.close(fd)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, kind: str, content: bytes, compiled: Compiled) -> None:
        """Store what validating ``content`` gave; any failure leaves the cache as it was."""
        key = _entry_key(kind, content)
        if key is None:
            return
        try:
            payload = pickle.dumps(compiled, protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            return
        fd = _open_directory(self.directory, create=True)
        if fd is None:
            return
        try:
            secret = _read_secret(fd) or _new_secret(fd)
            _write_new(fd, key.hex() + _SUFFIX, MAGIC + _mac(secret, key, payload) + payload)
            self.stored += 1
            _prune(fd)
        except OSError:
            pass  # no entry: the next load validates again
        finally:
            os.close(fd)

    def _read(self, fd: int, key: bytes) -> Compiled | None:
        try:
            blob = _read_private(fd, key.hex() + _SUFFIX, MAX_ENTRY_BYTES, secret=False)
            if blob is None:
                return None
            secret = _read_secret(fd)
            compiled = None if secret is None else _unseal(blob, key, secret)
            if compiled is None:
                raise _Unusable("not authenticated or not a policy")
        except _Unusable:
            self.ignored += 1
            return None
        return compiled


# --------------------------------------------------------------------------- keys


def _entry_key(kind: str, content: bytes) -> bytes | None:
    """The key of an entry: the content's bytes with what else decides its validation."""
    environment = _environment()
    if environment is None:
        return None
    digest = hashlib.sha256(environment)
    digest.update(kind.encode("ascii") + b"\0")
    digest.update(content)
    return digest.digest()


@functools.cache
def _environment() -> bytes | None:
    """A digest of everything besides the text that decides what validating it gives; None
    when the code cannot be read (then nothing is cached)."""
    import pydantic
    import pydantic_core

    parts = [_version("callgate"), sys.version, sys.implementation.cache_tag or "",
             pydantic.VERSION, pydantic_core.__version__, _version("PyYAML")]
    digest = hashlib.sha256(MAGIC)
    for part in parts:
        data = part.encode("utf-8", "replace")
        digest.update(len(data).to_bytes(4, "big") + data)
    root = Path(__file__).resolve().parents[1]
    for name in _CODE:
        try:
            data = (root / name).read_bytes()
        except OSError:
            return None
        digest.update(len(data).to_bytes(4, "big") + data)
    return digest.digest()


def _version(distribution: str) -> str:
    """An installed distribution's version, read from its metadata ("" when not installed)."""
    from importlib import metadata

    try:
        text = metadata.distribution(distribution).read_text("METADATA") or ""
    except (metadata.PackageNotFoundError, OSError, ValueError):
        return ""
    found = re.search(r"(?m)^Version:[ \t]*(\S+)", text)  # the header, without email parsing
    return found[1] if found else ""


def _mac(secret: bytes, key: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, MAGIC + key + payload, hashlib.sha256).digest()


# --------------------------------------------------------------------------- reading


class _PolicyUnpickler(pickle.Unpickler):
    """Admits the policy schema's models and nothing else: no function is ever named."""

    def find_class(self, module: str, name: str) -> Any:
        found = _MODELS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not a policy class")
        return found


#: (module, name) -> class, for each model the schema defines.
_MODELS: dict[tuple[str, str], type] = {
    (value.__module__, value.__qualname__): value
    for module in (_schema, _settings) for value in vars(module).values()
    if isinstance(value, type) and issubclass(value, StrictModel)
    and value.__module__ == module.__name__
}


def _unseal(blob: bytes, key: bytes, secret: bytes) -> Compiled | None:
    """The entry's contents once its MAC verifies and they prove to be a policy; else None."""
    head = len(MAGIC) + _MAC_BYTES
    if len(blob) < head or not blob.startswith(MAGIC):
        return None
    payload = blob[head:]
    if not hmac.compare_digest(blob[len(MAGIC):head], _mac(secret, key, payload)):
        return None
    try:
        value = _PolicyUnpickler(io.BytesIO(payload)).load()
    except Exception:  # an authenticated entry that still does not load: ignored, rebuilt
        return None
    return value if _is_compiled(value) else None


def _is_compiled(value: Any) -> bool:
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Policy)
            and isinstance(value[1], dict)):
        return False
    return all(isinstance(path, tuple) and isinstance(place, tuple) and len(place) == 5
               for path, place in value[1].items())


def _open_directory(directory: str, *, create: bool) -> int | None:
    """A descriptor of the cache directory if it is the user's own and private, else None."""
    if not _POSIX:
        return None
    try:
        if create:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid == os.geteuid() and info.st_mode & 0o077 and create:
            os.fchmod(fd, 0o700)
            info = os.fstat(fd)
    except OSError:
        info = None
    if info is None or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        return None
    return fd


def _read_private(fd: int, name: str, limit: int, *, secret: bool) -> bytes | None:
    """The bytes of ``name`` in the directory: None if absent, ``_Unusable`` if not a regular
    file of the user's own, closed to writes by others (a secret: to reads too), within
    ``limit``."""
    try:
        handle = os.open(name, _READ, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink (ELOOP), a directory, no permission
        raise _Unusable(name) from exc
    try:
        info = os.fstat(handle)
        closed = 0o077 if secret else 0o022
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & closed or info.st_size > limit):
            raise _Unusable(name)
        with os.fdopen(handle, "rb", closefd=False) as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise _Unusable(name) from exc
    finally:
        os.close(handle)
    if len(data) > limit:
        raise _Unusable(name)
    return data


def _read_secret(fd: int) -> bytes | None:
    """The user's secret, or None when there is none usable (absent, foreign, wrong size)."""
    try:
        data = _read_private(fd, _KEY_FILE, SECRET_BYTES, secret=True)
    except _Unusable:
        return None
    return data if data is not None and len(data) == SECRET_BYTES else None


# --------------------------------------------------------------------------- writing


def _new_secret(fd: int) -> bytes:
    """Make the secret, or take the one another process made first; a key file that is not
    usable (foreign, too open, wrong size) is replaced. ``OSError`` when it cannot be."""
    secret = os.urandom(SECRET_BYTES)
    temp = _write_temp(fd, secret)
    try:
        try:
            os.link(temp, _KEY_FILE, src_dir_fd=fd, dst_dir_fd=fd)
        except FileExistsError:
            found = _read_secret(fd)
            if found is not None:
                return found  # another process made it first
            os.replace(temp, _KEY_FILE, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        _unlink(fd, temp)
    return secret


def _write_new(fd: int, name: str, data: bytes) -> None:
    """Put ``data`` at ``name`` whole, replacing what was there (a rename, never a rewrite)."""
    temp = _write_temp(fd, data)
    try:
        os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        _unlink(fd, temp)
        raise


def _write_temp(fd: int, data: bytes) -> str:
    """A new temporary file (mode 0600) in the directory holding ``data``; its name."""
    name = f"{_TEMP}{os.urandom(8).hex()}"
    handle = os.open(name, _CREATE, 0o600, dir_fd=fd)
    try:
        with os.fdopen(handle, "wb", closefd=False) as stream:
            stream.write(data)
    except OSError:
        _unlink(fd, name)
        raise
    finally:
        os.close(handle)
    return name


def _prune(fd: int) -> None:
    """Remove the oldest entries past ``MAX_ENTRIES``, and temporary files writers left."""
    entries: list[tuple[float, str]] = []
    now = time.time()
    for name in os.listdir(fd):
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if name.endswith(_SUFFIX):
            entries.append((info.st_mtime, name))
        elif name.startswith(_TEMP) and now - info.st_mtime > STALE_TEMP_S:
            _unlink(fd, name)
    entries.sort()
    for _, name in entries[:max(0, len(entries) - MAX_ENTRIES)]:
        _unlink(fd, name)


def _unlink(fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=fd)

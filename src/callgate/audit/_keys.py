"""The checkpoint signing key on disk: created on first use, readable by its owner only.

Files are PEM (PKCS#8 for the private key, SubjectPublicKeyInfo for the public one), which
``openssl`` and most libraries read. The public key is written to its own file (by default the
private key's path plus ``.pub``) so it can be copied to wherever logs are verified. Readers
also accept a raw 32-byte key or its 64 hex digits.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Final

from callgate._errors import AuditError
from callgate.audit._checkpoint import generate_keypair, public_key_of

_KEY_BYTES: Final = 32


def display(path: str | os.PathLike[str]) -> str:
    """A path as printable text, even when its bytes are not UTF-8."""
    return os.fsdecode(path).encode("utf-8", "backslashreplace").decode("utf-8")


def public_path_for(key_path: str | os.PathLike[str]) -> Path:
    """Where the public key of ``key_path`` is written: the same path plus ``.pub``."""
    return Path(os.fspath(key_path) + ".pub")


def _decode(data: bytes, private: bool, where: str) -> bytes:
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        return _from_pem(text, private, where)
    if len(data) == _KEY_BYTES:
        return data
    try:
        raw = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raw = b""
    if len(raw) != _KEY_BYTES:
        raise AuditError(f"{where} is not an Ed25519 key (PEM, 32 raw bytes or 64 hex digits)")
    return raw


def _from_pem(text: bytes, private: bool, where: str) -> bytes:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    try:
        if private:
            key = ser.load_pem_private_key(text, password=None)
            if isinstance(key, Ed25519PrivateKey):
                return key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw,
                                         ser.NoEncryption())
        else:
            pub = ser.load_pem_public_key(text)
            if isinstance(pub, Ed25519PublicKey):
                return pub.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    except (ValueError, TypeError) as exc:
        raise AuditError(f"{where} is not a readable PEM key: {exc}") from exc
    raise AuditError(f"{where} holds a key that is not Ed25519")


def read_public_key(path: str | os.PathLike[str]) -> bytes:
    """The raw public key in ``path`` (PEM, raw or hex)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read public key {display(path)}: {exc}") from exc
    return _decode(data, False, display(path))


def read_private_key(path: str | os.PathLike[str]) -> bytes:
    """The raw private key in ``path``; refused when others than its owner may read it."""
    try:
        with Path(path).open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            data = handle.read()
    except OSError as exc:
        raise AuditError(f"cannot read signing key {display(path)}: {exc}") from exc
    if stat.S_IMODE(mode) & 0o077:
        raise AuditError(
            f"signing key {display(path)} is accessible to other users"
            f" (mode {stat.S_IMODE(mode):o}); make it readable by its owner only (chmod 600)"
        )
    return _decode(data, True, display(path))


def _pem(private_raw: bytes) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(private_raw)
    private = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    public = key.public_key().public_bytes(ser.Encoding.PEM,
                                           ser.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def write_atomically(path: Path, data: bytes, mode: int, *, replace: bool = True) -> bool:
    """Write ``data`` to ``path`` through a synced temporary file in the same directory.

    With ``replace`` the file is renamed over ``path``; without it the file is linked to
    ``path`` only if nothing is there yet (returns False when something was).
    """
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(temp, path)
            return True
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def create_key(key_path: str | os.PathLike[str],
               public_path: str | os.PathLike[str] | None = None) -> tuple[bytes, bool]:
    """The private key at ``key_path``, created (mode 0600) when absent, with its public file.

    Returns ``(private_raw, created)``. Creation is atomic and never replaces an existing key,
    so processes starting at once end up sharing one key.
    """
    target = Path(key_path)
    public_target = Path(public_path) if public_path is not None else public_path_for(target)
    created = False
    try:
        if not target.exists():
            private_raw, _ = generate_keypair()
            private_pem, _ = _pem(private_raw)
            created = write_atomically(target, private_pem, 0o600, replace=False)
        private_raw = read_private_key(target)
        if created or not public_target.exists():
            write_atomically(public_target, _pem(private_raw)[1], 0o644)
    except OSError as exc:
        raise AuditError(f"cannot create signing key {display(target)}: {exc}") from exc
    return private_raw, created


def public_pem(private_raw: bytes) -> str:
    """The PEM text of the public key of ``private_raw`` (what ``keygen`` prints)."""
    public_key_of(private_raw)  # validates the key
    return _pem(private_raw)[1].decode("ascii")

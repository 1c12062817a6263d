"""API keys of the sidecar: per-principal, stored as SHA-256 digests in one JSON file.

A key is 32 random bytes in URL-safe base64 (43 characters). The file keeps only each key's
digest, its name, the principal it binds (``null``: the principal of the policy the sidecar
serves), the policy it binds (the SHA-256 of the policy file's bytes; ``null``: any), and its
role (``agent`` or ``approver``). An entry that is malformed (a digest that is not 64 hex
digits, an unknown role) admits nobody. A presented key is hashed and compared with
every stored digest in constant time; the file is read again when it changes, so a revoked key
stops working on a running sidecar.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from callgate._errors import CallgateError

__all__ = ["ROLES", "Identity", "KeyRing", "add_key", "revoke_key"]

Role = Literal["agent", "approver"]
#: The roles a key can hold: ``agent`` decides and reports calls, ``approver`` answers approvals.
ROLES: tuple[Role, ...] = ("agent", "approver")
_VERSION = 1


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request is, as its key says: the key's name, principal and role."""

    name: str
    principal: str | None
    role: Role
    #: the SHA-256 of the policy the key is for (None: any policy the sidecar serves)
    policy_sha256: str | None = None


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"version": _VERSION, "keys": []}
    except (OSError, UnicodeDecodeError) as exc:
        raise CallgateError(f"the keys file {path} cannot be read: {exc}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CallgateError(f"the keys file {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise CallgateError(f"the keys file {path} has no 'keys' list")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2, sort_keys=True)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def add_key(path: str | os.PathLike[str], name: str, *, principal: str | None = None,
            role: Role = "agent", policy_sha256: str | None = None) -> str:
    """Create a key named ``name`` in the keys file and return it (the only time it is seen).

    Raises ``CallgateError`` for a name already in use by a live key or an unknown role.
    """
    if not name or not name.isprintable() or len(name) > 128:
        raise CallgateError("a key name is 1 to 128 printable characters")
    if role not in ROLES:
        raise CallgateError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    file = Path(path)
    data = _read(file)
    if any(k.get("name") == name and not k.get("revoked") for k in data["keys"]):
        raise CallgateError(f"a live key named {name!r} exists; revoke it first")
    key = secrets.token_urlsafe(32)
    if policy_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", policy_sha256):
        raise CallgateError("a policy digest is 64 lower-case hex digits (SHA-256)")
    data["keys"].append({"name": name, "sha256": _digest(key), "principal": principal,
                         "role": role, "policy_sha256": policy_sha256,
                         "created": int(time.time()), "revoked": False})
    data["version"] = _VERSION
    _write(file, data)
    return key


def revoke_key(path: str | os.PathLike[str], name: str) -> int:
    """Revoke every live key named ``name``; returns how many were revoked."""
    file = Path(path)
    data = _read(file)
    count = 0
    for entry in data["keys"]:
        if entry.get("name") == name and not entry.get("revoked"):
            entry["revoked"] = True
            entry["revoked_at"] = int(time.time())
            count += 1
    if count:
        _write(file, data)
    return count


class KeyRing:
    """The live keys of a keys file, read again whenever the file changes. Thread-safe."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._entries: list[tuple[bytes, Identity]] = []
        self._refresh()

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = (0, 0, 0)
        if stamp == self._stamp:
            return
        data = _read(self.path)
        entries = []
        for entry in data["keys"]:
            if not isinstance(entry, dict) or entry.get("revoked"):
                continue
            digest, role = entry.get("sha256"), entry.get("role", "agent")
            principal, policy = entry.get("principal"), entry.get("policy_sha256")
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest) or \
                    role not in ROLES or (policy is not None and not isinstance(policy, str)):
                continue  # a malformed entry admits nobody
            entries.append((bytes.fromhex(digest), Identity(
                str(entry.get("name", "")), principal if isinstance(principal, str) else None,
                role, policy)))
        self._entries, self._stamp = entries, stamp

    def identify(self, key: str | None) -> Identity | None:
        """The identity of a presented key, or None (no key, unknown or revoked)."""
        with self._lock:
            try:
                self._refresh()
            except CallgateError:
                return None  # an unreadable keys file admits nobody
            entries = self._entries
        if not key or len(key) > 512:
            return None
        presented = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        found: Identity | None = None
        for digest, identity in entries:  # every entry compared: no early exit on a match
            if hmac.compare_digest(digest, presented):
                found = identity
        return found

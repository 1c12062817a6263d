"""Signed decision receipts: Ed25519 over a canonical JSON body.

The canonical JSON of a value is ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`` encoded as UTF-8. A receipt is ``{"body": BODY, "signature": SIG,
"key_id": KID}`` where SIG is the URL-safe base64 (no padding) of the Ed25519 signature of the
canonical JSON of BODY, and KID the first 16 hex digits of the SHA-256 of the raw public key.
BODY binds::

    {"v": 1, "call": {"tool", "tool_class", "action", "parameters_sha256"}, "call_id",
     "verdict", "run_id", "principal", "policy_sha256", "issued_at"}

``parameters_sha256`` is the SHA-256 (hex) of the canonical JSON of the parameters as the
kernel checked them (paths canonical and absolute), ``issued_at`` whole seconds since the epoch.
A tool elsewhere verifies a receipt with the sidecar's public key (``GET /v1/keys``) and
``verify_receipt``, then compares the call it is about to run with ``body.call``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = ["RECEIPT_VERSION", "Signer", "call_digest", "canonical_json", "parameters_sha256",
           "verify_receipt"]

#: The version of the receipt body (``body.v``).
RECEIPT_VERSION = 1


def canonical_json(value: Any) -> bytes:
    """The canonical JSON encoding receipts are signed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8", "surrogatepass")


def parameters_sha256(parameters: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of a call's parameters in canonical JSON."""
    return hashlib.sha256(canonical_json(dict(parameters))).hexdigest()


def call_digest(tool: str, tool_class: str, action: str, parameters: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) binding a whole canonical call: what an approval is granted for."""
    return hashlib.sha256(canonical_json({
        "tool": tool, "tool_class": tool_class, "action": action,
        "parameters_sha256": parameters_sha256(parameters)})).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key_id(public: bytes) -> str:
    return hashlib.sha256(public).hexdigest()[:16]


class Signer:
    """The sidecar's receipt key: created once (mode 0600) in its state directory."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 private: str | None = None) -> None:
        if private is not None:  # a key kept elsewhere (the shared store), as ``new_private``
            self._key = Ed25519PrivateKey.from_private_bytes(_unb64(private))
        elif path is None:
            raise ValueError("a Signer needs a key file or a private key")
        elif (file := Path(path)).exists():
            self._key = Ed25519PrivateKey.from_private_bytes(_unb64(file.read_text().strip()))
        else:
            self._key = Ed25519PrivateKey.generate()
            file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(_b64(self._key.private_bytes_raw()) + "\n")
        self.public_key = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = _key_id(self.public_key)

    @staticmethod
    def new_private() -> str:
        """A fresh private key as ``private=`` reads it (URL-safe base64)."""
        return _b64(Ed25519PrivateKey.generate().private_bytes_raw())

    def public_json(self) -> dict[str, str]:
        """The public key as ``GET /v1/keys`` serves it."""
        return {"alg": "Ed25519", "key_id": self.key_id, "public_key": _b64(self.public_key)}

    def sign(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A receipt for ``body``."""
        signature = self._key.sign(canonical_json(dict(body)))
        return {"body": dict(body), "signature": _b64(signature), "key_id": self.key_id}


def verify_receipt(receipt: Mapping[str, Any], public_key: str | bytes, *,
                   call: Mapping[str, Any] | None = None, verdict: str | None = "allow",
                   max_age_s: float | None = 300.0, now: float | None = None) -> bool:
    """Whether ``receipt`` was signed by ``public_key`` (raw bytes or its URL-safe base64, as
    ``GET /v1/keys`` gives it), says ``verdict`` (``allow`` unless told otherwise: a signed deny
    is no permission; ``None`` accepts any verdict), was issued at most ``max_age_s`` seconds
    ago (``None``: any age) and, with ``call``, binds that call (``tool``, ``tool_class``,
    ``action`` and ``parameters`` as the kernel checked them). Never raises.

    A receipt can be shown twice: a tool that must run a call once remembers the ``call_id``s
    it honoured (within ``max_age_s``) and refuses a second one.
    """
    try:
        raw = public_key if isinstance(public_key, bytes) else _unb64(public_key)
        body = receipt["body"]
        Ed25519PublicKey.from_public_bytes(raw).verify(_unb64(str(receipt["signature"])),
                                                       canonical_json(body))
        if verdict is not None and body["verdict"] != verdict:
            return False
        if max_age_s is not None:
            age = (time.time() if now is None else now) - float(body["issued_at"])
            if not -60.0 <= age <= max_age_s:  # a minute of clock skew either way
                return False
        if call is not None:
            bound = body["call"]
            return bool(bound["tool"] == call["tool"]
                        and bound["tool_class"] == call["tool_class"]
                        and bound["action"] == call["action"]
                        and bound["parameters_sha256"] == parameters_sha256(
                            call.get("parameters", {})))
        return True
    except (InvalidSignature, KeyError, TypeError, ValueError):
        return False

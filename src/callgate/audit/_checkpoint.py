"""Signed checkpoints: an Ed25519 signature over the chain's head and the set of its runs.

A hash chain alone shows that stored rows were edited, but not that its tail was cut off or that
the whole chain was recomputed by someone who could write the file. A checkpoint signed with a
key the writer of the file does not hold closes both: a rewritten chain no longer matches the
signed head hash, and a truncated chain no longer reaches the signed sequence.

Keys are raw 32-byte Ed25519 keys. ``cryptography`` is imported only when a checkpoint is made
or checked, so the audit store works without the ``signing`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from callgate._errors import AuditError
from callgate.audit._chain import canonical_json, sha256_hex

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

#: Domain separation: a checkpoint signature can never be mistaken for another signature.
CHECKPOINT_FORMAT: Final = "callgate-audit-checkpoint/2"
_KEY_BYTES: Final = 32


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed statement that the chain had ``seq`` events ending in ``head_hash``.

    ``runs`` is how many runs had started by then and ``runs_digest`` the
    :func:`~callgate.audit._chain.runs_digest` of them (id, start, events so far, end), so a
    whole run cannot vanish unseen. ``key_id`` names the public key (first 16 hex digits of
    its SHA-256); ``signature`` is hex.
    Keep the latest checkpoint outside the audit file as well: that copy is what detects a
    deleted tail together with deleted checkpoint rows.
    """

    seq: int
    head_hash: str
    runs: int
    runs_digest: str
    created_at: str
    key_id: str
    signature: str

    def as_json(self) -> dict[str, object]:
        """The checkpoint as a JSON object (the body of an anchor file)."""
        return {
            "seq": self.seq,
            "head_hash": self.head_hash,
            "runs": self.runs,
            "runs_digest": self.runs_digest,
            "created_at": self.created_at,
            "key_id": self.key_id,
            "signature": self.signature,
        }


def _ed25519() -> tuple[type[Ed25519PrivateKey], type[Ed25519PublicKey]]:
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import (
            Ed25519PrivateKey,
            Ed25519PublicKey,
        )
    except ImportError as exc:  # pragma: no cover - the test environment has the extra
        raise AuditError(
            "signed checkpoints need the 'cryptography' package: install callgate[signing]"
        ) from exc
    return Ed25519PrivateKey, Ed25519PublicKey


def _private(private_key: bytes) -> Ed25519PrivateKey:
    private_cls, _ = _ed25519()
    if len(private_key) != _KEY_BYTES:
        raise AuditError("an Ed25519 private key is 32 raw bytes")
    return private_cls.from_private_bytes(private_key)


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
    )

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def generate_keypair() -> tuple[bytes, bytes]:
    """A fresh Ed25519 key pair as ``(private_raw, public_raw)``, 32 bytes each."""
    private_cls, _ = _ed25519()
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    key = private_cls.generate()
    private_raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return private_raw, _raw_public(key.public_key())


def public_key_of(private_key: bytes) -> bytes:
    """The raw public key belonging to a raw private key."""
    return _raw_public(_private(private_key).public_key())


def key_id(public_key: bytes) -> str:
    """A short, stable name of a public key: 16 hex digits of its SHA-256."""
    return sha256_hex(public_key.hex())[:16]


def checkpoint_message(
    seq: int, head_hash: str, runs: int, runs_digest: str, created_at: str
) -> bytes:
    """The exact bytes a checkpoint signs: canonical JSON of its fields and the format."""
    body = {
        "format": CHECKPOINT_FORMAT,
        "seq": seq,
        "hash": head_hash,
        "runs": runs,
        "runs_digest": runs_digest,
        "created_at": created_at,
    }
    return canonical_json(body).encode("utf-8")


def sign_checkpoint(
    private_key: bytes,
    seq: int,
    head_hash: str,
    created_at: str,
    *,
    runs: int,
    runs_digest: str,
) -> Checkpoint:
    """Sign ``(seq, head_hash, runs, runs_digest, created_at)`` with a raw Ed25519 key."""
    key = _private(private_key)
    signature = key.sign(checkpoint_message(seq, head_hash, runs, runs_digest, created_at))
    return Checkpoint(
        seq=seq,
        head_hash=head_hash,
        runs=runs,
        runs_digest=runs_digest,
        created_at=created_at,
        key_id=key_id(_raw_public(key.public_key())),
        signature=signature.hex(),
    )


def signature_problem(checkpoint: Checkpoint, public_key: bytes) -> str | None:
    """Why ``checkpoint`` is not validly signed by ``public_key``, or ``None`` when it is."""
    _, public_cls = _ed25519()
    from cryptography.exceptions import InvalidSignature

    if len(public_key) != _KEY_BYTES:
        raise AuditError("an Ed25519 public key is 32 raw bytes")
    if checkpoint.key_id != key_id(public_key):
        return f"checkpoint was signed by key {checkpoint.key_id!r}, not the given key"
    try:
        signature = bytes.fromhex(checkpoint.signature)
    except (TypeError, ValueError):
        return "checkpoint signature is not hex"
    message = checkpoint_message(
        checkpoint.seq,
        checkpoint.head_hash,
        checkpoint.runs,
        checkpoint.runs_digest,
        checkpoint.created_at,
    )
    try:
        public_cls.from_public_bytes(public_key).verify(signature, message)
    except InvalidSignature:
        return "checkpoint signature does not verify"
    return None

"""The tamper-evident audit log: a SHA-256 hash chain in SQLite or PostgreSQL, with signed
checkpoints.

Checkpoints are on by default: a writer signs one at every run's end and every N events and
keeps the latest, the anchor, in a file outside the database.

``open_store`` opens either store (a ``postgresql://`` URL or a SQLite file); ``AuditLog`` is
the interface both offer and what the kernel writes to; ``AuditStore`` is the SQLite store;
``verify_file`` checks a SQLite log without opening it for writing; the chain and checkpoint
functions are pure and shared by every store.

Names are loaded on first use: a kernel with no audit log never imports the stores.
"""

from __future__ import annotations

from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.audit._chain import GENESIS_HASH, canonical_json, sha256_hex
    from callgate.audit._checkpoint import Checkpoint, generate_keypair, public_key_of
    from callgate.audit._files import verify_file
    from callgate.audit._keys import read_public_key
    from callgate.audit._open import AuditLog, open_store
    from callgate.audit._store import AuditRecord, AuditStore, Durability
    from callgate.audit._target import is_store_url
    from callgate.audit._verify import VerifyReport

_HOME = {
    "GENESIS_HASH": "_chain", "canonical_json": "_chain", "sha256_hex": "_chain",
    "Checkpoint": "_checkpoint", "generate_keypair": "_checkpoint",
    "public_key_of": "_checkpoint", "verify_file": "_files", "read_public_key": "_keys",
    "AuditLog": "_open", "is_store_url": "_target", "open_store": "_open",
    "AuditRecord": "_store", "AuditStore": "_store", "Durability": "_store",
    "VerifyReport": "_verify",
}

__all__ = [
    "GENESIS_HASH",
    "AuditLog",
    "AuditRecord",
    "AuditStore",
    "Checkpoint",
    "Durability",
    "VerifyReport",
    "canonical_json",
    "generate_keypair",
    "is_store_url",
    "open_store",
    "public_key_of",
    "read_public_key",
    "sha256_hex",
    "verify_file",
]


__getattr__ = _lazy(__name__, _HOME, globals())

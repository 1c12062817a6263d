"""The tamper-evident audit log: a SHA-256 hash chain in SQLite or PostgreSQL, with signed
checkpoints.

Checkpoints are on by default: a writer signs one at every run's end and every N events and
keeps the latest, the anchor, in a file outside the database.

``open_store`` opens either store (a ``postgresql://`` URL or a SQLite file); ``AuditLog`` is
the interface both offer and what the kernel writes to; ``AuditStore`` is the SQLite store;
``verify_file`` checks a SQLite log without opening it for writing; the chain and checkpoint
functions are pure and shared by every store.
"""

from callgate.audit._chain import GENESIS_HASH, canonical_json, sha256_hex
from callgate.audit._checkpoint import Checkpoint, generate_keypair, public_key_of
from callgate.audit._files import verify_file
from callgate.audit._keys import read_public_key
from callgate.audit._open import AuditLog, is_store_url, open_store
from callgate.audit._store import AuditRecord, AuditStore, Durability
from callgate.audit._verify import VerifyReport

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

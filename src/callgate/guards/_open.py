"""One opener for the guards' fingerprint store, as ``open_store`` is for the audit log."""

from __future__ import annotations

from callgate._errors import CallgateError
from callgate.audit._target import is_store_url
from callgate.guards._store import FingerprintStore

__all__ = ["open_fingerprints"]


def open_fingerprints(target: str | None, *, window: int = 12) -> FingerprintStore:
    """The fingerprint store ``target`` names: in memory (None), a PostgreSQL table shared by
    every process given the same ``postgresql://`` URL, or else a SQLite file at that path.
    Raises ``CallgateError`` when it cannot be opened."""
    if not is_store_url(target):
        return FingerprintStore(target, window=window)
    try:
        from callgate.guards._pgstore import PostgresFingerprintStore
    except ImportError as exc:
        raise CallgateError("guard state in PostgreSQL needs psycopg: install "
                            "callgate[postgres]") from exc
    return PostgresFingerprintStore(str(target), window=window)

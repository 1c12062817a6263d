"""What an audit or guard-state target names: a PostgreSQL store, or a file (no store loaded)."""

from __future__ import annotations

__all__ = ["is_store_url"]


def is_store_url(target: object) -> bool:
    """True when ``target`` names a PostgreSQL store (``postgresql://`` or ``postgres://``)."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))

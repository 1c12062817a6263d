"""One opener for every audit store: a PostgreSQL URL or a SQLite file.

``open_store("postgresql://…")`` (or ``postgres://``) gives the PostgreSQL store, anything else
the SQLite log at that path. Both have the interface :class:`AuditLog` describes, which is what
the kernel, the CLI, the viewer, replay and the exporters take.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Self

from callgate._errors import AuditError
from callgate._model import Decision, ToolCall, ToolResult
from callgate.audit._checkpoint import Checkpoint
from callgate.audit._store import AuditRecord, AuditStore
from callgate.audit._target import is_store_url
from callgate.audit._verify import VerifyReport

if TYPE_CHECKING:
    from types import TracebackType


class AuditLog(Protocol):
    """What every audit store offers (:class:`~callgate.audit.AuditStore` for SQLite,
    ``PostgresAuditStore`` for PostgreSQL)."""

    def start_run(self, run_id: str, *, principal: str, policy_name: str, manifest_hash: str,
                  config: Mapping[str, Any]) -> None:
        """Append a run's ``run-start`` event."""

    def record_decision(self, run_id: str, call: ToolCall, decision: Decision, *,
                        replay: Mapping[str, Any] | None = None) -> int:
        """Append a decision; its global sequence."""

    def record_result(self, run_id: str, result: ToolResult, *,
                      replay: Mapping[str, Any] | None = None) -> int:
        """Append a result; its global sequence."""

    def record_system(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        """Append a system event; its global sequence."""

    def end_run(self, run_id: str) -> None:
        """Append a run's ``run-end`` event."""

    def checkpoint(self, private_key: bytes | None = None) -> Checkpoint:
        """Sign the head now and move the anchor."""

    def public_key(self) -> bytes | None:
        """The store's signing key's public key."""

    def head(self) -> tuple[int, str]:
        """The last event's sequence and hash."""

    def run_ids(self) -> list[str]:
        """Every run's id, in start order."""

    def records(self, run_id: str) -> list[AuditRecord]:
        """One run's events in order."""

    def checkpoints(self) -> list[Checkpoint]:
        """The stored checkpoints, oldest first."""

    def verify(self, *, public_key: bytes | None = None,
               anchor: Checkpoint | None = None) -> VerifyReport:
        """Recompute every stored value; the first bad row."""

    def add_observer(self, observer: Callable[[AuditRecord], None]) -> None:
        """Be told of every record this store appends."""

    def close(self) -> None:
        """Close the store."""

    def __enter__(self) -> Self:
        """The store itself."""

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Close the store."""


def open_store(target: str | os.PathLike[str], **options: Any) -> AuditLog:
    """Open the audit store ``target`` names: a PostgreSQL URL gives the PostgreSQL store
    (psycopg, from the ``postgres`` extra), anything else the SQLite log at that path.

    ``options`` go to the store's ``open`` (``read_only``, ``checkpoints``, ``key_path``,
    ``anchor_path``, …; ``schema`` and ``pool_size`` only for PostgreSQL).
    """
    if is_store_url(target):
        try:
            from callgate.audit._postgres import PostgresAuditStore
        except ImportError as exc:
            raise AuditError("a PostgreSQL audit store needs psycopg: install callgate[postgres]"
                             ) from exc
        return PostgresAuditStore.open(str(target), **options)
    return AuditStore.open(target, **options)

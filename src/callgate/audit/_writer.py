"""What every audit store does above its own append: the typed events, observers, and
checkpoints on a schedule. A store (SQLite segment, PostgreSQL) supplies ``_append`` — seal
the next record on the head and make it durable — and ``_sign`` — store a checkpoint of the
head and move the anchor; everything here is the same for all of them.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from callgate._errors import AuditError
from callgate._model import Decision, ToolCall, ToolResult
from callgate.audit._checkpoint import Checkpoint, public_key_of

if TYPE_CHECKING:
    from callgate.audit._store import AuditRecord

try:  # a mark the compiled build (docs/kernel.md) reads when it compiles; nothing at run time
    from mypy_extensions import mypyc_attr
except ImportError:  # mypy_extensions comes with mypy; an install without it needs no mark
    def mypyc_attr(*_args: object, **_marks: object) -> Callable[[type], type]:  # type: ignore[misc]  # the stand-in's signature is looser than the original's
        return lambda cls: cls

log = logging.getLogger("callgate.audit")


def _jsonable(value: Any) -> Any:
    """Plain JSON data for ``value`` on the fast path; the value itself when that fails.

    A value left as it is makes the record fail to seal, and the append then sanitises the
    whole payload once, so content never raises.
    """
    try:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        return to_jsonable_python(value)
    except Exception:  # pydantic, codecs and user __repr__s raise many kinds
        return value


def _text(value: str) -> str:
    """Run metadata as storable text: strings that are not valid Unicode backslash-escaped."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True, slots=True)
class Signing:
    """A store's automatic checkpoints: the private key, where its anchor lives (a store may
    keep none), how often to sign."""

    private_key: bytes
    anchor_path: Path | None
    every: int


@mypyc_attr(allow_interpreted_subclasses=True)  # the PostgreSQL store is not compiled
class LogWriter(ABC):
    """The public writing API of an audit store over its ``_append`` and ``_sign``."""

    _lock: threading.RLock
    _signing: Signing | None
    _checkpoint_due: bool
    _observers: list[Callable[[AuditRecord], None]]

    @abstractmethod
    def _append(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        """Append the next event of ``run_id``; its global sequence."""

    @abstractmethod
    def _sign(self, private_key: bytes) -> Checkpoint:
        """Store a checkpoint of the current head and move the anchor to it."""

    def start_run(self, run_id: str, *, principal: str, policy_name: str, manifest_hash: str,
                  config: Mapping[str, Any]) -> None:
        """Open a run: appends its ``run-start`` event (and, behind it, its ``runs`` row)."""
        if not run_id:
            raise AuditError("a run id must not be empty")
        if not isinstance(run_id, str) or _text(run_id) != run_id:
            raise AuditError("a run id must be a string of valid Unicode")
        self._append(run_id, "run-start", {
            "principal": _text(principal), "policy_name": _text(policy_name),
            "manifest_hash": _text(manifest_hash), "config": _jsonable(dict(config))})

    def record_decision(self, run_id: str, call: ToolCall, decision: Decision, *,
                        replay: Mapping[str, Any] | None = None) -> int:
        """Append a decision (with its call) and return the event's global sequence.

        ``replay`` is what a replay of the run needs beside it (the kernel's clocks, how the
        call came in); it is stored as ``payload.replay``."""
        if call.run_id and call.run_id != run_id:
            raise AuditError(f"call belongs to run {call.run_id!r}, not {run_id!r}")
        payload = {"call": _jsonable(call), "decision": _jsonable(decision)}
        if replay is not None:
            payload["replay"] = _jsonable(dict(replay))
        return self._append(run_id, "decision", payload)

    def record_result(self, run_id: str, result: ToolResult, *,
                      replay: Mapping[str, Any] | None = None) -> int:
        """Append the result of an executed call and return the event's global sequence;
        ``replay`` as for ``record_decision`` (the labels the executor or host gave)."""
        payload = {"result": _jsonable(result)}
        if replay is not None:
            payload["replay"] = _jsonable(dict(replay))
        return self._append(run_id, "result", payload)

    def record_system(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> int:
        """Append a ``_system`` event (``kind`` e.g. ``quarantine``, ``violation``)."""
        if not kind:
            raise AuditError("a system event needs a kind")
        return self._append(run_id, "system", {"kind": _text(kind),
                                               "data": _jsonable(dict(payload))})

    def end_run(self, run_id: str) -> None:
        """Close a run: appends its ``run-end`` event; later appends to it fail."""
        self._append(run_id, "run-end", {})

    def checkpoint(self, private_key: bytes | None = None) -> Checkpoint:
        """Sign the current head and runs now, store the checkpoint and move the anchor.

        ``private_key`` (raw Ed25519) defaults to the store's own signing key. Keep a copy of
        the returned checkpoint somewhere the log's writer cannot edit; ``verify`` takes it as
        ``anchor``.
        """
        if private_key is None:
            if self._signing is None:
                raise AuditError("this store has no signing key: pass one, or open it with"
                                 " checkpoints on")
            private_key = self._signing.private_key
        return self._sign(private_key)

    def public_key(self) -> bytes | None:
        """The raw public key of the store's signing key (``None`` without checkpoints)."""
        return None if self._signing is None else public_key_of(self._signing.private_key)

    def add_observer(self, observer: Callable[[AuditRecord], None]) -> None:
        """Call ``observer`` with every record this store appends, once it is in the log (an
        exporter, a live view). An observer that raises is logged and ignored: it never fails
        an append, so it never changes a decision. Records other writers append are not seen.
        """
        with self._lock:
            self._observers.append(observer)

    def _notify(self, record: AuditRecord) -> None:
        for observer in list(self._observers):
            try:
                observer(record)
            except Exception as exc:  # an observer's failure is its own, never the append's
                log.error("audit observer %r failed on event %d: %s", observer, record.seq, exc)

    def _after_append(self, kind: str, seq: int) -> None:
        """Sign a checkpoint when one is due (a run's end, every ``every`` events, or after a
        failed one). The event itself is already in the log; a failure leaves the anchor where
        it was (still true), is logged, and the next append tries again."""
        signing = self._signing
        if signing is None:
            return
        if not (kind == "run-end" or seq % signing.every == 0 or self._checkpoint_due):
            return
        try:
            self._sign(signing.private_key)
            self._checkpoint_due = False
        except AuditError as exc:
            self._checkpoint_due = True
            log.error("audit checkpoint failed: %s", exc)

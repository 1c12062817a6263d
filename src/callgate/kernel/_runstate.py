"""Run state: counters across a run, and quarantine.

The counters are those of the Ari Kernel design. The behavioral sequence rules that used to
live beside them are statements of the behavioral language now (``packs/sequences.yaml``),
judged by the same monitors as a policy's own ``behavior`` section.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from callgate._model import ToolCall
from callgate.guards._scan import scan_of

#: (tool_class, action) pairs a quarantined run may still take.
READ_ONLY_ACTIONS: frozenset[tuple[str, str]] = frozenset(
    {
        ("http", "get"),
        ("http", "head"),
        ("http", "options"),
        ("file", "read"),
        ("file", "list"),
        ("database", "query"),
        ("retrieval", "search"),
    }
)
EGRESS_WRITE_ACTIONS = frozenset({"post", "put", "patch", "delete"})


@dataclass(slots=True)
class Counters:
    """The run's counters, as in the Ari Kernel design."""

    denied_actions: int = 0
    capability_requests: int = 0
    denied_capability_requests: int = 0
    external_egress_attempts: int = 0
    sensitive_file_read_attempts: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Why and when a run was quarantined."""

    trigger: str  # "threshold" or "behavioral"
    rule_id: str
    reason: str
    counters: Mapping[str, int]
    matched: tuple[int, ...] = ()
    at: float = field(default_factory=time.time)

    def as_payload(self) -> dict[str, Any]:
        return {"trigger": self.trigger, "rule_id": self.rule_id, "reason": self.reason,
                "counters": dict(self.counters), "matched": list(self.matched), "at": self.at}


class RunState:
    """Counters and quarantine of one run."""

    def __init__(self, *, quarantine_after: int = 5) -> None:
        self.counters = Counters()
        self.quarantine: Quarantine | None = None
        self._threshold = quarantine_after

    @property
    def quarantined(self) -> bool:
        return self.quarantine is not None

    def count_attempt(self, call: ToolCall) -> None:
        """Count what a call attempts (allowed or not): egress writes and sensitive reads."""
        if call.tool_class == "http" and call.action in EGRESS_WRITE_ACTIONS:
            self.counters.external_egress_attempts += 1
        if call.tool_class in ("file", "shell") and scan_of(call).sensitive:
            self.counters.sensitive_file_read_attempts += 1

    def note_denied(self, *, capability: bool) -> Quarantine | None:
        """Count a denial; quarantine when the threshold is reached. Returns a new quarantine."""
        self.counters.denied_actions += 1
        if capability:
            self.counters.denied_capability_requests += 1
        if self.quarantine is None and self.counters.denied_actions >= self._threshold:
            return self.enter_quarantine(
                "threshold", "run.denial-threshold",
                f"{self.counters.denied_actions} denied actions reached the threshold "
                f"of {self._threshold}",
            )
        return None

    def enter_quarantine(self, trigger: str, rule_id: str, reason: str,
                         matched: tuple[int, ...] = ()) -> Quarantine:
        if self.quarantine is None:
            self.quarantine = Quarantine(trigger, rule_id, reason, self.counters.snapshot(),
                                         matched)
        return self.quarantine

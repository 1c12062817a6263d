"""What the kernel asks of a content guard: the protocol every guard, built in or not, meets."""

from __future__ import annotations

from typing import Protocol

from callgate._model import Reason, ToolCall, ToolResult


class Guard(Protocol):
    """A content check run with the taint step: sees every call, and every result it produced."""

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        """A reason (id, check="guard", message) to deny the pending call, or None."""

    def observe(self, call: ToolCall, result: ToolResult | None) -> None:
        """Learn from a decided call: ``result`` is None when it was only decided (``check``)."""

"""Approvals: a human (or any handler) answers a ``require-approval`` decision, within a time.

No handler, a handler that raises and one that does not answer in time all refuse: an approval
that was not given is a deny.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from callgate._model import Decision, ToolCall

ApprovalHandler = Callable[[ToolCall, Decision], bool]


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back for one call: granted or not, and why, as the audit records it."""

    granted: bool
    why: str


def ask(handler: ApprovalHandler | None, call: ToolCall, decision: Decision,
        timeout_s: float) -> Answer:
    """Run the handler on its own thread and wait at most ``timeout_s`` for its answer."""
    if handler is None:
        return Answer(False, "approval required and no approval handler is configured")
    answer: list[bool] = []
    failure: list[str] = []

    def run() -> None:
        try:
            answer.append(bool(handler(call, decision)))
        except Exception as exc:
            failure.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=run, daemon=True, name="callgate-approval")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return Answer(False, f"approval timed out after {timeout_s:g}s")
    if failure:
        return Answer(False, f"approval handler failed: {failure[0]}")
    if answer and answer[0]:
        return Answer(True, "approved by the approval handler")
    return Answer(False, "refused by the approval handler")

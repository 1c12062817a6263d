"""Building ``ToolResult`` values the same way in every executor.

Executors never raise for an expected failure. A refusal by an executor's own protection is
``status="denied"`` and an ordinary failure is ``status="error"``; both carry an error text that
starts with a stable reason id (``"ssrf.private-address: ..."``) so callers and audits can match
on it. Any unexpected exception inside an executor becomes an error result too (fail closed:
nothing further runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from callgate._model import TaintLabel, ToolCall, ToolResult


class Refusal(Exception):  # noqa: N818 - internal control flow, never leaves the package
    """Raised inside an executor to stop with a denied or error result; caught by ``guarded``."""

    def __init__(self, reason_id: str, message: str, *, status: str = "denied") -> None:
        self.reason_id = reason_id
        self.message = message
        self.status = status
        super().__init__(f"{reason_id}: {message}")


def denied(reason_id: str, message: str) -> Refusal:
    """A refusal by an executor's own protection."""
    return Refusal(reason_id, message, status="denied")


def failed(reason_id: str, message: str) -> Refusal:
    """An ordinary failure (missing file, timeout, bad parameters)."""
    return Refusal(reason_id, message, status="error")


class Outcome:
    """What a successful execution produced: its output and the taint to put on it."""

    __slots__ = ("output", "taint")

    def __init__(self, output: Any, taint: Iterable[TaintLabel]) -> None:
        self.output = output
        self.taint = tuple(taint)


def guarded(call: ToolCall, run: Callable[[], Outcome]) -> ToolResult:
    """Run ``run`` and turn its outcome, refusal or unexpected exception into a ``ToolResult``."""
    started = time.perf_counter()

    def elapsed() -> float:
        return (time.perf_counter() - started) * 1000.0

    try:
        outcome = run()
    except Refusal as refusal:
        status = "denied" if refusal.status == "denied" else "error"
        return ToolResult(
            call_id=call.id, status=status, error=str(refusal), duration_ms=elapsed()
        )
    except Exception as exc:  # fail closed: report, never propagate into the kernel
        message = f"executor.internal: {type(exc).__name__}: {exc}"
        return ToolResult(call_id=call.id, status="error", error=message, duration_ms=elapsed())
    return ToolResult(
        call_id=call.id,
        status="ok",
        output=outcome.output,
        taint=outcome.taint,
        duration_ms=elapsed(),
    )


def param_str(params: Mapping[str, Any], name: str, *, default: str | None = None) -> str:
    """A required (or defaulted) string parameter; anything else is a parameter error."""
    value = params.get(name, default)
    if not isinstance(value, str):
        raise failed("params.invalid", f"parameter {name!r} must be a string")
    return value


def param_int(params: Mapping[str, Any], name: str, *, default: int) -> int:
    """An optional integer parameter (booleans are not integers here)."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise failed("params.invalid", f"parameter {name!r} must be an integer")
    return value


def check_action(call: ToolCall, tool_class: str, actions: Iterable[str]) -> None:
    """Refuse a call addressed to another tool class or naming an unknown action."""
    if call.tool_class != tool_class:
        raise denied("executor.tool-class", f"{tool_class} executor got a {call.tool_class} call")
    known = tuple(actions)
    if call.action not in known:
        raise failed("params.action", f"unknown action {call.action!r}; expected one of {known}")

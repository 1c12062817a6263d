"""Hardened executors: the code that runs a call after the kernel allowed it.

Executors are the last line of defence. Each re-checks what it is about to touch at execution
time (real paths after open, resolved addresses before connect, parsed SQL before running it),
holds hard limits (time, sizes, rows), and taints its output with where the data came from. A
refusal by an executor is a ``ToolResult`` with ``status="denied"`` and an error that starts with
a stable reason id; executors never raise for expected failures.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from callgate._model import ToolCall, ToolResult
from callgate.executors._addresses import check_address, parse_ipv4_spelling
from callgate.executors._database import DatabaseExecutor, SqlClass, classify_sql
from callgate.executors._file import FileExecutor
from callgate.executors._http import HttpExecutor
from callgate.executors._retrieval import RetrievalExecutor


@runtime_checkable
class Executor(Protocol):
    """Runs an allowed call of one tool class and returns its result (never raises)."""

    tool_class: str

    def execute(self, call: ToolCall) -> ToolResult:
        """Execute ``call`` (already allowed by the kernel) under the executor's own checks."""
        ...


__all__ = [
    "DatabaseExecutor",
    "Executor",
    "FileExecutor",
    "HttpExecutor",
    "RetrievalExecutor",
    "SqlClass",
    "check_address",
    "classify_sql",
    "parse_ipv4_spelling",
]

"""The errors callgate raises, all under one root.

    CallgateError
    ├── PolicyError            a policy file or object is invalid (every problem, with places)
    ├── TraceError             a recorded trace is malformed (names the line)
    ├── TemporalError          a behavioral statement does not parse or is out of scope
    ├── AuditError             the audit log cannot be written or read
    ├── SandboxError           no usable sandbox backend, or a sandbox could not start
    ├── ExecutorError          an executor failed for a reason other than a policy
    └── Denied                 a mediated call was denied (carries the Decision)

Foreign errors (sqlite3, yaml, z3, subprocess) are converted where they enter and re-raised
``from`` the original, so callers only ever catch ``CallgateError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from callgate._model import Decision, ToolResult


class CallgateError(Exception):
    """Root of every error callgate raises."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem found while loading input, with its place when it has one."""

    message: str
    source: str = "<policy>"
    line: int | None = None
    column: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        place = self.source
        if self.line is not None:
            place += f":{self.line}"
            if self.column is not None:
                place += f":{self.column}"
        where = f" ({self.field})" if self.field else ""
        return f"{place}: {self.message}{where}"


class _ProblemsError(CallgateError):
    """An error carrying every problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class PolicyError(_ProblemsError):
    """A policy file or object is invalid; ``problems`` lists each with its file:line:col."""


class TemporalError(_ProblemsError):
    """A behavioral statement does not parse or breaks a scope rule."""


class TraceError(_ProblemsError):
    """A recorded trace line is malformed."""


class AuditError(CallgateError):
    """The audit log cannot be opened, written or read."""


class StoreUnavailableError(CallgateError):
    """A store shared with other processes (PostgreSQL) cannot be reached now: the server is
    down, restarting or out of connections. The same request may succeed later (the sidecar
    answers 503 with ``Retry-After``); a decision that needed it is still a deny."""


class AuditUnavailableError(AuditError, StoreUnavailableError):
    """The audit store cannot be reached now (an :class:`AuditError` that may pass)."""


class SandboxError(CallgateError):
    """No usable sandbox backend, or the sandbox could not start."""


class ExecutorError(CallgateError):
    """An executor failed for a reason other than a policy decision."""


class CompileError(CallgateError):
    """A specification could not be compiled into a policy (its requirements are not lost:
    the error says which and why)."""


class Denied(CallgateError):  # noqa: N818 - reads as "callgate.Denied", a verdict
    """A mediated call was denied; ``decision`` says why.

    ``result`` is set when the call ran and was stopped while running (by the OS sandbox or an
    executor's own protection): it holds what the call produced before it was stopped.
    """

    def __init__(self, decision: Decision, result: ToolResult | None = None) -> None:
        self.decision = decision
        self.result = result
        super().__init__(decision.summary())

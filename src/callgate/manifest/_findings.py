"""A finding of the manifest verifier or the declare-vs-do check: one line a reviewer reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    """One widening (or undeclared use), printed as ``[severity] rule-id tool: message``.

    ``tool`` names the subject: a tool, ``principal``, or ``rule:<id>``. ``line`` is the source
    line for declare-vs-do findings (also named in the message), else ``None``.
    """

    severity: str
    rule_id: str
    tool: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        return f"[{self.severity}] {self.rule_id} {self.tool}: {self.message}"

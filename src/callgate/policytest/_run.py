"""Running policy test cases: each on a fresh ``Kernel``, nothing executed, every difference kept.

A call is decided with ``Kernel.check``; when it is allowed (or needs approval) and the step
gives a result, that result is reported with ``Kernel.report``, so its output and taint reach
the later steps as a real run's would. A note goes in with ``Kernel.note``. After the last step
the obligations still open are compared when the case names them. No audit log is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from callgate._errors import CallgateError
from callgate._model import Decision
from callgate.kernel import Kernel
from callgate.policy._loader import LoadedPolicy
from callgate.policytest._schema import Case, Expect, LoadedTests, Step


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One difference: at ``step`` (from 1; None for the end of the case), ``what`` differs."""

    step: int | None
    label: str
    what: str
    expected: str
    got: str


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """A case's name, where it is written, and its differences (none: it passed)."""

    name: str
    where: str
    mismatches: tuple[Mismatch, ...]

    @property
    def passed(self) -> bool:
        """Whether every expectation of the case held."""
        return not self.mismatches


def run_tests(policy: LoadedPolicy, tests: LoadedTests) -> list[CaseOutcome]:
    """Every case of ``tests`` against ``policy``, in file order.

    Raises ``CallgateError`` only when no kernel can be built for the policy (a root escaping
    the working directory, say): that is bad input, not a failed case.
    """
    return [CaseOutcome(case.name, tests.where(i), tuple(run_case(policy, case,
                                                                  tests.working_dir)))
            for i, case in enumerate(tests.tests.cases)]


def run_case(policy: LoadedPolicy, case: Case, working_dir: str) -> list[Mismatch]:
    """The differences between what ``case`` expects and what a fresh kernel decides."""
    kernel = Kernel(policy, working_dir=working_dir)
    try:
        found: list[Mismatch] = []
        for number, step in enumerate(case.all_steps(), start=1):
            found += _run_step(kernel, number, step)
        if case.obligations is not None:
            got = sorted(v.statement for v in kernel.open_obligations())
            if got != sorted(case.obligations):
                found.append(Mismatch(None, "end of case", "open obligations",
                                      _ids(sorted(case.obligations)), _ids(got)))
        return found
    finally:
        kernel.close()


def _run_step(kernel: Kernel, number: int, step: Step) -> list[Mismatch]:
    if step.note is not None:
        note = step.note
        kernel.note(note.action, note.args, output=note.output, taint=note.taint)
        return []
    assert step.call is not None and step.expect is not None  # the schema's checks
    call = step.call
    label = f"{call.tool} ({call.tool_class}.{call.action})"
    decision = kernel.check(call.model_dump())
    found = _compare(number, label, step.expect, decision)
    if step.result is not None and decision.verdict != "deny":
        r = step.result
        try:
            kernel.report(decision.call_id, status=r.status, output=r.output, error=r.error,
                          taint=r.taint)
        except CallgateError as exc:
            found.append(Mismatch(number, label, "result", "reported", f"refused: {exc}"))
    return found


def _compare(number: int, label: str, expect: Expect, decision: Decision) -> list[Mismatch]:
    found = []
    if decision.verdict != expect.verdict:
        found.append(Mismatch(number, label, "verdict", expect.verdict, decision.verdict))
    got_reasons = [r.id for r in decision.reasons]
    if expect.reasons is not None and list(expect.reasons) != got_reasons:
        found.append(Mismatch(number, label, "reasons", _ids(expect.reasons), _ids(got_reasons)))
    elif expect.reasons is None and decision.verdict != expect.verdict:
        found.append(Mismatch(number, label, "reasons", "(not compared)", _ids(got_reasons)))
    if "witness" in expect.model_fields_set:
        want = expect.witness
        got = decision.witness
        if want is None:
            if got is not None:
                found.append(Mismatch(number, label, "witness", "none", _witness(got.statement,
                                                                                 got.events)))
        elif got is None or got.statement != want.statement or (
                want.events is not None and tuple(want.events) != tuple(got.events)):
            found.append(Mismatch(
                number, label, "witness", _witness(want.statement, want.events),
                "none" if got is None else _witness(got.statement, got.events)))
    return found


def _ids(ids: Sequence[str]) -> str:
    return f"[{', '.join(ids)}]"


def _witness(statement: str, events: Sequence[int] | None) -> str:
    return statement if events is None else f"{statement} at events {list(events)}"


def render(outcome: CaseOutcome) -> str:
    """A failed case as people read it: the case, each step that differs, expected vs got."""
    lines = [f"FAIL {outcome.name} ({outcome.where})"]
    step: int | None = -1
    for m in outcome.mismatches:
        if m.step != step:
            step = m.step
            lines.append(f"  step {m.step}: {m.label}" if m.step is not None
                         else f"  {m.label}:")
        lines.append(f"    {m.what}: expected {m.expected}, got {m.got}")
    return "\n".join(lines)

"""Feed a recorded run through a fresh kernel and compare every decision with the recorded one.

The kernel is built from the recorded policy (or another one: the what-if) with the recorded
working directory, deadline and guards, on clocks that read what each decision recorded, and
without an audit log. Nothing runs again: a call the original executed gets its recorded result
back from a stand-in executor, a host's report is reported again, a note is noted again, and an
approval is answered as it was. Where another process took the run over, the replay does the
same (``suspend`` / ``resume`` into a kernel with fresh guards seeded with the fingerprints that
process started from), so in-memory guard state is lost where it was lost then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from callgate._errors import CallgateError
from callgate._model import Decision, ToolCall, ToolResult
from callgate.guards import Guard, GuardSettings, build_guards
from callgate.kernel._kernel import Kernel
from callgate.kernel._recording import stores_of
from callgate.policy._schema import Policy, ToolPolicy
from callgate.replay._recorded import (
    Call,
    Declare,
    Note,
    Recording,
    ReplayError,
    Report,
    Resume,
)

__all__ = ["Change", "ReplayOutcome", "replay"]


def _key(decision: Decision) -> tuple[str, tuple[str, ...], Any]:
    witness = None if decision.witness is None else decision.witness.model_dump(mode="json")
    return decision.verdict, tuple(r.id for r in decision.reasons), witness


@dataclass(frozen=True)
class Change:
    """A call whose decision differs: the recorded one (``before``) and the replayed one."""

    index: int
    label: str
    call_id: str
    before: Decision
    after: Decision

    @property
    def fields(self) -> list[str]:
        """Which parts differ: ``verdict``, ``reasons``, ``witness``."""
        names = ("verdict", "reasons", "witness")
        return [n for n, a, b in zip(names, _key(self.before), _key(self.after), strict=True)
                if a != b]


@dataclass
class ReplayOutcome:
    """Every call compared: the changes (empty when identical) and the run-end violations."""

    run_id: str
    calls: int
    changes: list[Change] = field(default_factory=list)
    violations_before: list[str] | None = None
    violations_after: list[str] = field(default_factory=list)
    compared: list[tuple[Call, Decision]] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """No decision and no run-end verdict changed."""
        return not self.changes and (self.violations_before is None
                                     or self.violations_before == self.violations_after)


class _Clocks:
    """The clocks a replayed decision reads: the values its recorded decision read."""

    def __init__(self) -> None:
        self.now = 0.0
        self.instant = 0.0

    def wall(self) -> float:
        return self.now

    def timer(self) -> float:
        return self.instant


def _expected(step: Call) -> Decision:
    """The final recorded decision of a call: a stop while running replaces the decision, an
    approval answer turns a ``require-approval`` of ``mediate`` into allow or deny."""
    if step.final is not None:
        return step.final
    recorded = step.decision
    if recorded.verdict != "require-approval" or step.entry != "mediate":
        return recorded
    granted = bool(step.approval)
    extra = recorded.reasons[0].model_copy(update={
        "id": "approval.granted" if granted else "approval.denied", "check": "approval"})
    return Decision(verdict="allow" if granted else "deny", call_id=recorded.call_id,
                    reasons=(*recorded.reasons, extra), witness=recorded.witness)


class _Replayer:
    def __init__(self, recording: Recording, policy: Policy | None) -> None:
        self.recording = recording
        self.policy = policy or recording.policy
        self.clocks = _Clocks()
        self.answers: dict[str, bool] = {s.call_id: bool(s.approval)
                                         for s in recording.calls if s.approval is not None}
        self.kernel = self._kernel(recording.fingerprints)

    def _guards(self, fingerprints: list[list[Any]]) -> list[Guard]:
        source = self.recording.guards
        settings = (GuardSettings.model_validate(source["settings"])
                    if source.get("from") == "settings" else self.policy.guards)
        guards = build_guards(settings)
        for store in stores_of(guards):
            store.load(fingerprints)
        return guards

    def _kernel(self, fingerprints: list[list[Any]], resume: bytes | None = None) -> Kernel:
        return Kernel(self.policy, audit=None, working_dir=self.recording.working_dir,
                      run_id=self.recording.run_id, clock=self.clocks.wall,
                      timer=self.clocks.timer, guards=self._guards(fingerprints),
                      decision_deadline_s=self.recording.deadline_s,
                      approval_handler=self._approve, resume=resume)

    def _approve(self, call: ToolCall, decision: Decision) -> bool:
        return self.answers.get(call.id, False)  # asked now but not then: no (fail closed)

    def run(self) -> ReplayOutcome:
        outcome = ReplayOutcome(self.recording.run_id, len(self.recording.calls),
                                violations_before=self.recording.violations)
        for step in self.recording.steps:
            if isinstance(step, Call):
                self._call(step, outcome)
            elif isinstance(step, Report):
                self._report(step)
            elif isinstance(step, Note):
                self.kernel.note(step.action, step.args, output=step.output, taint=step.taint)
            elif isinstance(step, Declare):
                self.kernel.declare_tool(step.name, ToolPolicy.model_validate(step.policy))
            elif isinstance(step, Resume):
                snapshot = self.kernel.suspend()
                self.kernel = self._kernel(step.fingerprints, resume=snapshot)
        outcome.violations_after = [v.statement for v in self.kernel.end_run()]
        self.kernel.close()
        return outcome

    def _call(self, step: Call, outcome: ReplayOutcome) -> None:
        self.clocks.now, self.clocks.instant = step.now, step.instant
        if step.entry == "check":
            after = self.kernel.check(step.call)
        elif step.entry == "refuse":
            after = self.kernel.refuse(step.call, step.decision.reasons[0])
        else:
            after, _ = self.kernel.mediate(step.call, executor=self._executor(step))
        outcome.compared.append((step, after))
        before = _expected(step)
        differ = before.verdict != after.verdict if self.recording.verdicts_only else \
            _key(before) != _key(after)
        if differ:
            outcome.changes.append(Change(step.index, step.label, step.call_id, before, after))

    @staticmethod
    def _executor(step: Call) -> Callable[[ToolCall], ToolResult]:
        def recorded(call: ToolCall) -> ToolResult:
            result = step.result
            if result is None:  # allowed now, not run then: nothing to hand back
                return ToolResult(call_id=call.id, status="error",
                                  error="replay: the recorded run did not execute this call")
            return result.model_copy(update={"taint": step.produced})
        return recorded

    def _report(self, step: Report) -> None:
        result = step.result
        # a call the replayed check denied has no result to report (CallgateError)
        with contextlib.suppress(CallgateError):
            self.kernel.report(step.call_id, status=result.status, output=result.output,
                               error=result.error, duration_ms=result.duration_ms,
                               taint=step.produced)


def replay(recording: Recording, policy: Policy | None = None) -> ReplayOutcome:
    """Replay ``recording`` through a fresh kernel under its own policy, or ``policy`` (the
    what-if); every call's decision is compared with the recorded one. Raises ``ReplayError``
    when the kernel cannot be built (a recorded working directory it refuses, say)."""
    try:
        return _Replayer(recording, policy).run()
    except ReplayError:
        raise
    except CallgateError as exc:
        raise ReplayError(f"the run cannot be replayed: {exc}") from exc

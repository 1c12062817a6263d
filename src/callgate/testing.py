"""Helpers for testing a policy, or an agent's use of callgate, in your own test suite.

    from callgate.testing import AuditedKernel, assert_allowed, assert_denied, call

    with AuditedKernel(POLICY_YAML, working_dir=tmp_path) as run:
        assert_allowed(run.check(call("http", "get", url="https://api.github.com/x")))
        assert_denied(run.check(call("file", "read", path="~/.ssh/id_rsa")),
                      reason="capability.constraint")
        assert run.verify().ok

``call`` and ``tool_call`` build calls, ``event`` and ``check_trace`` build and judge traces of
typed events, ``AuditedKernel`` is a ``Kernel`` whose audit log lives in a private temporary
directory (removed on close) so tests can read and verify what it recorded, and the
``assert_*`` functions fail with the verdict and every reason. Only the public API and the base
dependencies are used: it works in an install without extras.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from callgate._model import Decision, Event, Status, ToolCall
from callgate.audit import AuditRecord, AuditStore, VerifyReport, read_public_key, verify_file
from callgate.kernel import Kernel
from callgate.policy import LoadedPolicy, Policy, load_preset, parse_policy, preset_names
from callgate.temporal import Violation, compile_behavior

__all__ = [
    "AuditedKernel",
    "assert_allowed",
    "assert_denied",
    "assert_requires_approval",
    "call",
    "check_trace",
    "event",
    "policy_of",
    "reason_ids",
    "tool_call",
]

#: The run id ``tool_call`` stamps on the calls it builds.
TEST_RUN = "test-run"


def call(tool_class: str, action: str, tool: str | None = None, *,
         taint: Sequence[str] = (), **parameters: Any) -> dict[str, Any]:
    """A call as an agent hands it to ``Kernel.check``: a mapping (the kernel stamps it).

    ``tool`` defaults to ``<tool_class>_<action>``; ``taint`` names the sources the
    parameters came from (``web``, ``email``, …).
    """
    out: dict[str, Any] = {"tool": tool or f"{tool_class}_{action}", "tool_class": tool_class,
                           "action": action, "parameters": parameters}
    if taint:
        out["taint"] = [{"source": source} for source in taint]
    return out


def tool_call(tool_class: str, action: str, tool: str | None = None, *,
              taint: Sequence[str] = (), sequence: int = 1, run_id: str = TEST_RUN,
              principal: str = "agent", **parameters: Any) -> ToolCall:
    """A stamped ``ToolCall`` (id, run, sequence, time), as guards and executors receive one."""
    return ToolCall.model_validate({
        **call(tool_class, action, tool, taint=taint, **parameters),
        "id": f"{run_id}:{sequence}", "run_id": run_id, "sequence": sequence,
        "principal": principal, "timestamp": "2026-01-01T00:00:00Z"})


def event(action: str, *, status: Status = "ok", output: str = "",
          taint: Sequence[str] = (), **args: Any) -> Event:
    """A typed trace event (numbered by ``check_trace`` in the order given)."""
    return Event(action=action, args=args, status=status, output=output,
                 taint=frozenset(taint))


def policy_of(source: Policy | LoadedPolicy | str) -> Policy:
    """A ``Policy`` from a model, a loaded file, a shipped preset's name or YAML text."""
    if isinstance(source, Policy):
        return source
    if isinstance(source, LoadedPolicy):
        return source.policy
    if source in preset_names():
        return load_preset(source).policy
    return parse_policy(source, "<test policy>").policy


def check_trace(policy: Policy | LoadedPolicy | str, events: Sequence[Event]
                ) -> list[Violation]:
    """The policy's behavior statements judged on ``events`` (numbered from 1)."""
    numbered = [Event(action=e.action, args=e.args, status=e.status, output=e.output,
                      taint=e.taint, seq=i, line=e.line, derived=e.derived, flows=e.flows)
                for i, e in enumerate(events, start=1)]
    return compile_behavior(policy_of(policy).behavior).check_trace(numbered)


class AuditedKernel:
    """A ``Kernel`` with its audit log in a private temporary directory, removed by ``close``.

    ``policy`` is anything ``policy_of`` takes; ``options`` go to ``Kernel`` (``working_dir``,
    ``clock``, ``approval_handler``, ``guards``, …). ``kernel`` is the kernel itself.
    """

    def __init__(self, policy: Policy | LoadedPolicy | str, **options: Any) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="callgate-test-"))
        self.audit_path = self._dir / "audit.db"
        try:
            self.kernel = Kernel(policy_of(policy), audit=self.audit_path, **options)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def check(self, call: ToolCall | Mapping[str, Any]) -> Decision:
        """``Kernel.check``: decide the call and record it."""
        return self.kernel.check(call)

    def records(self, *kinds: str) -> list[AuditRecord]:
        """What the audit log holds for this run, oldest first (only ``kinds`` if given)."""
        with AuditStore.open(self.audit_path, read_only=True) as store:
            found = store.records(self.kernel.run_id)
        return [r for r in found if not kinds or r.kind in kinds]

    def verify(self) -> VerifyReport:
        """Recompute the audit chain and check it against its signed anchor."""
        public = read_public_key(f"{self.audit_path}.key.pub")
        return verify_file(self.audit_path, public_key=public)

    def close(self) -> list[Violation]:
        """End the run (the obligations still open come back) and remove the log."""
        try:
            violations = self.kernel.end_run()
            self.kernel.close()
            return violations
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> AuditedKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reason_ids(decision: Decision) -> list[str]:
    """The ids of the decision's reasons, in order."""
    return [r.id for r in decision.reasons]


def _expect(decision: Decision, verdict: str, reason: str | None, check: str | None) -> None:
    found = [(r.id, r.check) for r in decision.reasons]
    wrong = decision.verdict != verdict or (
        reason is not None and reason not in reason_ids(decision)) or (
        check is not None and check not in {r.check for r in decision.reasons})
    if wrong:
        wanted = verdict + (f" for {reason!r}" if reason else "") + (
            f" by the {check!r} check" if check else "")
        raise AssertionError(f"expected {wanted}, got {decision.verdict} with reasons {found}: "
                             + "; ".join(r.message for r in decision.reasons))


def assert_allowed(decision: Decision, rule: str | None = None) -> None:
    """Fail unless the call was allowed (by rule ``rule``, if given)."""
    _expect(decision, "allow", rule, None)


def assert_denied(decision: Decision, reason: str | None = None, *,
                  check: str | None = None) -> None:
    """Fail unless the call was denied (with reason id ``reason`` / by ``check``, if given)."""
    _expect(decision, "deny", reason, check)


def assert_requires_approval(decision: Decision, rule: str | None = None) -> None:
    """Fail unless the call waits for approval (by rule ``rule``, if given)."""
    _expect(decision, "require-approval", rule, None)

"""The kernel: one fail-closed pipeline that every tool call passes, in a fixed order.

    validate → run state → capability → tool policy → taint → guards → rules → behavior
    → audit decision → settle → (approval) → execute → label output → audit result → trace

The order is a security property: nothing executes before its decision is in the audit log, and
a quarantined run is stopped before any grant or rule is consulted.

The step contract: ``_validate`` gives a ``ToolCall`` or a ``Reason``; each later step gives an
``Outcome``: a reason to deny (with the witness of a broken statement) or none, and the
``Effects`` the call has on the run once its verdict is final (the grant it used, a quarantine
a statement orders, alerts to record). Only the rules step gives a verdict other than deny.
``_evaluate`` chains the steps and checks the decision's deadline between them (passing it is
a deny); ``_settle`` is the one place effects are applied, after the decision is audited, and
only a call that was not denied uses its grant and token.

Nothing but ``Denied`` leaves the public entry points, and ``Denied`` is raised in one place
(``_refuse``): an error in a step, in the audit store (a second writer, a full disk, content it
cannot encode) or in a guard becomes a deny or an error result with its reason, logged, and
recorded as far as the store still can. Tokens (``_tokens``), declared tools and executor
routes (``_registry``), approvals (``_approvals``) and validation (``_validate``) live in their
own modules.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from callgate._errors import AuditError, CallgateError, Denied, PolicyError, Problem
from callgate._model import Decision, Reason, Status, TaintLabel, ToolCall, ToolResult, Witness
from callgate.guards import Guard, GuardSettings, build_guards
from callgate.kernel._approvals import ApprovalHandler, ask
from callgate.kernel._behavior import (
    CLASS_RISK,
    RunBehavior,
    call_args,
    compile_for,
    descriptions_for,
    flow_statements,
    uses_provenance,
)
from callgate.kernel._capabilities import CapabilityToken, RateLimiter, check_grants, issue_token
from callgate.kernel._declare import check_declaration, tool_decorator
from callgate.kernel._recording import (
    decision_recording,
    guard_state_recording,
    run_recording,
    stores_of,
)
from callgate.kernel._registry import Executor, ToolRegistry
from callgate.kernel._rules import RuleSet
from callgate.kernel._runstate import READ_ONLY_ACTIONS, RunState
from callgate.kernel._suspend import restore, snapshot
from callgate.kernel._taint import CLASS_OUTPUT_TAINT, TaintTracker
from callgate.kernel._tokens import TokenBook
from callgate.kernel._toolpolicy import check_tool
from callgate.kernel._validate import Stamp, error_text, is_text, placeholder, safe_text, validate
from callgate.matchers._paths import PathRejected, canonical_parameters
from callgate.policy._roots import root_problems
from callgate.policy._schema import CapabilityConstraints, Policy, ToolPolicy
from callgate.temporal import Violation

if TYPE_CHECKING:
    # The audit stores are loaded when a kernel opens a log, the sandbox by the first
    # subprocess run: a kernel that needs neither imports neither.
    from callgate.audit import AuditLog
    from callgate.sandbox import BackendName

log = logging.getLogger("callgate")

__all__ = ["DEFAULT_DECISION_DEADLINE_S", "ApprovalHandler", "Executor", "Kernel"]

#: Seconds a decision (validation to behavior) may take before it is a deny.
DEFAULT_DECISION_DEADLINE_S = 5.0
#: Allowed ``check`` calls remembered for ``report`` (a host reports results soon after).
MAX_AWAITED_RESULTS = 1024


@dataclass(frozen=True, slots=True)
class Quarantining:
    """A behavioral statement whose breach quarantines the run: what the run state records."""

    statement: str
    why: str
    events: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Effects:
    """What a call changes in the run once its verdict is final; applied by ``_settle`` only."""

    grant: int | None = None
    quarantine: Quarantining | None = None
    alerts: tuple[Violation, ...] = ()

    def __or__(self, other: Effects) -> Effects:
        if other is _NO_EFFECTS:
            return self
        if self is _NO_EFFECTS:
            return other
        return Effects(grant=other.grant if other.grant is not None else self.grant,
                       quarantine=other.quarantine or self.quarantine,
                       alerts=(*self.alerts, *other.alerts))


#: The effects of a step that changes nothing (most steps of most calls): shared, not rebuilt.
_NO_EFFECTS = Effects()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one step found: a reason to deny (and its witness) or none, and its effects."""

    reason: Reason | None = None
    witness: Witness | None = None
    effects: Effects = _NO_EFFECTS


_GO_ON = Outcome()
_DEFAULT_DENY = Reason(id="default-deny", check="rules",
                       message="no rule allows this call (deny by default)")


def _deny(reason_id: str, check: str, message: str) -> Reason:
    return Reason(id=reason_id, check=check, message=message)


def _denial(call: ToolCall, reason: Reason, witness: Witness | None = None) -> Decision:
    return Decision(verdict="deny", reasons=(reason,), call_id=call.id, witness=witness)


def _refuse(decision: Decision, result: ToolResult | None = None) -> NoReturn:
    """The one place ``Denied`` is raised."""
    raise Denied(decision, result)


class Kernel:
    """Mediates every tool call of one agent run. Thread-safe: calls are decided one at a time.

    ``policy`` is a ``Policy`` (or anything with a ``.policy`` attribute, such as a loaded file);
    ``working_dir`` defaults to the policy's ``working_dir``, then the current directory.
    ``guards`` defaults to the content guards the policy's ``guards`` section configures (all on
    when it is absent); ``GuardSettings`` builds them from other settings; a list of guard
    objects is used as given (a run whose guards are objects cannot be replayed).
    ``guard_state`` is where they remember secrets across runs: a SQLite file, or a
    ``postgresql://`` URL whose table every kernel given it shares (any process, any machine).
    ``decision_deadline_s`` bounds each decision, measured on ``timer`` (monotonic seconds).
    ``resume`` is a ``suspend()`` snapshot of run ``run_id`` under the same policy: the kernel
    goes on with that run (in the audit log too) instead of starting a new one.
    """

    def __init__(self, policy: Policy | Any, *, audit: str | os.PathLike[str] | AuditLog | None
                 = None, working_dir: str | os.PathLike[str] | None = None,
                 approval_handler: ApprovalHandler | None = None, approval_timeout_s: float = 60.0,
                 run_id: str | None = None, clock: Callable[[], float] = time.time,
                 guards: Sequence[Guard] | GuardSettings | None = None,
                 guard_state: str | None = None,
                 decision_deadline_s: float = DEFAULT_DECISION_DEADLINE_S,
                 timer: Callable[[], float] = time.monotonic, resume: bytes | None = None
                 ) -> None:
        if not decision_deadline_s > 0:
            raise CallgateError(f"decision_deadline_s must be a positive number of seconds, "
                                f"not {decision_deadline_s!r}")
        self.decision_deadline_s = float(decision_deadline_s)
        self._timer = timer
        self.policy: Policy = policy if isinstance(policy, Policy) else policy.policy
        wd = working_dir or self.policy.working_dir or os.getcwd()
        self.working_dir = os.path.realpath(os.fspath(wd))
        if not is_text(self.working_dir):
            raise CallgateError(f"working directory {safe_text(self.working_dir)} is not a "
                                f"UTF-8 path; paths below it could not be checked")
        _refuse_escaping_roots(self.policy, self.working_dir)
        self.run_id = run_id or "run_" + uuid.uuid4().hex
        self._principal = self.policy.principal.name if self.policy.principal else "anonymous"
        self._grants = self.policy.principal.capabilities if self.policy.principal else ()
        self._registry = ToolRegistry(self.policy, self.working_dir)
        # classes whose grants constrain paths: their calls' paths are made canonical too
        self._path_classes = frozenset(g.tool_class for g in self._grants
                                       if g.constraints.allowed_paths is not None)
        # what the capability step gives for a call each grant admits (one value per grant)
        self._granted = tuple(Outcome(effects=Effects(grant=i)) for i in range(len(self._grants)))
        self._rules = RuleSet(self.policy.rules)
        self._taint = TaintTracker()
        self._state = RunState(quarantine_after=self.policy.run_state.quarantine_after_denials)
        self._outputs = self.policy.declared_outputs()
        self._behavior = RunBehavior(
            compile_for(self.policy, None if isinstance(policy, Policy) else policy),
            working_dir=self.working_dir, descriptions=descriptions_for(self.policy),
            flow_statements=flow_statements(self.policy), outputs=self._outputs,
            provenance=uses_provenance(self.policy),
            observation_chars=self.policy.run_state.observation_chars)
        # One reading of each clock per decision, recorded beside it so a replay decides on
        # the same time (the rate limits' windows read the instant, tokens and stamps ``now``).
        self._now = 0.0
        self._instant = 0.0
        self._entry = "check"
        self._limiter = RateLimiter(self._decision_instant)
        self._tokens = TokenBook()
        self._approval = approval_handler
        self._approval_timeout = approval_timeout_s
        self._clock = clock
        self._seq = 0
        self._invoked: Counter[str] = Counter()
        self._completed: Counter[str] = Counter()
        # Content guards are on unless the caller passes its own list (an empty one turns them
        # off); ``guard_state`` keeps their fingerprints across runs.
        self._guards, self._guard_source = self._build_guards(guards, guard_state)
        self._guard_state = guard_state is not None
        self._lock = threading.RLock()
        self._ended = False
        # audit records that failed since the last decision; the next one is denied for them
        self._unaudited: list[str] = []
        # the raw input of the decision being made, when it was not a valid call (recorded)
        self._invalid: tuple[object] | None = None
        # calls ``check`` allowed whose results ``report`` may still bring (oldest dropped first)
        self._checked: OrderedDict[str, ToolCall] = OrderedDict()
        # the last call as the behavioral trace reads it (``_event_inputs``)
        self._inputs: tuple[ToolCall, dict[str, Any], dict[str, Any]] | None = None
        # the trace position (last event) of each of those calls, for its reported output
        self._event_of: dict[str, int] = {}
        if resume is not None:
            if run_id is None:
                raise CallgateError("resuming a run needs its run_id")
            restore(self, resume)
        self._audit = self._open_audit(audit, resumed=resume is not None)

    def _build_guards(self, guards: Sequence[Guard] | GuardSettings | None,
                      state: str | None) -> tuple[tuple[Guard, ...], GuardSettings | str]:
        """The guards, and where they came from as the log records it (replay rebuilds
        guards from the policy or from settings, not from objects a caller made)."""
        if guards is None:
            return tuple(build_guards(self.policy.guards, state_path=state)), "policy"
        if isinstance(guards, GuardSettings):
            return tuple(build_guards(guards, state_path=state)), guards
        return tuple(guards), "objects"

    # -- public API -------------------------------------------------------------------------

    @property
    def run_state(self) -> RunState:
        """Counters, signal window and quarantine of this run."""
        return self._state

    @property
    def taint(self) -> frozenset[str]:
        """Every taint source this run has seen."""
        return self._taint.sources

    @property
    def manifest_hash(self) -> str:
        """The hash of the manifest in force: the policy's tools and those declared in code."""
        return self._registry.manifest_hash

    def check(self, call: ToolCall | Mapping[str, Any]) -> Decision:
        """Decide a call and record it in the run as attempted. Never raises."""
        with self._lock:
            try:
                self._begin("check")
                decision, normalized = self._decide(call)
                if decision.verdict != "deny":
                    decision = self._assume_ran(normalized, decision)
                self._commit(normalized, decision, None)
                if decision.verdict != "deny":
                    self._checked[normalized.id] = normalized
                    self._event_of[normalized.id] = self._behavior.length
                    while len(self._checked) > MAX_AWAITED_RESULTS:
                        dropped, _ = self._checked.popitem(last=False)
                        self._event_of.pop(dropped, None)
                return decision
            except Exception as exc:
                return self._crashed(call, exc)

    def refuse(self, call: ToolCall | Mapping[str, Any], reason: Reason) -> Decision:
        """Deny a call for a reason the host found before asking (an MCP tool whose definition
        changed, an upstream server that is gone): audited, counted and in the trace like any
        deny, with ``reason`` first. Never raises."""
        with self._lock:
            try:
                self._begin("refuse")
                self._seq += 1
                validated = self._validate(call)
                normalized = validated if isinstance(validated, ToolCall) else \
                    self._placeholder(call)
                reasons = (reason,) if isinstance(validated, ToolCall) else (reason, validated)
                decision = self._audit_decision(normalized, _denial(normalized, reasons[0]))
                if len(reasons) > 1 and decision.reasons == (reason,):
                    decision = Decision(verdict="deny", call_id=decision.call_id, reasons=reasons)
                decision = self._settle(normalized, decision, Effects(), attempted=True)
                self._commit(normalized, decision, None)
                return decision
            except Exception as exc:
                return self._crashed(call, exc)

    def report(self, call_id: str, *, status: Status = "ok", output: Any = None,
               error: str | None = None, duration_ms: float = 0.0,
               taint: Sequence[TaintLabel | str] = ()) -> ToolResult:
        """The result of a call ``check`` allowed and the host ran itself (a Claude Code tool).

        Labels the output's taint (the call's boundary, plus ``taint`` the host knows of), lets
        the guards learn from it, and records it in the audit log. Returns the recorded result;
        an output no guard could inspect, or that could not be audited, comes back withheld.
        Raises ``CallgateError`` only for a call id that no allowed ``check`` gave.
        """
        with self._lock:
            call = self._checked.pop(call_id, None)
            seq = self._event_of.pop(call_id, None)
            if call is None:
                raise CallgateError(f"no allowed call {safe_text(call_id)!r} awaits a result")
            try:
                produced = tuple(TaintLabel(source=t, origin=call.tool) if isinstance(t, str)
                                 else t for t in taint)
                result = ToolResult(call_id=call.id, status=status, output=output, error=error,
                                    taint=self._label(call, produced), duration_ms=duration_ms)
                failure = self._observe(call, result)
                if failure is not None:
                    result = _withheld(result, f"guard.observe-failed: {failure}")
                if result.status == "ok":
                    self._completed[call.tool] += 1
                if result.status != "denied":  # a failed tool's output reaches the agent too
                    self._index_output(seq, result, call, produced)
                return self._audit_result(result, produced, "report")
            except Exception as exc:
                why = self._internal_error("report", call_id, exc)
                return ToolResult(call_id=call_id, status="error", error=f"internal.error: {why}")

    def _index_output(self, seq: int | None, result: ToolResult, call: ToolCall,
                      produced: tuple[TaintLabel, ...]) -> None:
        # A reported output joins the value-flow index under its call's event, with the taint
        # it was labelled: an argument later copied from it carries that taint and names it;
        # its provenance is who wrote it (the boundary, the host, the tool's declaration).
        if seq is not None and isinstance(result.output, str):
            self._behavior.attach_output(seq, result.output,
                                         frozenset(label.source for label in result.taint),
                                         source=self._written_by(call, produced),
                                         tool=call.tool)

    def _written_by(self, call: ToolCall, produced: tuple[TaintLabel, ...]) -> frozenset[str]:
        """The labels of whoever wrote a call's output: what the executor or host said, the
        boundary it crossed, and the tool's declared source (not the run's taint)."""
        labels = {label.source for label in produced}
        boundary = CLASS_OUTPUT_TAINT.get(call.tool_class)
        if boundary is not None:
            labels.add(boundary)
        declared = self._outputs.get(call.tool)
        if declared is not None:
            labels |= declared.source
        return frozenset(labels)

    def note(self, action: str, args: Mapping[str, Any], *, output: str | None = None,
             taint: Sequence[str] = ()) -> None:
        """Record an event of the run that is not a tool call (a user's prompt, say).

        It goes into the audit log and the behavioral trace, where statements see it as
        ``action`` with ``args``, ``output`` and ``taint`` (``user-provided`` for what a person
        typed); it adds nothing to the run's taint. Never raises: a failure is logged, on
        record, and makes the next decision a deny, as for any record that cannot be written.
        """
        with self._lock:
            try:
                self._record_system("event", {"action": action, "args": dict(args),
                                              "taint": list(taint), "output": output})
                raw: dict[str, Any] = {"action": action, "args": dict(args), "status": "ok",
                                       "output_source": list(taint)}
                if output is not None:
                    raw["output"] = output
                self._behavior.commit(raw, {}, frozenset(taint))
            except Exception as exc:
                self._unaudited.append(self._internal_error("note", action, exc))

    def open_obligations(self) -> list[Violation]:
        """The obligations the run would break if it ended now; the run goes on.

        ``resp``, ``rslv``, ``eventually`` and ``bresp`` windows not yet answered, as
        ``end_run`` would report them. Never raises (an error is an undecided violation).
        """
        with self._lock:
            try:
                return self._behavior.finish()
            except Exception as exc:
                why = self._internal_error("open_obligations", self.run_id, exc)
                return [Violation(statement="internal.error", enforce="block", events=(),
                                  message=why, kind="unknown")]

    @property
    def trace_length(self) -> int:
        """Events in the run's behavioral trace so far (sequence numbers run from 1)."""
        return self._behavior.length

    def suspend(self) -> bytes:
        """The run's state as bytes, for a kernel in another process (``resume=``) to go on.

        The bytes carry no code and no policy, only what the run accumulated; keep them where
        the agent cannot write and authenticate them (see ``callgate.kernel`` docs).
        """
        with self._lock:
            return snapshot(self)

    def execute(self, call: ToolCall | Mapping[str, Any],
                executor: Executor | None = None) -> ToolResult:
        """Decide, consult the approval handler if needed, then run. Raises ``Denied``."""
        decision, result = self.mediate(call, executor)
        if result is None or result.status == "denied":
            _refuse(decision, result)
        return result

    def mediate(self, call: ToolCall | Mapping[str, Any], executor: Executor | None = None
                ) -> tuple[Decision, ToolResult | None]:
        """Like ``execute`` without raising: the decision, and the result when the call ran.

        A call stopped while running (sandbox, executor protection) comes back with the deny
        that recorded it and the result it produced.
        """
        with self._lock:
            try:
                self._begin("mediate")
                decision, normalized = self._decide(call)
                if decision.verdict == "require-approval":
                    decision = self._account(self._ask_approval(normalized, decision))
                if decision.verdict != "allow":
                    self._commit(normalized, decision, None)
                    return decision, None
                run = executor or self._registry.executor_for(normalized)
                return self._run(normalized, run, decision)
            except Exception as exc:
                return self._crashed(call, exc), None

    def register_executor(self, key: str, executor: Executor) -> None:
        """Route calls of a tool name or tool class to ``executor``."""
        self._registry.route(key, executor)

    def declare_tool(self, name: str, policy: ToolPolicy) -> None:
        """Declare an in-process tool's policy (a policy file's declaration cannot be replaced)."""
        if not self._registry.is_new(name, policy):
            return
        check_declaration(name, policy, None, self._registry.base(policy))
        with self._lock:
            self._registry.add(name, policy)
            # Every later audit event carries the hash of the manifest now in force.
            self._record_system("manifest", {"sha256": self.manifest_hash, "tool": name,
                                             "policy": policy.model_dump(mode="json",
                                                                         by_alias=True)})

    def tool(self, name: str | None = None, *, policy: ToolPolicy | None = None,
             tool_class: str | None = None, action: str = "call") -> Callable[[Any], Any]:
        """Decorator: declare an in-process tool whose every call goes through this kernel."""
        return tool_decorator(self, name, policy, tool_class, action)

    def opened_as_checked(self, tool: str, tool_class: str,
                          parameters: Mapping[str, Any]) -> dict[str, Any]:
        """``parameters`` as a host must hand them to code that may open any string it gets
        (an MCP server, a tool in another process): when the kernel checks this call's paths,
        every path-named or path-shaped string made canonical and absolute against the tool's
        working directory, so a relative ``./x`` cannot be checked here and opened against the
        other process's own directory. Otherwise (no path check applies) as given. A value that
        cannot be made canonical is left as written: the check refuses it."""
        declared = self._registry.get(tool)
        if tool_class not in self._path_classes and (declared is None
                                                     or declared.filesystem is None):
            return dict(parameters)
        roles = declared.path_params if declared is not None else {}
        try:
            return canonical_parameters(parameters, self._registry.base(declared), roles,
                                        shaped=True)
        except PathRejected:
            return dict(parameters)

    def tool_policy(self, name: str) -> ToolPolicy | None:
        """The policy declared for tool ``name`` (in the file or in code), or None."""
        return self._registry.get(name)

    def issue_token(self, tool_class: str, *, actions: list[str] | None = None,
                    constraints: CapabilityConstraints | None = None, ttl_s: float = 300.0,
                    max_uses: int | None = None) -> CapabilityToken:
        """Issue a capability token from the principal's grants; raises ``Denied`` if none.

        Nothing else is raised: an internal error is a denied request with its reason.
        """
        with self._lock:
            try:
                result = self._issue_token(tool_class, actions, constraints, ttl_s, max_uses)
            except Exception as exc:
                why = self._internal_error("issue_token", tool_class, exc)
                self._after_deny(capability=True)
                result = Decision(verdict="deny", reasons=(
                    _deny("internal.error", "capability", why),))
            if isinstance(result, Decision):
                _refuse(result)
            return result

    def register_token(self, token: CapabilityToken) -> None:
        """Make a token produced by ``CapabilityToken.narrow`` usable in calls."""
        with self._lock:
            self._tokens.register(token)

    def run_subprocess(self, tool: str, argv: list[str], *, stdin: bytes | None = None,
                       backend: BackendName = "auto", allow_unconfined: bool = False) -> ToolResult:
        """Run a declared subprocess tool (a ``shell``-class ``exec`` call) in its OS sandbox.

        Raises ``Denied`` when the kernel denies the call or the sandbox stopped it while
        running (then ``Denied.result`` holds its output).
        """
        from callgate.sandbox import probe_ahead
        from callgate.sandbox._executor import SubprocessExecutor

        probe_ahead(backend)  # whether the backend can start here is checked while we decide
        executor = SubprocessExecutor(self._registry.get(tool), working_dir=self.working_dir,
                                      backend=backend, allow_unconfined=allow_unconfined,
                                      stdin=stdin)
        call = {"tool": tool, "tool_class": "shell", "action": "exec",
                "parameters": {"argv": list(argv)}}
        return self.execute(call, executor=executor)

    def end_run(self) -> list[Violation]:
        """Close the run: judge the obligations still open, audit them, record the end.

        Returns the violated statements (``resp``, ``rslv``, ``eventually`` and ``bresp``
        windows never answered); a second call returns an empty list.
        Never raises: statements the monitor could not finish come back undecided
        (``kind="unknown"``), and a store that cannot record the end is logged.
        """
        with self._lock:
            if self._ended:
                return []
            self._ended = True
            try:
                violations = self._behavior.finish()
            except Exception as exc:
                why = self._internal_error("end_run", self.run_id, exc)
                violations = [Violation(statement="internal.error", enforce="block", events=(),
                                        message=why, kind="unknown")]
            for v in violations:
                self._record_system("violation", _violation_json(v))
            self._write("run-end", lambda store: store.end_run(self.run_id))
            return violations

    def close(self) -> None:
        """End the run (if not ended), close the audit store and the guards' store when the
        kernel opened it (``guard_state``). Never raises."""
        self.end_run()
        if self._audit is not None:
            self._write("close", lambda store: store.close())
            self._audit = None
        if self._guard_state and self._guard_source != "objects":
            for fingerprints in stores_of(self._guards):
                try:
                    fingerprints.close()
                except Exception:  # closing must not raise; the store is let go of anyway
                    log.exception("closing the guards' store failed")

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the pipeline -----------------------------------------------------------------------

    def _decide(self, raw: ToolCall | Mapping[str, Any]) -> tuple[Decision, ToolCall]:
        self._seq += 1
        started = self._instant = self._timer()
        attempted, effects = True, _NO_EFFECTS
        resolved: set[str] = set()  # the canonical paths validation makes, for later steps
        try:
            call_or_reason = self._validate(raw, resolved)
            if isinstance(call_or_reason, Reason):
                # an invalid call is denied and counted, but attempts nothing
                decision = Decision(verdict="deny", reasons=(call_or_reason,))
                call, attempted = self._placeholder(raw), False
                self._invalid = (raw,)
            else:
                call = call_or_reason
                decision, effects = self._evaluate(call, started, resolved)
        except Exception as exc:
            why = self._internal_error("decide", f"call {self._seq}", exc)
            decision = Decision(verdict="deny", reasons=(_deny("internal.error", "kernel", why),))
            call, effects = self._placeholder(raw), _NO_EFFECTS
        decision = self._audit_decision(call, decision)
        return self._settle(call, decision, effects, attempted=attempted), call

    def _evaluate(self, call: ToolCall, started: float, resolved: Collection[str] = ()
                  ) -> tuple[Decision, Effects]:
        """The steps in order; the first reason to deny ends the chain. ``resolved``: the
        canonical paths validation made (the path checks do not resolve them again)."""
        effects = _NO_EFFECTS
        late = self._past_deadline(started, "validate")
        if late is not None:
            return _denial(call, late), effects
        for name, step in (("run state", self._step_run_state),
                           ("capability", self._step_capability),
                           ("tool policy", self._step_tool_policy)):
            outcome = step(call, resolved)
            if outcome.effects is not _NO_EFFECTS:
                effects |= outcome.effects
            reason = outcome.reason or self._past_deadline(started, name)
            if reason is not None:
                return _denial(call, reason), effects
        taint = self._taint.input_taint(call)
        reason = self._step_guards(call, taint, started)
        if reason is not None:
            return _denial(call, reason), effects
        decision = self._step_rules(call, taint)
        late = self._past_deadline(started, "rules")
        if decision.verdict == "deny" or late is not None:
            return (decision if late is None else _denial(call, late)), effects
        outcome = self._step_behavior(call, taint)
        effects |= outcome.effects
        if outcome.reason is not None:
            return _denial(call, outcome.reason, outcome.witness), effects
        late = self._past_deadline(started, "behavior")
        return (decision if late is None else _denial(call, late)), effects

    def _past_deadline(self, started: float, step: str) -> Reason | None:
        """A deny once the decision has taken longer than its deadline, else None."""
        elapsed = self._timer() - started
        if elapsed <= self.decision_deadline_s:
            return None
        return _deny("decision.deadline", "deadline",
                     f"the decision took {elapsed:.3g}s, past its deadline of "
                     f"{self.decision_deadline_s:g}s (at the {step} step)")

    def _validate(self, raw: object, resolved: set[str] | None = None) -> ToolCall | Reason:
        return validate(raw, self._stamp(), self._registry, self._path_classes, resolved)

    def _step_run_state(self, call: ToolCall, resolved: Collection[str] = ()) -> Outcome:
        q = self._state.quarantine
        if q is None or (call.tool_class, call.action) in READ_ONLY_ACTIONS:
            return _GO_ON
        return Outcome(_deny("run.quarantined", "run-state", f"run is quarantined "
                             f"({q.rule_id}: {q.reason}); only read-only actions pass"))

    def _step_capability(self, call: ToolCall, resolved: Collection[str] = ()) -> Outcome:
        granted = check_grants(call, self._grants, self.working_dir, self._limiter, resolved)
        if isinstance(granted, Reason):
            return Outcome(granted)
        refusal = self._tokens.refusal(call, self.working_dir, self._clock())
        return Outcome(refusal) if refusal is not None else self._granted[granted]

    def _step_tool_policy(self, call: ToolCall, resolved: Collection[str] = ()) -> Outcome:
        declared = self._registry.get(call.tool)
        if declared is None:
            return _GO_ON
        return Outcome(check_tool(call, declared, self._completed, self._invoked,
                                  self.working_dir, resolved=resolved))

    def _step_guards(self, call: ToolCall, taint: frozenset[str], started: float
                     ) -> Reason | None:
        # Content guards judge what the inputs carry (secrets, exfiltration shapes, injected
        # instructions); they belong with taint, before any rule can allow the call.
        for guard in self._guards:
            reason = guard.check(call, taint) or self._past_deadline(
                started, f"{type(guard).__name__} guard")
            if reason is not None:
                return reason
        return None

    def _step_rules(self, call: ToolCall, taint: frozenset[str]) -> Decision:
        matched = self._rules.first(call, taint)
        if matched is None:
            return Decision(verdict="deny", call_id=call.id, reasons=(_DEFAULT_DENY,))
        return Decision(verdict=matched.decision, call_id=call.id, reasons=matched.reasons)

    def _step_behavior(self, call: ToolCall, taint: frozenset[str]) -> Outcome:
        if self._behavior.idle:
            return _GO_ON
        raw, extra = self._event_inputs(call)
        return self._judge(self._behavior.check(raw, extra, taint))

    def _judge(self, violations: list[Violation]) -> Outcome:
        """The first blocking violation as a reason with its witness; alerts go with it."""
        alerts: list[Violation] = []
        for v in violations:
            if v.kind == "violation" and v.enforce == "alert":
                alerts.append(v)
                continue
            # an undecidable statement fails closed; a quarantine statement stops the run
            why = self._behavior.explain(v)
            order = None
            if v.enforce == "quarantine":
                order = Quarantining(v.statement, why, tuple(v.events))
                why = f"{why}; the run is quarantined"
            return Outcome(_deny(v.statement, "behavioral", why), v.witness(),
                           Effects(quarantine=order, alerts=tuple(alerts)))
        return Outcome(effects=Effects(alerts=tuple(alerts)))

    def _event_inputs(self, call: ToolCall) -> tuple[dict[str, Any], dict[str, Any]]:
        """The call as the behavioral trace reads it, and the arguments the kernel adds; made
        once per call (the check and the commit of one call ask in turn), copies handed out."""
        made = self._inputs
        if made is None or made[0] is not call:
            raw = {"tool": call.tool, "tool_class": call.tool_class, "action": call.action,
                   "parameters": call.parameters}
            made = self._inputs = (call, raw,
                                   call_args(call, self._registry.get(call.tool), self._grants))
        return dict(made[1]), dict(made[2])

    def _commit(self, call: ToolCall, decision: Decision, result: ToolResult | None) -> None:
        """Append the call's events to the behavioral trace with their final status."""
        if self._behavior.idle:
            return
        try:
            raw, extra = self._event_inputs(call)
            if decision.verdict == "deny":
                raw["status"] = "denied"
                extra["denied_by"] = decision.reasons[0].check if decision.reasons else "kernel"
            elif result is not None:
                raw["status"] = result.status
                raw["output_source"] = sorted(self._written_by(call, ()))
                if result.output is not None:
                    raw["output"] = result.output if isinstance(result.output, str) else \
                        repr(result.output)
            self._behavior.commit(raw, extra, self._taint.input_taint(call))
        except Exception as exc:  # the trace stays usable; the failure is on record
            log.error("behavioral trace could not record call %s: %s", call.id, exc)
            self._record_system("behavior-error", {"call_id": call.id,
                                                   "error": error_text(exc)})

    # -- after the decision -----------------------------------------------------------------

    def _audit_decision(self, call: ToolCall, decision: Decision, entry: str | None = None
                        ) -> Decision:
        """``decision`` once it is in the log; if it cannot be, an audited deny saying why."""
        invalid, self._invalid = self._invalid, None
        replay = decision_recording(entry or self._entry, self._now, self._instant,
                                    raw=invalid[0] if invalid else None,
                                    invalid=invalid is not None)
        failure = self._write("decision", lambda store: store.record_decision(
            self.run_id, call, decision, replay=replay))
        if failure is None:
            return decision
        denied = _denial(call, _deny("audit.write-failed", "audit",
                                     f"the decision could not be audited: {failure}"))
        # The deny itself, on a stand-in call any store can encode (the content may have been
        # what failed); if the store cannot write at all, the failure is logged.
        self._write("decision", lambda store: store.record_decision(
            self.run_id, self._placeholder(call, call.id), denied))
        return denied

    def _settle(self, call: ToolCall, decision: Decision, effects: Effects, *,
                attempted: bool = True) -> Decision:
        """Apply the call's effects and move the run state by the final verdict; records that
        fail turn the verdict to deny. The one place effects are applied."""
        self._apply(effects, call.id)
        decision = self._account(decision)
        if attempted:
            self._state.count_attempt(call)
        if decision.verdict == "deny":
            self._after_deny(any(r.check == "capability" for r in decision.reasons))
        else:
            if effects.grant is not None:
                limit = self._grants[effects.grant].constraints.max_calls_per_minute
                if limit is not None:  # only a grant with a limit keeps a window
                    self._limiter.hit(effects.grant, limit)
            self._tokens.use(call)
            self._invoked[call.tool] += 1
        return self._account(decision)

    def _apply(self, effects: Effects, call_id: str | None) -> None:
        """Enter an ordered quarantine and record it, then the alerts."""
        order = effects.quarantine
        if order is not None:
            fresh = self._state.enter_quarantine("behavioral", order.statement, order.why,
                                                 order.events)
            self._record_system("quarantine", fresh.as_payload())
        for alert in effects.alerts:
            payload = _violation_json(alert)
            self._record_system("behavior-alert",
                                payload if call_id is None else {"call_id": call_id, **payload})

    def _account(self, decision: Decision) -> Decision:
        """``decision`` with every audit record that failed since the last one, as a deny."""
        if not self._unaudited:
            return decision
        failed = tuple(_deny("audit.write-failed", "audit", why) for why in self._unaudited)
        self._unaudited.clear()
        return Decision(verdict="deny", call_id=decision.call_id, witness=decision.witness,
                        reasons=(*decision.reasons, *failed))

    def _after_deny(self, capability: bool = False) -> None:
        fresh = self._state.note_denied(capability=capability)
        if fresh is not None:
            self._record_system("quarantine", fresh.as_payload())

    def _assume_ran(self, call: ToolCall, decision: Decision) -> Decision:
        # Deciding without executing (``check``, ``callgate decide``): the call is taken to have
        # run, and its output to carry its boundary's taint, as it would in the real run.
        self._completed[call.tool] += 1
        self._taint.absorb_output(call, self._declared_labels(call, ()))
        failure = self._observe(call, None)
        if failure is None:
            return decision
        # A guard that could not learn from this call cannot vouch for it: deny it.
        self._after_deny()
        return self._account(Decision(verdict="deny", call_id=call.id, reasons=(
            *decision.reasons, _deny("guard.observe-failed", "guard", failure))))

    def _observe(self, call: ToolCall, result: ToolResult | None) -> str | None:
        """Let every guard learn from the call; the failures, as one message, or None."""
        failures = []
        for guard in self._guards:
            try:
                guard.observe(call, result)
            except Exception as exc:
                failures.append(self._internal_error(
                    f"{type(guard).__name__}.observe", call.id, exc))
        return "; ".join(failures) or None

    def _label(self, call: ToolCall, produced: tuple[TaintLabel, ...]) -> tuple[TaintLabel, ...]:
        labels = tuple(self._taint.output_labels(call, self._declared_labels(call, produced)))
        self._taint.absorb(labels)
        return labels

    def _declared_labels(self, call: ToolCall, produced: tuple[TaintLabel, ...]
                         ) -> tuple[TaintLabel, ...]:
        """``produced`` and the labels of the tool's declared output source."""
        declared = self._outputs.get(call.tool)
        if declared is None:
            return produced
        return (*produced, *(TaintLabel(source=s, origin=call.tool)
                             for s in sorted(declared.source)))

    def _ask_approval(self, call: ToolCall, decision: Decision) -> Decision:
        answer = ask(self._approval, call, decision, self._approval_timeout)
        self._record_system("approval", {"call_id": call.id, "granted": answer.granted,
                                         "reason": answer.why})
        if answer.granted:
            return Decision(verdict="allow", call_id=call.id, reasons=(
                *decision.reasons, _deny("approval.granted", "approval", answer.why)))
        self._after_deny()
        return Decision(verdict="deny", call_id=call.id, reasons=(
            *decision.reasons, _deny("approval.denied", "approval", answer.why)))

    def _run(self, call: ToolCall, run: Executor, decision: Decision
             ) -> tuple[Decision, ToolResult]:
        started = time.perf_counter()
        status: Status
        try:
            output, status, error = run(call), "ok", None
        except Exception as exc:
            output, status, error = None, "error", error_text(exc)
        produced = output.taint if isinstance(output, ToolResult) else ()
        if isinstance(output, ToolResult):
            output, status, error = output.output, output.status, output.error
        labels = self._label(call, tuple(produced))
        result = ToolResult(call_id=call.id, status=status, output=output, error=error,
                            taint=labels, duration_ms=(time.perf_counter() - started) * 1000)
        failure = self._observe(call, result)
        if failure is not None:  # what no guard could inspect is not handed back
            result = _withheld(result, f"guard.observe-failed: {failure}")
        result = self._audit_result(result, tuple(produced), "run")
        if result.status == "ok":
            self._completed[call.tool] += 1
        if result.status == "denied":
            decision = self._stopped_while_running(call, result)
        self._commit(call, decision, result)
        return decision, result

    def _audit_result(self, result: ToolResult, produced: tuple[TaintLabel, ...] = (),
                      entry: str = "run") -> ToolResult:
        """``result`` once it is in the log; if it cannot be, an error result without output.

        Beside it the labels the executor or host gave (``produced``), which replay hands back.
        """
        replay = {"entry": entry, "produced": [label.model_dump(mode="json")
                                               for label in produced]}
        failure = self._write("result", lambda store: store.record_result(
            self.run_id, result, replay=replay))
        if failure is None:
            return result
        withheld = _withheld(result, f"audit.write-failed: the result could not be audited "
                                     f"({failure}); its output is withheld")
        self._write("result", lambda store: store.record_result(self.run_id, withheld))
        return withheld

    def _stopped_while_running(self, call: ToolCall, result: ToolResult) -> Decision:
        # The sandbox or an executor's own protection stopped the call: that is a denial, audited
        # and counted like any other, not a successful call with an error string.
        decision = _denial(call, stop_reason(result))
        decision = self._audit_decision(call, decision, "stopped")
        self._after_deny()
        return self._account(decision)

    # -- capability tokens --------------------------------------------------------------------

    def _issue_token(self, tool_class: str, actions: list[str] | None,
                     constraints: CapabilityConstraints | None, ttl_s: float,
                     max_uses: int | None) -> CapabilityToken | Decision:
        """The token, or the audited deny of the request (a behavioral statement, a
        quarantined run or a class the principal holds no grant for)."""
        self._state.counters.capability_requests += 1
        event: dict[str, Any] = {"action": "capability_request",
                                 "args": {"requested_class": tool_class,
                                          "class_risk": CLASS_RISK.get(tool_class, 0)}}
        outcome = self._judge(self._behavior.check(event, {}, self._taint.sources))
        result: CapabilityToken | Reason
        if outcome.reason is not None:
            result = outcome.reason.model_copy(update={"check": "capability"})
        elif self._state.quarantined:
            result = _deny("capability.token-denied", "capability",
                           "the run is quarantined: no capability is issued")
        else:
            issued = issue_token(self._principal, self._grants, tool_class, actions=actions,
                                 constraints=constraints, ttl_s=ttl_s, max_uses=max_uses,
                                 now=self._clock())
            result = issued if not isinstance(issued, str) else _deny(
                "capability.token-denied", "capability", issued)
        event["status"] = "denied" if isinstance(result, Reason) else "ok"
        self._behavior.commit(event, {}, self._taint.sources)
        self._apply(outcome.effects, None)
        if isinstance(result, Reason):
            self._record_system("capability-denied", {"tool_class": tool_class,
                                                      "reason": result.message})
            self._after_deny(capability=True)
            return Decision(verdict="deny", reasons=(result,))
        self._tokens.add(result)
        self._record_system("capability-issued", {"tool_class": tool_class})
        return result

    # -- audit and failures -----------------------------------------------------------------

    def _begin(self, entry: str) -> None:
        """A new call comes in by ``entry``: read the wall clock once for its whole decision
        (``_decide`` takes the instant when it starts the deadline)."""
        self._entry = entry
        self._now = self._clock()
        self._invalid = None

    def _decision_instant(self) -> float:
        return self._instant

    def _stamp(self, sequence: int | None = None) -> Stamp:
        return Stamp(self.run_id, self._seq if sequence is None else sequence, self._principal,
                     self._now)

    def _placeholder(self, raw: object, call_id: str | None = None) -> ToolCall:
        """A stand-in for ``raw`` at the current sequence, on the kernel's clock."""
        return placeholder(raw, self._stamp(), call_id)

    def _record_system(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Append a system record; a failure is logged and kept for the next decision."""
        failure = self._write(kind, lambda store: store.record_system(self.run_id, kind, payload))
        if failure is not None:
            self._unaudited.append(f"the {kind} record could not be audited: {failure}")

    def _write(self, what: str, op: Callable[[AuditLog], object]) -> str | None:
        """Run one write on the audit store; never raises: the failure, or None."""
        if self._audit is None:
            return None
        try:
            op(self._audit)
        except Exception as exc:
            failure = error_text(exc)
            log.error("audit %s write failed: %s", what, failure)
            return failure
        return None

    def _internal_error(self, where: str, subject: str, exc: Exception) -> str:
        """Log an unexpected exception, put it on record, and return it as a sentence."""
        why = error_text(exc)
        log.error("internal error in %s (%s): %s", where, subject, why, exc_info=exc)
        self._record_system("kernel-error", {"where": where, "subject": safe_text(subject),
                                             "error": why})
        return why

    def _crashed(self, raw: object, exc: Exception) -> Decision:
        """The last resort of a public entry point: an audited, counted deny; never raises."""
        try:
            why = self._internal_error("kernel", f"call {self._seq}", exc)
            call = self._placeholder(raw)
            decision = self._audit_decision(call, _denial(call, _deny(
                "internal.error", "kernel", why)))
            self._after_deny()
            return self._account(decision)
        except Exception as again:  # pragma: no cover - the stand-ins above cannot fail
            log.critical("kernel failure while denying: %s", again, exc_info=again)
            return Decision(verdict="deny", reasons=(
                _deny("internal.error", "kernel", error_text(exc)),))

    def _recording(self) -> dict[str, Any]:
        return run_recording(self.policy, deadline_s=self.decision_deadline_s,
                             guards=self._guard_source, persistent_guards=self._guard_state)

    def _open_audit(self, audit: str | os.PathLike[str] | AuditLog | None, *,
                    resumed: bool = False) -> AuditLog | None:
        if audit is None:
            return None
        try:
            if isinstance(audit, str | os.PathLike):
                from callgate.audit import open_store
                store = open_store(audit)
            else:
                store = audit
            if resumed:
                store.record_system(self.run_id, "run-resumed", {
                    "manifest_hash": self.manifest_hash, "calls": self._seq,
                    "policy_sha256": self._recording()["policy_sha256"]})
            else:
                store.start_run(self.run_id, principal=self._principal,
                                policy_name=self.policy.name, manifest_hash=self.manifest_hash,
                                config={"policy": self.policy.name,
                                        "working_dir": self.working_dir,
                                        "replay": self._recording()})
            known = guard_state_recording(self._guards) if self._guard_state else None
            if known is not None:  # what the guards knew before this process's first call
                store.record_system(self.run_id, "guard-state", known)
        except CallgateError:
            raise
        except Exception as exc:  # a foreign error (a path it cannot encode, …) at the boundary
            raise AuditError(f"cannot start the run in the audit log: {error_text(exc)}"
                             ) from exc
        return store


def stop_reason(result: ToolResult) -> Reason:
    """The reason of a call stopped while running, from its result.

    The executor protocol (``callgate.executors``, ``callgate.sandbox``): a stopped call's
    result has ``status="denied"`` and an error ``"<reason id>: <message>"``; this is the one
    place that text is read back.
    """
    text = result.error or "executor.denied: stopped while running"
    rid, _, message = text.partition(": ")
    check = "sandbox" if rid.startswith("sandbox.") else "executor"
    return Reason(id=rid, check=check, message=message or rid)


def _refuse_escaping_roots(policy: Policy, working_dir: str) -> None:
    """Every declared root must stay where it was written, also for policies built in code."""
    found = root_problems(policy, working_dir)
    if found:
        raise PolicyError([Problem(why, "<policy>", field=".".join(str(p) for p in where))
                           for where, why in found])


def _violation_json(v: Violation) -> dict[str, Any]:
    return {"statement": v.statement, "enforce": v.enforce, "events": list(v.events),
            "message": v.message, "kind": v.kind}


def _withheld(result: ToolResult, error: str) -> ToolResult:
    """``result`` without its output, as an error (a stop while running stays one)."""
    status = "denied" if result.status == "denied" else "error"
    return result.model_copy(update={"status": status, "output": None, "error": error})

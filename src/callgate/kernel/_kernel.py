"""The kernel: one fail-closed pipeline that every tool call passes, in a fixed order.

    validate → run state → capability → tool policy → taint → rules → behavior
    → audit decision → (approval) → execute → label output → audit result → run state

The order is a security property: nothing executes before its decision is in the audit log, and
a quarantined run is stopped before any grant or rule is consulted. Each step returns ``None``
(go on) or a ``Reason`` (stop with deny); only the rules step can produce another verdict.
Between the steps the decision's deadline is checked; passing it is a deny.

Nothing but ``Denied`` leaves the public entry points: an error in a step, in the audit store
(a second writer, a full disk, content it cannot encode) or in a guard becomes a deny or an error
result with its reason, logged, and recorded as far as the store still can.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from callgate._errors import AuditError, CallgateError, Denied, PolicyError, Problem
from callgate._model import Decision, Reason, TaintLabel, ToolCall, ToolResult
from callgate.audit import AuditStore
from callgate.guards import Guard, build_guards
from callgate.kernel._behavior import (
    CLASS_RISK,
    RunBehavior,
    call_args,
    compile_for,
    descriptions_for,
)
from callgate.kernel._capabilities import CapabilityToken, RateLimiter, check_grants, issue_token
from callgate.kernel._declare import check_declaration, tool_decorator
from callgate.kernel._rules import RuleSet
from callgate.kernel._runstate import READ_ONLY_ACTIONS, Quarantine, RunState
from callgate.kernel._taint import TaintTracker
from callgate.kernel._toolpolicy import check_stance, check_usage
from callgate.matchers._paths import PathRejected, canonical_parameters
from callgate.policy._manifest import build_manifest, manifest_hash
from callgate.policy._roots import root_problems
from callgate.policy._schema import CapabilityConstraints, Policy, ToolPolicy
from callgate.sandbox import BackendName
from callgate.sandbox._executor import SubprocessExecutor
from callgate.temporal import Violation

log = logging.getLogger("callgate")

ApprovalHandler = Callable[[ToolCall, Decision], bool]


Executor = Callable[[ToolCall], Any]

MAX_PARAMETER_BYTES = 1 << 20
MAX_PARAMETER_DEPTH = 32
#: Seconds a decision (validation to behavior) may take before it is a deny.
DEFAULT_DECISION_DEADLINE_S = 5.0
#: Characters of an error message or stand-in text kept in reasons and audit records.
MAX_ERROR_CHARS = 2048


def _deny(reason_id: str, check: str, message: str) -> Reason:
    return Reason(id=reason_id, check=check, message=message)


def _denial(call: ToolCall, reason: Reason) -> Decision:
    return Decision(verdict="deny", reasons=(reason,), call_id=call.id)


_SCALARS = (str, int, float, bool, type(None))


def _measure(value: Any) -> tuple[int, int, bool]:
    """(approximate size in bytes, nesting depth, whether every string is Unicode text) of a
    JSON-like value; stops when too deep or too large."""
    if type(value) is dict and all(type(v) in _SCALARS for v in value.values()):
        # the common case, a flat mapping of scalars, without the general walk
        return (sum(len(str(k)) + (len(v) if type(v) is str else 8) for k, v in value.items()),
                1, all(_is_text(k) and (type(v) is not str or _is_text(v))
                       for k, v in value.items() if type(k) is str))
    size, depth, text = 0, 0, True
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            size, text = size + len(item) + 2, text and _is_text(item)
            continue
        depth = max(depth, level)
        if level > MAX_PARAMETER_DEPTH or size > MAX_PARAMETER_BYTES:
            break
        if isinstance(item, Mapping):
            size += 2
            for key, inner in item.items():
                size += len(key) + 3 if isinstance(key, str) else 8
                text = text and (not isinstance(key, str) or _is_text(key))
                stack.append((inner, level + 1))
        elif isinstance(item, list | tuple):
            size += 2
            stack.extend((inner, level + 1) for inner in item)
        else:
            size += 8
    return size, depth, text


def _is_text(value: str) -> bool:
    """False for a string holding a lone surrogate: not Unicode text, so no pattern engine
    (RE2 takes UTF-8) and no log can judge or record it faithfully."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Kernel:
    """Mediates every tool call of one agent run. Thread-safe: calls are decided one at a time.

    ``policy`` is a ``Policy`` (or anything with a ``.policy`` attribute, such as a loaded file);
    ``working_dir`` defaults to the policy's ``working_dir``, then the current directory.
    ``guards`` defaults to the content guards the policy's ``guards`` section configures (all on
    when it is absent); ``guard_state`` is a SQLite file where they remember secrets across runs.
    ``decision_deadline_s`` bounds each decision, measured on ``timer`` (monotonic seconds).
    """

    def __init__(self, policy: Policy | Any, *, audit: str | os.PathLike[str] | AuditStore | None
                 = None, working_dir: str | os.PathLike[str] | None = None,
                 approval_handler: ApprovalHandler | None = None, approval_timeout_s: float = 60.0,
                 run_id: str | None = None, clock: Callable[[], float] = time.time,
                 guards: Sequence[Guard] | None = None, guard_state: str | None = None,
                 decision_deadline_s: float = DEFAULT_DECISION_DEADLINE_S,
                 timer: Callable[[], float] = time.monotonic) -> None:
        if not decision_deadline_s > 0:
            raise CallgateError(f"decision_deadline_s must be a positive number of seconds, "
                                f"not {decision_deadline_s!r}")
        self.decision_deadline_s = float(decision_deadline_s)
        self._timer = timer
        self.policy: Policy = policy if isinstance(policy, Policy) else policy.policy
        wd = working_dir or self.policy.working_dir or os.getcwd()
        self.working_dir = os.path.realpath(os.fspath(wd))
        if not _is_text(self.working_dir):
            raise CallgateError(f"working directory {_safe_text(self.working_dir)} is not a "
                                f"UTF-8 path; paths below it could not be checked")
        _refuse_escaping_roots(self.policy, self.working_dir)
        self.run_id = run_id or "run_" + uuid.uuid4().hex
        self._principal = self.policy.principal.name if self.policy.principal else "anonymous"
        self._grants = self.policy.principal.capabilities if self.policy.principal else ()
        self._tools: dict[str, ToolPolicy] = dict(self.policy.tools)
        # classes whose grants constrain paths: their calls' paths are made canonical too
        self._path_classes = frozenset(g.tool_class for g in self._grants
                                       if g.constraints.allowed_paths is not None)
        self._rules = RuleSet(self.policy.rules)
        self._taint = TaintTracker()
        settings = self.policy.run_state
        self._state = RunState(quarantine_after=settings.quarantine_after_denials)
        self._behavior = RunBehavior(
            compile_for(self.policy, None if isinstance(policy, Policy) else policy),
            working_dir=self.working_dir, descriptions=descriptions_for(self.policy))
        self._limiter = RateLimiter()
        self._tokens: dict[str, CapabilityToken] = {}
        self._approval = approval_handler
        self._approval_timeout = approval_timeout_s
        self._clock = clock
        self._seq = 0
        self._invoked: Counter[str] = Counter()
        self._completed: Counter[str] = Counter()
        self._executors: dict[str, Executor] = {}
        # Content guards are on unless the caller passes its own list (an empty one turns them
        # off); ``guard_state`` keeps their fingerprints across runs.
        self._guards = tuple(guards) if guards is not None else tuple(
            build_guards(self.policy.guards, state_path=guard_state))
        self._lock = threading.RLock()
        self._ended = False
        self._pending_grant: int | None = None
        self._pending_quarantine: Quarantine | None = None
        self._pending_alerts: list[Violation] = []
        # audit records that failed since the last decision; the next one is denied for them
        self._unaudited: list[str] = []
        self._blocked_by: str | None = None
        self.manifest_hash = manifest_hash(build_manifest(self.policy, self._tools))
        self._audit = self._open_audit(audit)

    # -- public API -------------------------------------------------------------------------

    @property
    def run_state(self) -> RunState:
        """Counters, signal window and quarantine of this run."""
        return self._state

    @property
    def taint(self) -> frozenset[str]:
        """Every taint source this run has seen."""
        return self._taint.sources

    def check(self, call: ToolCall | Mapping[str, Any]) -> Decision:
        """Decide a call and record it in the run as attempted. Never raises."""
        with self._lock:
            try:
                decision, normalized = self._decide(call)
                if decision.verdict != "deny":
                    decision = self._assume_ran(normalized, decision)
                self._commit(normalized, decision, None)
                return decision
            except Exception as exc:
                return self._crashed(call, exc)

    def execute(self, call: ToolCall | Mapping[str, Any],
                executor: Executor | None = None) -> ToolResult:
        """Decide, consult the approval handler if needed, then run. Raises ``Denied``."""
        decision, result = self.mediate(call, executor)
        if result is None or result.status == "denied":
            raise Denied(decision, result)
        return result

    def mediate(self, call: ToolCall | Mapping[str, Any], executor: Executor | None = None
                ) -> tuple[Decision, ToolResult | None]:
        """Like ``execute`` without raising: the decision, and the result when the call ran.

        A call stopped while running (sandbox, executor protection) comes back with the deny
        that recorded it and the result it produced.
        """
        try:
            return self._mediate(call, executor)
        except Denied as denied:
            return denied.decision, denied.result
        except Exception as exc:
            with self._lock:
                return self._crashed(call, exc), None

    def _mediate(self, call: ToolCall | Mapping[str, Any], executor: Executor | None
                 ) -> tuple[Decision, ToolResult | None]:
        with self._lock:
            decision, normalized = self._decide(call)
            if decision.verdict == "require-approval":
                decision = self._account(self._ask_approval(normalized, decision))
            if decision.verdict != "allow":
                self._commit(normalized, decision, None)
                raise Denied(decision)
            return decision, self._run(normalized, executor or self._executor_for(normalized),
                                       decision)

    def register_executor(self, key: str, executor: Executor) -> None:
        """Route calls of a tool name or tool class to ``executor``."""
        self._executors[key] = executor

    def declare_tool(self, name: str, policy: ToolPolicy) -> None:
        """Declare an in-process tool's policy (a policy file's declaration cannot be replaced)."""
        if name in self.policy.tools and self.policy.tools[name] != policy:
            raise CallgateError(f"tool {name!r} is already declared by the policy file")
        if self._tools.get(name) == policy:
            return
        check_declaration(name, policy, None, self._tool_base(policy))
        with self._lock:
            self._tools[name] = policy
            # Every later audit event carries the hash of the manifest now in force.
            self.manifest_hash = manifest_hash(build_manifest(self.policy, self._tools))
            self._record_system("manifest", {"sha256": self.manifest_hash})

    def tool(self, name: str | None = None, *, policy: ToolPolicy | None = None,
             tool_class: str | None = None, action: str = "call") -> Callable[[Any], Any]:
        """Decorator: declare an in-process tool whose every call goes through this kernel."""
        return tool_decorator(self, name, policy, tool_class, action)

    def tool_policy(self, name: str) -> ToolPolicy | None:
        return self._tools.get(name)

    def issue_token(self, tool_class: str, *, actions: list[str] | None = None,
                    constraints: CapabilityConstraints | None = None, ttl_s: float = 300.0,
                    max_uses: int | None = None) -> CapabilityToken:
        """Issue a capability token from the principal's grants; raises ``Denied`` if none.

        Nothing else is raised: an internal error is a denied request with its reason.
        """
        with self._lock:
            try:
                return self._issue_token(tool_class, actions, constraints, ttl_s, max_uses)
            except Denied:
                raise
            except Exception as exc:
                why = self._internal_error("issue_token", tool_class, exc)
                self._after_deny(capability=True)
                raise Denied(Decision(verdict="deny", reasons=(
                    _deny("internal.error", "capability", why),))) from exc

    def _issue_token(self, tool_class: str, actions: list[str] | None,
                     constraints: CapabilityConstraints | None, ttl_s: float,
                     max_uses: int | None) -> CapabilityToken:
        self._state.counters.capability_requests += 1
        event = {"action": "capability_request",
                 "args": {"requested_class": tool_class,
                          "class_risk": CLASS_RISK.get(tool_class, 0)}}
        blocked = self._enforce_request(event)
        result: CapabilityToken | str
        if blocked is not None:
            result = blocked
        elif self._state.quarantined:
            result = "the run is quarantined: no capability is issued"
        else:
            result = issue_token(self._principal, self._grants, tool_class,
                                 actions=actions, constraints=constraints, ttl_s=ttl_s,
                                 max_uses=max_uses, now=self._clock())
        event["status"] = "denied" if isinstance(result, str) else "ok"
        self._behavior.commit(event, {}, self._taint.sources)
        if self._pending_quarantine is not None:
            self._record_system("quarantine", self._pending_quarantine.as_payload())
            self._pending_quarantine = None
        if isinstance(result, str):
            rid = self._blocked_by or "capability.token-denied"
            decision = Decision(verdict="deny", reasons=(_deny(rid, "capability", result),))
            self._record_system("capability-denied", {"tool_class": tool_class,
                                                      "reason": result})
            self._after_deny(capability=True)
            raise Denied(decision)
        self._tokens[result.id] = result
        return result

    def register_token(self, token: CapabilityToken) -> None:
        """Make a token produced by ``CapabilityToken.narrow`` usable in calls."""
        with self._lock:
            root: CapabilityToken | None = token
            while root is not None and root.parent is not None:
                root = root.parent
            if root is None or root.id not in self._tokens:
                raise CallgateError("token was not issued by this kernel")
            self._tokens[token.id] = token

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
        """End the run (if not ended) and close the audit store. Never raises."""
        self.end_run()
        if self._audit is not None:
            self._write("close", lambda store: store.close())
            self._audit = None

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the pipeline -----------------------------------------------------------------------

    def _decide(self, raw: ToolCall | Mapping[str, Any]) -> tuple[Decision, ToolCall]:
        self._seq += 1
        started = self._timer()
        attempted = True
        try:
            call_or_reason = self._validate(raw)
            if isinstance(call_or_reason, Reason):
                # an invalid call is denied and counted, but attempts nothing
                decision = Decision(verdict="deny", reasons=(call_or_reason,))
                call, attempted = _placeholder(raw, self), False
            else:
                call = call_or_reason
                decision = self._evaluate(call, started)
        except Exception as exc:
            why = self._internal_error("decide", f"call {self._seq}", exc)
            decision = Decision(verdict="deny", reasons=(_deny("internal.error", "kernel", why),))
            call = _placeholder(raw, self)
        decision = self._audit_decision(call, decision)
        return self._settle(call, decision, attempted=attempted), call

    def _evaluate(self, call: ToolCall, started: float) -> Decision:
        reason = self._past_deadline(started, "validate")
        for step in (self._step_run_state, self._step_capability, self._step_tool_policy):
            if reason is not None:
                return _denial(call, reason)
            reason = step(call) or self._past_deadline(started, step.__name__[len("_step_"):])
        taint = self._step_taint(call)
        reason = reason or self._step_guards(call, taint, started)
        if reason is not None:
            return _denial(call, reason)
        decision = self._step_rules(call, taint)
        late = self._past_deadline(started, "rules")
        if decision.verdict == "deny" or late is not None:
            return decision if late is None else _denial(call, late)
        behavior = self._step_behavior(call, taint)  # a deny, or None
        late = None if behavior is not None else self._past_deadline(started, "behavior")
        return behavior or (decision if late is None else _denial(call, late))

    def _past_deadline(self, started: float, step: str) -> Reason | None:
        """A deny once the decision has taken longer than its deadline, else None."""
        elapsed = self._timer() - started
        if elapsed <= self.decision_deadline_s:
            return None
        return _deny("decision.deadline", "deadline",
                     f"the decision took {elapsed:.3g}s, past its deadline of "
                     f"{self.decision_deadline_s:g}s (at the {step} step)")

    def _validate(self, raw: ToolCall | Mapping[str, Any]) -> ToolCall | Reason:
        if not isinstance(raw, ToolCall | Mapping):
            return _deny("input.invalid", "validate",
                         f"a call must be a mapping, not {type(raw).__name__}")
        data = raw.model_dump() if isinstance(raw, ToolCall) else dict(raw)
        declared = self._tools.get(str(data.get("tool", "")))
        if "tool_class" not in data and declared is not None and declared.tool_class:
            data["tool_class"] = declared.tool_class
        size, depth, text = _measure(data.get("parameters", {}))
        if not text:
            return _deny("input.invalid", "validate", "parameters hold a lone surrogate (text "
                         "that is not Unicode, such as an undecodable file name)")
        if size > MAX_PARAMETER_BYTES:
            return _deny("input.too-large", "validate",
                         f"parameters are {size} bytes, over the limit of {MAX_PARAMETER_BYTES}")
        if depth > MAX_PARAMETER_DEPTH:
            return _deny("input.too-deep", "validate",
                         f"parameters nest deeper than {MAX_PARAMETER_DEPTH} levels")
        data.update(id=f"{self.run_id}:{self._seq}", run_id=self.run_id, sequence=self._seq,
                    timestamp=_now_iso(self._clock()), principal=self._principal)
        try:
            call = ToolCall.model_validate(data)
        except ValidationError as exc:
            return _deny("input.invalid", "validate", _validation_message(exc))
        return self._canonicalise(call)

    def _canonicalise(self, call: ToolCall) -> ToolCall | Reason:
        # One canonical path feeds both the checks and the executor: what is checked is what runs.
        declared = self._tools.get(call.tool)
        if call.tool_class != "file" and call.tool_class not in self._path_classes and (
                declared is None or declared.filesystem is None):
            return call
        extra = declared.path_params if declared is not None else ()
        base = self._tool_base(declared) if declared is not None else self.working_dir
        try:
            params = canonical_parameters(call.parameters, base, extra)
        except PathRejected as exc:
            return _deny("path.rejected", "validate", str(exc))
        return call.model_copy(update={"parameters": params})

    def _tool_base(self, declared: ToolPolicy) -> str:
        """The directory a tool's relative paths mean: its own working_dir, under the kernel's."""
        if not declared.working_dir:
            return self.working_dir
        return os.path.normpath(os.path.join(self.working_dir, declared.working_dir))

    def _step_run_state(self, call: ToolCall) -> Reason | None:
        q = self._state.quarantine
        if q is None or (call.tool_class, call.action) in READ_ONLY_ACTIONS:
            return None
        return _deny("run.quarantined", "run-state",
                     f"run is quarantined ({q.rule_id}: {q.reason}); only read-only actions pass")

    def _step_capability(self, call: ToolCall) -> Reason | None:
        index, why = check_grants(call, self._grants, self.working_dir, self._limiter)
        if index is None:
            rid = "capability.missing" if why.startswith("no capability") else \
                "capability.constraint"
            return _deny(rid, "capability", why)
        if call.token is not None:
            token = self._tokens.get(call.token)
            refusal = ("unknown capability token" if token is None
                       else token.admits(call, self.working_dir, self._clock()))
            if refusal:
                return _deny("capability.token", "capability", refusal)
        self._pending_grant = index
        return None

    def _step_tool_policy(self, call: ToolCall) -> Reason | None:
        declared = self._tools.get(call.tool)
        if declared is None:
            return None
        found = check_usage(call, declared, self._completed, self._invoked) or check_stance(
            call, declared, self.working_dir)
        return None if found is None else _deny(found[0], "tool-policy", found[1])

    def _step_taint(self, call: ToolCall) -> frozenset[str]:
        return self._taint.input_taint(call)

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
        rule = self._rules.first_match(call, taint)
        if rule is None:
            return Decision(verdict="deny", call_id=call.id, reasons=(
                _deny("default-deny", "rules", "no rule allows this call (deny by default)"),))
        return Decision(verdict=rule.decision, call_id=call.id, reasons=(
            Reason(id=rule.id, check="rule", message=rule.reason or rule.decision),))

    def _step_behavior(self, call: ToolCall, taint: frozenset[str]) -> Decision | None:
        if self._behavior.idle:
            return None
        raw, extra = self._event_inputs(call)
        violations = self._behavior.check(raw, extra, taint)
        return self._enforce(call, violations)

    def _enforce(self, call: ToolCall, violations: list[Violation]) -> Decision | None:
        """The first blocking violation as a deny with its witness; alerts are kept for later."""
        for v in violations:
            if v.kind == "violation" and v.enforce == "alert":
                self._pending_alerts.append(v)
                continue
            # an undecidable statement fails closed; a quarantine statement stops the run
            why = self._behavior.explain(v)
            if v.enforce == "quarantine":
                self._pending_quarantine = self._state.enter_quarantine(
                    "behavioral", v.statement, why, v.events)
            reason = why if v.enforce != "quarantine" else f"{why}; the run is quarantined"
            return Decision(verdict="deny", call_id=call.id, witness=v.witness(), reasons=(
                _deny(v.statement, "behavioral", reason),))
        return None

    def _enforce_request(self, event: dict[str, Any]) -> str | None:
        """Behavioral statements on a capability request: the refusal, or None."""
        self._blocked_by = None
        for v in self._behavior.check(event, {}, self._taint.sources):
            if v.kind == "violation" and v.enforce == "alert":
                self._record_system("behavior-alert", _violation_json(v))
                continue
            why = self._behavior.explain(v)
            if v.enforce == "quarantine":
                self._pending_quarantine = self._state.enter_quarantine(
                    "behavioral", v.statement, why, v.events)
            self._blocked_by = v.statement
            return f"{why}; the run is quarantined" if v.enforce == "quarantine" else why
        return None

    def _event_inputs(self, call: ToolCall) -> tuple[dict[str, Any], dict[str, Any]]:
        raw = {"tool": call.tool, "tool_class": call.tool_class, "action": call.action,
               "parameters": call.parameters}
        return raw, call_args(call, self._tools.get(call.tool), self._grants)

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
                if result.output is not None:
                    raw["output"] = result.output if isinstance(result.output, str) else \
                        repr(result.output)
            self._behavior.commit(raw, extra, self._taint.input_taint(call))
        except Exception as exc:  # the trace stays usable; the failure is on record
            log.error("behavioral trace could not record call %s: %s", call.id, exc)
            self._record_system("behavior-error", {"call_id": call.id,
                                                   "error": _error_text(exc)})

    # -- after the decision -----------------------------------------------------------------

    def _audit_decision(self, call: ToolCall, decision: Decision) -> Decision:
        """``decision`` once it is in the log; if it cannot be, an audited deny saying why."""
        failure = self._write("decision", lambda store: store.record_decision(
            self.run_id, call, decision))
        if failure is None:
            return decision
        denied = _denial(call, _deny("audit.write-failed", "audit",
                                     f"the decision could not be audited: {failure}"))
        # The deny itself, on a stand-in call any store can encode (the content may have been
        # what failed); if the store cannot write at all, the failure is logged.
        self._write("decision", lambda store: store.record_decision(
            self.run_id, _placeholder(call, self, call.id), denied))
        return denied

    def _settle(self, call: ToolCall, decision: Decision, *, attempted: bool = True
                ) -> Decision:
        """Move the run state by the final verdict; records that fail turn the verdict to deny."""
        self._record_pending(call)
        decision = self._account(decision)
        if attempted:
            self._state.count_attempt(call)
        if decision.verdict == "deny":
            self._after_deny(any(r.check == "capability" for r in decision.reasons))
        else:
            if self._pending_grant is not None:
                self._limiter.hit(self._pending_grant)
            if call.token is not None and call.token in self._tokens:
                self._tokens[call.token].use()
            self._invoked[call.tool] += 1
        self._pending_grant = None
        return self._account(decision)

    def _record_pending(self, call: ToolCall) -> None:
        if self._pending_quarantine is not None:
            self._record_system("quarantine", self._pending_quarantine.as_payload())
            self._pending_quarantine = None
        for alert in self._pending_alerts:
            self._record_system("behavior-alert", {"call_id": call.id, **_violation_json(alert)})
        self._pending_alerts = []

    def _account(self, decision: Decision) -> Decision:
        """``decision`` with every audit record that failed since the last one, as a deny."""
        if not self._unaudited:
            return decision
        failed = tuple(_deny("audit.write-failed", "audit", why) for why in self._unaudited)
        self._unaudited.clear()
        return Decision(verdict="deny", call_id=decision.call_id, witness=decision.witness,
                        reasons=(*decision.reasons, *failed))

    def _after_deny(self, capability: bool = False) -> None:
        fresh: Quarantine | None = self._state.note_denied(capability=capability)
        if fresh is not None:
            self._record_system("quarantine", fresh.as_payload())

    def _assume_ran(self, call: ToolCall, decision: Decision) -> Decision:
        # Deciding without executing (``check``, ``callgate decide``): the call is taken to have
        # run, and its output to carry its boundary's taint, as it would in the real run.
        self._completed[call.tool] += 1
        self._label(call, ())
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
        labels = tuple(self._taint.output_labels(call, produced))
        self._taint.absorb(labels)
        return labels

    def _ask_approval(self, call: ToolCall, decision: Decision) -> Decision:
        granted, why = _ask(self._approval, call, decision, self._approval_timeout)
        self._record_system("approval", {"call_id": call.id, "granted": granted, "reason": why})
        if granted:
            return Decision(verdict="allow", call_id=call.id, reasons=(
                *decision.reasons, _deny("approval.granted", "approval", why)))
        denied = Decision(verdict="deny", call_id=call.id, reasons=(
            *decision.reasons, _deny("approval.denied", "approval", why)))
        self._after_deny()
        return denied

    def _executor_for(self, call: ToolCall) -> Executor:
        run = self._executors.get(call.tool) or self._executors.get(call.tool_class)
        if run is not None:
            return run
        missing = f"executor.missing: no executor for tool {call.tool!r} ({call.tool_class})"
        return lambda c: ToolResult(call_id=c.id, status="error", error=missing)

    def _run(self, call: ToolCall, run: Executor, decision: Decision) -> ToolResult:
        started = time.perf_counter()
        try:
            output, status, error = run(call), "ok", None
        except Exception as exc:
            output, status, error = None, "error", _error_text(exc)
        produced = output.taint if isinstance(output, ToolResult) else ()
        if isinstance(output, ToolResult):
            output, status, error = output.output, output.status, output.error
        labels = self._label(call, tuple(produced))
        result = ToolResult(call_id=call.id, status=status, output=output, error=error,
                            taint=labels, duration_ms=(time.perf_counter() - started) * 1000)
        failure = self._observe(call, result)
        if failure is not None:  # what no guard could inspect is not handed back
            result = _withheld(result, f"guard.observe-failed: {failure}")
        result = self._audit_result(result)
        if result.status == "ok":
            self._completed[call.tool] += 1
        if result.status == "denied":
            stopped = self._stopped_while_running(call, result)
            self._commit(call, stopped, result)
            raise Denied(stopped, result)
        self._commit(call, decision, result)
        return result

    def _audit_result(self, result: ToolResult) -> ToolResult:
        """``result`` once it is in the log; if it cannot be, an error result without output."""
        failure = self._write("result", lambda store: store.record_result(self.run_id, result))
        if failure is None:
            return result
        withheld = _withheld(result, f"audit.write-failed: the result could not be audited "
                                     f"({failure}); its output is withheld")
        self._write("result", lambda store: store.record_result(self.run_id, withheld))
        return withheld

    def _stopped_while_running(self, call: ToolCall, result: ToolResult) -> Decision:
        # The sandbox or an executor's own protection stopped the call: that is a denial, audited
        # and counted like any other, not a successful call with an error string.
        text = result.error or "executor.denied: stopped while running"
        rid, _, message = text.partition(": ")
        check = "sandbox" if rid.startswith("sandbox.") else "executor"
        decision = Decision(verdict="deny", call_id=call.id, reasons=(
            Reason(id=rid, check=check, message=message or rid),))
        decision = self._audit_decision(call, decision)
        self._after_deny()
        return self._account(decision)

    def run_subprocess(self, tool: str, argv: list[str], *, stdin: bytes | None = None,
                       backend: BackendName = "auto", allow_unconfined: bool = False) -> ToolResult:
        """Run a declared subprocess tool (a ``shell``-class ``exec`` call) in its OS sandbox.

        Raises ``Denied`` when the kernel denies the call or the sandbox stopped it while
        running (then ``Denied.result`` holds its output).
        """
        executor = SubprocessExecutor(self._tools.get(tool), working_dir=self.working_dir,
                                      backend=backend, allow_unconfined=allow_unconfined,
                                      stdin=stdin)
        call = {"tool": tool, "tool_class": "shell", "action": "exec",
                "parameters": {"argv": list(argv)}}
        return self.execute(call, executor=executor)

    def _record_system(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Append a system record; a failure is logged and kept for the next decision."""
        failure = self._write(kind, lambda store: store.record_system(self.run_id, kind, payload))
        if failure is not None:
            self._unaudited.append(f"the {kind} record could not be audited: {failure}")

    def _write(self, what: str, op: Callable[[AuditStore], object]) -> str | None:
        """Run one write on the audit store; never raises: the failure, or None."""
        if self._audit is None:
            return None
        try:
            op(self._audit)
        except Exception as exc:
            failure = _error_text(exc)
            log.error("audit %s write failed: %s", what, failure)
            return failure
        return None

    def _internal_error(self, where: str, subject: str, exc: Exception) -> str:
        """Log an unexpected exception, put it on record, and return it as a sentence."""
        why = _error_text(exc)
        log.error("internal error in %s (%s): %s", where, subject, why, exc_info=exc)
        self._record_system("kernel-error", {"where": where, "subject": _safe_text(subject),
                                             "error": why})
        return why

    def _crashed(self, raw: object, exc: Exception) -> Decision:
        """The last resort of a public entry point: an audited, counted deny; never raises."""
        try:
            why = self._internal_error("kernel", f"call {self._seq}", exc)
            call = _placeholder(raw, self)
            decision = self._audit_decision(call, _denial(call, _deny(
                "internal.error", "kernel", why)))
            self._after_deny()
            return self._account(decision)
        except Exception as again:  # pragma: no cover - the stand-ins above cannot fail
            log.critical("kernel failure while denying: %s", again, exc_info=again)
            return Decision(verdict="deny", reasons=(
                _deny("internal.error", "kernel", _error_text(exc)),))

    def _open_audit(self, audit: str | os.PathLike[str] | AuditStore | None) -> AuditStore | None:
        if audit is None:
            return None
        try:
            store = audit if isinstance(audit, AuditStore) else AuditStore.open(Path(audit))
            store.start_run(self.run_id, principal=self._principal,
                            policy_name=self.policy.name, manifest_hash=self.manifest_hash,
                            config={"policy": self.policy.name,
                                    "working_dir": self.working_dir})
        except CallgateError:
            raise
        except Exception as exc:  # a foreign error (a path it cannot encode, …) at the boundary
            raise AuditError(f"cannot start the run in the audit log: {_error_text(exc)}"
                             ) from exc
        return store


def _refuse_escaping_roots(policy: Policy, working_dir: str) -> None:
    """Every declared root must stay where it was written, also for policies built in code."""
    found = root_problems(policy, working_dir)
    if found:
        raise PolicyError([Problem(why, "<policy>", field=".".join(str(p) for p in where))
                           for where, why in found])


def _ask(handler: ApprovalHandler | None, call: ToolCall, decision: Decision,
         timeout: float) -> tuple[bool, str]:
    """Run the approval handler with a timeout; no handler, an error or a timeout deny."""
    if handler is None:
        return False, "approval required and no approval handler is configured"
    answer: list[bool] = []
    failure: list[str] = []

    def ask() -> None:
        try:
            answer.append(bool(handler(call, decision)))
        except Exception as exc:
            failure.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=ask, daemon=True, name="callgate-approval")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return False, f"approval timed out after {timeout:g}s"
    if failure:
        return False, f"approval handler failed: {failure[0]}"
    return (True, "approved by the approval handler") if answer and answer[0] else (
        False, "refused by the approval handler")


def _violation_json(v: Violation) -> dict[str, Any]:
    return {"statement": v.statement, "enforce": v.enforce, "events": list(v.events),
            "message": v.message, "kind": v.kind}


def _placeholder(raw: object, kernel: Kernel, call_id: str | None = None) -> ToolCall:
    """A well-formed stand-in for any value, so that its denial can still be audited."""
    def text(key: str, default: str) -> str:
        try:
            value = getattr(raw, key, None) if isinstance(raw, ToolCall) else (
                raw.get(key) if isinstance(raw, Mapping) else None)
        except Exception:  # a mapping whose lookups fail
            value = None
        return _safe_text(value[:256]) if isinstance(value, str) and value else default

    return ToolCall(tool=text("tool", "<invalid>"), tool_class=text("tool_class", "unknown"),
                    action=text("action", "unknown"),
                    id=call_id or f"{kernel.run_id}:{kernel._seq}", run_id=kernel.run_id,
                    sequence=kernel._seq, principal=kernel._principal,
                    timestamp=_now_iso(time.time()))


def _withheld(result: ToolResult, error: str) -> ToolResult:
    """``result`` without its output, as an error (a stop while running stays one)."""
    status = "denied" if result.status == "denied" else "error"
    return result.model_copy(update={"status": status, "output": None, "error": error})


def _safe_text(value: object, limit: int = MAX_ERROR_CHARS) -> str:
    """``value`` as bounded text any UTF-8 store can hold (lone surrogates escaped)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # a repr that recurses too deep or raises
        text = f"<unprintable {type(value).__name__}>"
    return text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")


def _error_text(exc: BaseException) -> str:
    return _safe_text(f"{type(exc).__name__}: {exc}")


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "call"
        parts.append(f"{where}: {err['msg']}")
    return "invalid call: " + "; ".join(parts)


def _now_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")

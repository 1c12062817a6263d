"""The sidecar's operations, independent of HTTP: a thin translation over ``Kernel``.

``Sidecar`` owns the policy, the shared audit store, the runs, the approvals, the receipt key
and the metrics; ``_app`` parses requests into its arguments and its return values into
responses. No verdict is made here: every one comes from a run's kernel (``check``,
``mediate``, ``refuse``), and an internal error on the way is a deny that says so, audited.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import anyio

from callgate._model import Decision, Reason, ToolCall, ToolResult
from callgate.audit import AuditLog, AuditStore, open_store
from callgate.integrations.sidecar._approvals import Approval, ApprovalBook, Refusal
from callgate.integrations.sidecar._keys import Identity, KeyRing
from callgate.integrations.sidecar._metrics import Metrics
from callgate.integrations.sidecar._receipts import (
    RECEIPT_VERSION,
    Signer,
    call_digest,
    parameters_sha256,
)
from callgate.integrations.sidecar._runs import LiveRun, RunEnded, Runs, StateDB
from callgate.kernel import Kernel
from callgate.policy import LoadedPolicy

log = logging.getLogger("callgate.sidecar")

__all__ = ["SIDECAR_RUN", "NotFound", "Sidecar"]

#: The audit run that holds what belongs to no run (refused keys, the sidecar's start and stop).
SIDECAR_RUN = "callgate-sidecar"


ExecutorFn = Callable[[ToolCall], ToolResult]
T = TypeVar("T")


def decision_json(decision: Decision) -> dict[str, Any]:
    """A decision as ``callgate decide`` prints it: verdict, reasons, witness when present."""
    out: dict[str, Any] = {"verdict": decision.verdict,
                           "reasons": [r.model_dump() for r in decision.reasons]}
    if decision.witness is not None:
        out["witness"] = decision.witness.model_dump()
    return out


class NotFound(Exception):  # noqa: N818 - an HTTP 404 value
    """A run or approval this key cannot see (missing, ended, or another key's)."""


class Busy(Exception):  # noqa: N818 - an HTTP 429 value
    """A bound on what the sidecar holds at once is reached (waiters, runs of a key)."""


#: Requests waiting for an approval at once (each polls the store until answered).
MAX_WAITERS = 256
#: Runs one key may have open at once.
MAX_RUNS_PER_KEY = 1000
#: Refused requests recorded in the audit chain per second; the rest are counted.
AUTH_RECORDS_PER_S = 20


class Sidecar:
    """Everything one ``callgate serve`` process holds. Its async methods run on the event
    loop; a run's kernel is only used under that run's lock (``_in_run``). With ``store`` (a
    ``postgresql://`` URL) runs, approvals and the receipt key are shared with every sidecar
    given the same URL, and a run's decisions are serialised across them."""

    def __init__(self, loaded: LoadedPolicy, *, policy_bytes: bytes, keys: KeyRing,
                 state_dir: str | os.PathLike[str], audit: str | os.PathLike[str] | None = None,
                 working_dir: str | os.PathLike[str] | None = None,
                 approval_ttl_s: float = 300.0, flush_interval_s: float = 2.0,
                 executors: Mapping[str, ExecutorFn] | None = None,
                 store: str | None = None,
                 audit_key: str | os.PathLike[str] | None = None) -> None:
        self.loaded = loaded
        self.policy_sha256 = hashlib.sha256(policy_bytes).hexdigest()
        policy = loaded.policy
        self.principal = policy.principal.name if policy.principal else "anonymous"
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.working_dir = os.path.realpath(working_dir or policy.working_dir or os.getcwd())
        self.keys = keys
        self.approval_ttl_s = approval_ttl_s
        self.flush_interval_s = flush_interval_s
        self.audit = _open_audit(audit, store, self.state_dir, audit_key)
        # what the guards learn (secrets seen) is shared like the runs when the store is
        self.guard_state = store if store is not None else str(self.state_dir / "guards.db")
        if store is not None:
            from callgate.integrations.sidecar._pgstate import PgStateDB
            from callgate.integrations.sidecar._shared import SharedRuns

            shared = PgStateDB(store)
            self.db: StateDB | PgStateDB = shared
            self.signer = Signer(private=shared.receipt_key(Signer.new_private()))
            self.approvals = ApprovalBook(shared, self.record)
            self.runs: Runs = SharedRuns(shared, self._make_kernel, self.record)
        else:
            self.db = StateDB(self.state_dir / "state.db")
            self.signer = Signer(self.state_dir / "receipt-key")
            self.approvals = ApprovalBook(self.db, self.record)
            self.runs = Runs(self.db, self._make_kernel, self.record, self._last_call)
        self.metrics = Metrics(self.runs.open_count, self.approvals.pending_count)
        #: the executors ``execute`` runs calls with (built from the policy by the caller)
        self.executors: dict[str, ExecutorFn] = dict(executors or {})
        #: set when the server is asked to stop: long polls return what they have
        self.stopping = threading.Event()
        self._waiters = 0
        self._auth_second, self._auth_in_second, self._auth_suppressed = 0, 0, 0
        if SIDECAR_RUN not in self.audit.run_ids():
            self.audit.start_run(SIDECAR_RUN, principal="callgate-sidecar",
                                 policy_name=policy.name, manifest_hash="", config={})
        self.record(SIDECAR_RUN, "sidecar-start", {"policy_sha256": self.policy_sha256,
                                                   "working_dir": self.working_dir})

    # -- identity -----------------------------------------------------------------------------

    def _refused(self, payload: dict[str, Any]) -> None:
        """Record a refused request; past ``AUTH_RECORDS_PER_S`` in a second they are counted
        and the count recorded with the next one (a flood of bad keys cannot fill the log)."""
        now = int(time.monotonic())
        if now != self._auth_second:
            self._auth_second, self._auth_in_second = now, 0
        self._auth_in_second += 1
        if self._auth_in_second > AUTH_RECORDS_PER_S:
            self._auth_suppressed += 1
            return
        if self._auth_suppressed:
            payload = {**payload, "suppressed_before": self._auth_suppressed}
            self._auth_suppressed = 0
        self.record(SIDECAR_RUN, "auth-refused", payload)

    def identify(self, key: str | None, where: str) -> Identity | None:
        """The identity of a presented key, or None, recorded as a refused request."""
        identity = self.keys.identify(key)
        if identity is None:
            self._refused({"where": where,
                           "why": "no key" if not key else "unknown or revoked key"})
        elif identity.principal not in (None, self.principal):
            self._refused({
                "where": where, "key": identity.name,
                "why": f"the key is bound to principal {identity.principal!r}, this sidecar "
                       f"serves {self.principal!r}"})
            return None
        elif identity.policy_sha256 not in (None, self.policy_sha256):
            self._refused({
                "where": where, "key": identity.name,
                "why": f"the key is bound to policy {identity.policy_sha256[:12]}…, this "
                       f"sidecar serves {self.policy_sha256[:12]}…"})
            return None
        return identity

    # -- runs -------------------------------------------------------------------------------

    def start_run(self, identity: Identity) -> LiveRun:
        """A new run owned by the key (``Busy`` past ``MAX_RUNS_PER_KEY`` open runs)."""
        if self.runs.open_count(identity.name) >= MAX_RUNS_PER_KEY:
            raise Busy(f"key {identity.name!r} has {MAX_RUNS_PER_KEY} open runs; end some "
                       f"first")
        return self.runs.start(identity.name, self.principal)

    def run_for(self, identity: Identity, run_id: str | None) -> LiveRun:
        """The run a request names (the key's default run when it names none)."""
        if run_id is None:
            return self.runs.default_for(identity.name, self.principal)
        live = self.runs.get(run_id, identity.name)
        if live is None:
            raise NotFound(f"no open run {run_id} for this key")
        return live

    async def _in_run(self, live: LiveRun, work: Callable[[Kernel], T], *, end: bool = False,
                      write: bool = True, blocking: bool = False) -> T:
        """``work(kernel)`` under the run's lock: this process's, and with a shared store the
        run's row lock, its latest state loaded and the new one committed before this returns.
        ``blocking`` work runs on a thread even without a shared store."""
        async with live.lock:
            try:
                if self.runs.shared or blocking:
                    return await anyio.to_thread.run_sync(functools.partial(
                        self.runs.decide_in, live, work, end=end, write=write))
                return self.runs.decide_in(live, work, end=end, write=write)
            except RunEnded as exc:
                raise NotFound(str(exc)) from exc

    async def end_run(self, live: LiveRun) -> list[dict[str, Any]]:
        """End the run: its open obligations judged and returned as violations."""
        violations = await self._in_run(live, lambda kernel: kernel.end_run(), end=True)
        return [{"statement": v.statement, "enforce": v.enforce, "events": list(v.events),
                 "message": v.message, "kind": v.kind} for v in violations]

    async def open_obligations(self, live: LiveRun) -> list[dict[str, Any]]:
        """What ``end_run`` would report now."""
        violations = await self._in_run(live, lambda kernel: kernel.open_obligations(),
                                        write=False)
        return [{"statement": v.statement, "enforce": v.enforce, "events": list(v.events),
                 "message": v.message, "kind": v.kind} for v in violations]

    # -- decisions --------------------------------------------------------------------------

    async def decide(self, identity: Identity, live: LiveRun, call: dict[str, Any], *,
                     wait_s: float = 0.0, approval_id: str | None = None,
                     can_approve: bool = True) -> dict[str, Any]:
        """Check a call (``Kernel.check``); a ``require-approval`` opens an approval, and with
        ``wait_s`` the answer is awaited. With ``approval_id``, redeem that approval instead.
        A caller that can never redeem one (a gateway's decision point: ``can_approve``
        False) opens none: its ``require-approval`` stays a refusal."""
        if approval_id is not None:
            return await self._redeem(live, call, approval_id)
        started = time.perf_counter()
        decision, checked = await self._in_run(
            live, lambda kernel: (kernel.check(call), self._as_checked(kernel, call)))
        self.metrics.decided(decision, time.perf_counter() - started)
        answer = self._answer(live, decision, call, checked)
        if decision.verdict != "require-approval" or not can_approve:
            return answer
        approval = self._open_approval(identity, live, decision, call, checked)
        answer["approval"] = approval.as_json()
        if wait_s <= 0:
            return answer
        settled = await self.wait_approval(approval.id, wait_s)
        if settled.state == "pending" and self.stopping.is_set():
            return answer  # the sidecar is stopping: the approval stays open for later
        if settled.state == "approved":
            return await self._redeem(live, call, approval.id)
        self.approvals.expire(approval.id, "the waiting call timed out")
        why = "refused by the approver" if settled.state == "denied" else \
            f"no answer within {wait_s:g}s"
        return await self._refuse(live, call, checked, Reason(
            id="approval.denied", check="approval", message=f"approval {approval.id}: {why}"))

    async def wait_approval(self, approval_id: str, wait_s: float) -> Approval:
        """The approval once it leaves ``pending``, or as it is after ``wait_s`` seconds.
        At most ``MAX_WAITERS`` wait at once; one more is refused (429)."""
        if self._waiters >= MAX_WAITERS:
            raise Busy(f"{MAX_WAITERS} requests already wait for approvals; retry later")
        self._waiters += 1
        try:
            return await self._wait_approval(approval_id, wait_s)
        finally:
            self._waiters -= 1

    async def _wait_approval(self, approval_id: str, wait_s: float) -> Approval:
        event = self.approvals.event(approval_id)
        deadline = time.monotonic() + wait_s
        while True:
            found = self.approvals.get(approval_id)
            if found is None:
                raise NotFound(f"no approval {approval_id}")
            if found.state != "pending" or time.monotonic() >= deadline or \
                    self.stopping.is_set():
                return found
            for _ in range(10):
                if event.is_set() or self.stopping.is_set():
                    break
                await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

    async def _redeem(self, live: LiveRun, call: dict[str, Any], approval_id: str
                      ) -> dict[str, Any]:
        checked, quarantined = await self._in_run(live, lambda kernel: (
            self._as_checked(kernel, call), kernel.run_state.quarantined), write=False)
        digest = call_digest(str(call.get("tool")), str(call.get("tool_class")),
                             str(call.get("action")), checked)
        if quarantined:  # the run went read-only while the approver thought: no grant holds
            return await self._refuse(live, call, checked, Reason(
                id="approval.refused", check="approval", message=(
                    f"approval {approval_id}: the run was quarantined after the approval was "
                    f"asked for")))
        try:
            found = self.approvals.redeem(approval_id, principal=self.principal,
                                          run_id=live.run_id, call_sha256=digest,
                                          policy_sha256=self.policy_sha256,
                                          record_use=self.audit.record_system)
        except Refusal as refusal:
            return await self._refuse(live, call, checked, Reason(
                id="approval.refused", check="approval", message=refusal.message))
        except Exception as exc:  # the use could not be recorded: spent, and refused
            return await self._refuse(live, call, checked, Reason(
                id="audit.write-failed", check="audit", message=(
                    f"approval {approval_id} could not be recorded as used ({exc}); the call "
                    f"is refused")))
        decision = Decision(verdict="allow", call_id=found.call_id, reasons=(Reason(
            id="approval.granted", check="approval",
            message=f"approved by {found.decided_by} ({approval_id})"),))
        self.metrics.decided(decision, 0.0)
        return self._answer(live, decision, call, checked)

    async def _refuse(self, live: LiveRun, call: dict[str, Any], checked: dict[str, Any],
                      reason: Reason) -> dict[str, Any]:
        return self._answer(live, await self.refuse(live, call, reason), call, checked)

    async def refuse(self, live: LiveRun, call: Mapping[str, Any], reason: Reason) -> Decision:
        """``Kernel.refuse``: a deny for a reason found before the kernel was asked."""
        decision = await self._in_run(live, lambda kernel: kernel.refuse(call, reason))
        self.metrics.decided(decision, 0.0)
        return decision

    def _open_approval(self, identity: Identity, live: LiveRun, decision: Decision,
                       call: Mapping[str, Any], checked: dict[str, Any]) -> Approval:
        shown = {"tool": call.get("tool"), "tool_class": call.get("tool_class"),
                 "action": call.get("action"), "parameters": checked}
        return self.approvals.create(
            key_name=identity.name, principal=self.principal, run_id=live.run_id,
            call_id=decision.call_id, call_sha256=call_digest(
                str(call.get("tool")), str(call.get("tool_class")), str(call.get("action")),
                checked), policy_sha256=self.policy_sha256, call=shown,
            reasons=[r.model_dump() for r in decision.reasons], ttl_s=self.approval_ttl_s)

    def _answer(self, live: LiveRun, decision: Decision, call: Mapping[str, Any],
                checked: dict[str, Any]) -> dict[str, Any]:
        out = decision_json(decision)
        out["call_id"] = decision.call_id
        out["run_id"] = live.run_id
        out["receipt"] = self.signer.sign({
            "v": RECEIPT_VERSION,
            "call": {"tool": call.get("tool"), "tool_class": call.get("tool_class"),
                     "action": call.get("action"),
                     "parameters_sha256": parameters_sha256(checked)},
            "call_id": decision.call_id, "verdict": decision.verdict, "run_id": live.run_id,
            "principal": self.principal, "policy_sha256": self.policy_sha256,
            "issued_at": int(time.time())})
        out["checked_parameters"] = checked
        return out

    @staticmethod
    def _as_checked(kernel: Kernel, call: Mapping[str, Any]) -> dict[str, Any]:
        parameters = call.get("parameters") or {}
        try:
            return kernel.opened_as_checked(str(call.get("tool")), str(call.get("tool_class")),
                                            parameters)
        except Exception:  # the kernel judged the call already; the receipt shows it as sent
            return dict(parameters)

    # -- results and execution ----------------------------------------------------------------

    async def report(self, live: LiveRun, call_id: str, fields: dict[str, Any]
                     ) -> dict[str, Any]:
        """``Kernel.report`` for a call the agent ran itself; raises ``NotFound`` for a call
        id no allowed check of this run gave."""
        from callgate._errors import CallgateError

        try:
            result = await self._in_run(live, lambda kernel: kernel.report(call_id, **fields))
        except CallgateError as exc:
            raise NotFound(str(exc)) from exc
        return {"run_id": live.run_id, "result": result.model_dump(mode="json")}

    async def execute(self, live: LiveRun, call: dict[str, Any]) -> dict[str, Any]:
        """``Kernel.mediate`` with the sidecar's own executors (mandatory mediation); an
        approval is asked for through the approvals API while the call waits."""
        started = time.perf_counter()
        decision, result = await self._in_run(live, lambda kernel: kernel.mediate(call),
                                              blocking=True)
        self.metrics.decided(decision, time.perf_counter() - started)
        out = decision_json(decision)
        out["call_id"] = decision.call_id
        out["run_id"] = live.run_id
        out["result"] = result.model_dump(mode="json") if result is not None else None
        return out

    def _last_call(self, run_id: str) -> int:
        """The highest call number the audit log holds a decision of in ``run_id``."""
        last = 0
        for record in self.audit.records(run_id):
            if record.kind == "decision":
                sequence = record.payload.get("call", {}).get("sequence")
                if isinstance(sequence, int):
                    last = max(last, sequence)
        return last

    def _make_kernel(self, run_id: str, key_name: str, snapshot: bytes | None) -> Kernel:
        kernel = Kernel(self.loaded, audit=self.audit, working_dir=self.working_dir,
                        run_id=run_id, guard_state=self.guard_state,
                        resume=snapshot, approval_handler=self._handler(run_id, key_name),
                        approval_timeout_s=self.approval_ttl_s + 1.0)
        for key, executor in self.executors.items():
            kernel.register_executor(key, executor)
        return kernel

    def _handler(self, run_id: str, key_name: str) -> Any:
        """The approval handler of a run's kernel (``execute``): opens an approval, waits on
        its thread for the answer, and uses it."""

        def ask(call: ToolCall, decision: Decision) -> bool:
            digest = call_digest(call.tool, call.tool_class, call.action, call.parameters)
            approval = self.approvals.create(
                key_name=key_name, principal=self.principal, run_id=run_id,
                call_id=decision.call_id, call_sha256=digest, policy_sha256=self.policy_sha256,
                call={"tool": call.tool, "tool_class": call.tool_class, "action": call.action,
                      "parameters": call.parameters},
                reasons=[r.model_dump() for r in decision.reasons], ttl_s=self.approval_ttl_s)
            self._await_answer(approval.id)
            try:
                self.approvals.redeem(approval.id, principal=self.principal, run_id=run_id,
                                      call_sha256=digest, policy_sha256=self.policy_sha256)
                return True
            except Refusal:
                self.approvals.expire(approval.id, "the executing call stopped waiting")
                return False

        return ask

    def _await_answer(self, approval_id: str) -> None:
        """Block until the approval leaves ``pending`` (answered here, or through another
        sidecar sharing the store: it is looked up every quarter second) or expires."""
        event = self.approvals.event(approval_id)
        deadline = time.monotonic() + self.approval_ttl_s
        while not event.wait(0.25) and time.monotonic() < deadline:
            found = self.approvals.get(approval_id)
            if found is None or found.state != "pending" or self.stopping.is_set():
                return

    # -- lifecycle --------------------------------------------------------------------------

    def record(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        """A system record in the audit chain; a failure is logged, never raised."""
        try:
            self.audit.record_system(run_id, kind, payload)
        except Exception:
            log.exception("callgate sidecar: cannot record %s", kind)

    async def flush_forever(self) -> None:
        """Write changed runs every ``flush_interval_s`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                self.runs.flush()
            except Exception:
                log.exception("callgate sidecar: writing run state failed")

    def close(self) -> None:
        """Persist every open run, record the stop, close the stores."""
        try:
            self.runs.save_all()
        finally:
            self.record(SIDECAR_RUN, "sidecar-stop", {})
            self.db.close()
            self.audit.close()


def _open_audit(audit: str | os.PathLike[str] | None, store: str | None, state_dir: Path,
                key: str | os.PathLike[str] | None = None) -> AuditLog:
    """The audit log: ``audit`` (a SQLite file) when given, else the shared store's (one log
    for every sidecar on it), else ``audit.db`` in the state directory; ``key`` is the
    checkpoint signing key (default: beside the file, or per host for a store)."""
    options: dict[str, Any] = {} if key is None else {"key_path": Path(key)}
    if audit is not None or store is None:
        return AuditStore.open(Path(audit) if audit else state_dir / "audit.db", **options)
    return open_store(store, **options)

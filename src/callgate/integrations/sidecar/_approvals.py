"""Pending approvals: a ``require-approval`` decision waiting for a person with an approver key.

An approval is bound to the principal, the run, the key that asked, the call's digest (tool,
class, action and the SHA-256 of its canonical parameters), the policy's SHA-256 and an expiry.
It moves ``pending`` → ``approved`` / ``denied`` / ``expired``, and ``approved`` → ``used``
exactly once: a second redemption, a redemption for other arguments, another run, another
principal or another policy is refused. Every step is a system record in the run's audit chain
(``approval-requested``, ``-approved``, ``-denied``, ``-expired``, ``-used``, ``-refused``).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from callgate.integrations.sidecar._runs import StateStore

__all__ = ["Approval", "ApprovalBook", "Refusal"]

State = Literal["pending", "approved", "denied", "expired", "used"]
Audit = Callable[[str, str, Mapping[str, Any]], object]


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval as stored."""

    id: str
    key_name: str
    principal: str
    run_id: str
    call_id: str
    call_sha256: str
    policy_sha256: str
    call: dict[str, Any]
    reasons: list[dict[str, Any]]
    created: float
    expires: float
    state: State
    decided_by: str | None

    def as_json(self) -> dict[str, Any]:
        """The approval as the API shows it."""
        return {"id": self.id, "state": self.state, "principal": self.principal,
                "run_id": self.run_id, "call_id": self.call_id, "call": self.call,
                "call_sha256": self.call_sha256, "policy_sha256": self.policy_sha256,
                "reasons": self.reasons, "created": self.created, "expires": self.expires,
                "decided_by": self.decided_by}


class Refusal(Exception):  # noqa: N818 - a value, raised only inside this module's callers
    """Why an approval cannot be answered or redeemed (``status``: the HTTP status)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_COLUMNS = ("id, key_name, principal, run_id, call_id, call_sha256, policy_sha256, call, "
            "reasons, created, expires, state, decided_by")


def _row(row: tuple[Any, ...]) -> Approval:
    return Approval(row[0], row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]),
                    json.loads(row[8]), row[9], row[10], row[11], row[12])


class ApprovalBook:
    """The approvals of one sidecar, in its state database (shared by every sidecar on a
    PostgreSQL store: a redemption is a conditional UPDATE, so it succeeds once across them);
    ``audit(run_id, kind, payload)`` records each step. Waiters are woken through
    ``threading.Event``s (the kernel's approval handler waits on a thread; the HTTP long-poll
    waits on the event loop), and look the approval up while they wait."""

    def __init__(self, db: StateStore, audit: Audit, clock: Callable[[], float] = time.time
                 ) -> None:
        self._db = db
        self._audit = audit
        self._clock = clock
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def create(self, *, key_name: str, principal: str, run_id: str, call_id: str,
               call_sha256: str, policy_sha256: str, call: Mapping[str, Any],
               reasons: list[dict[str, Any]], ttl_s: float) -> Approval:
        """A new pending approval, recorded."""
        now = self._clock()
        approval = Approval("apr_" + secrets.token_urlsafe(18), key_name, principal, run_id,
                            call_id, call_sha256, policy_sha256, dict(call), reasons, now,
                            now + ttl_s, "pending", None)
        with self._db.cursor() as cur:
            cur.execute(f"INSERT INTO approvals ({_COLUMNS}) VALUES "
                        f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (approval.id, key_name, principal, run_id, call_id, call_sha256,
                         policy_sha256, json.dumps(approval.call), json.dumps(reasons), now,
                         approval.expires, "pending", None))
        self._audit(run_id, "approval-requested", {
            "approval_id": approval.id, "call_id": call_id, "call_sha256": call_sha256,
            "policy_sha256": policy_sha256, "expires": approval.expires, "key": key_name})
        return approval

    def get(self, approval_id: str) -> Approval | None:
        """The approval, its expiry applied."""
        with self._db.cursor() as cur:
            row = cur.execute(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?",
                              (approval_id,)).fetchone()
        if row is None:
            return None
        found = _row(row)
        if found.state == "pending" and self._clock() >= found.expires:
            self._move(found, "expired", None)
            return self.get(approval_id)
        return found

    def pending_count(self) -> int:
        """Approvals pending and not yet expired (one query, for ``/metrics``)."""
        with self._db.cursor() as cur:
            row = cur.execute("SELECT COUNT(*) FROM approvals WHERE state = 'pending' AND "
                              "expires > ?", (self._clock(),)).fetchone()
        return int(row[0]) if row is not None else 0

    def list(self, state: str | None = None) -> list[Approval]:
        """Approvals, oldest first, in ``state`` if given (expiry applied)."""
        with self._db.cursor() as cur:
            ids = [r[0] for r in cur.execute("SELECT id FROM approvals ORDER BY created")]
        found = [a for a in map(self.get, ids) if a is not None]
        return [a for a in found if state is None or a.state == state]

    def decide(self, approval_id: str, approve: bool, approver: str) -> Approval:
        """Approve or deny a pending approval; raises ``Refusal`` for any other state."""
        found = self.get(approval_id)
        if found is None:
            raise Refusal(404, f"no approval {approval_id}")
        if found.state != "pending":
            raise Refusal(409, f"approval {approval_id} is {found.state}, not pending")
        self._move(found, "approved" if approve else "denied", approver)
        decided = self.get(approval_id)
        assert decided is not None
        return decided

    def expire(self, approval_id: str, why: str) -> None:
        """End a pending approval whose caller stopped waiting (it got a deny)."""
        found = self.get(approval_id)
        if found is not None and found.state == "pending":
            self._move(found, "expired", None, why=why)

    def redeem(self, approval_id: str, *, principal: str, run_id: str, call_sha256: str,
               policy_sha256: str, record_use: Audit | None = None) -> Approval:
        """Use an approved approval for the call it was granted for, once and before it
        expires; else ``Refusal`` (recorded). ``record_use`` records the use and raises when it
        cannot: the approval is then spent and the call refused (never an unrecorded allow)."""
        found = self.get(approval_id)
        problem = None
        now = self._clock()
        if found is None:
            raise Refusal(404, f"no approval {approval_id}")
        if found.state != "approved":
            problem = f"approval {approval_id} is {found.state}, not approved"
        elif now >= found.expires:
            problem = f"approval {approval_id} expired before it was used"
        elif (found.principal, found.run_id) != (principal, run_id):
            problem = f"approval {approval_id} was granted to another principal or run"
        elif found.call_sha256 != call_sha256:
            problem = f"approval {approval_id} was granted for other arguments"
        elif found.policy_sha256 != policy_sha256:
            problem = f"approval {approval_id} was granted under another policy"
        if problem is not None:
            self._audit(run_id, "approval-refused", {"approval_id": approval_id,
                                                     "call_sha256": call_sha256,
                                                     "why": problem})
            raise Refusal(403, problem)
        with self._db.cursor() as cur:  # single use: only one redemption moves it, in time
            moved = cur.execute("UPDATE approvals SET state = 'used' WHERE id = ? AND "
                                "state = 'approved' AND expires > ?",
                                (approval_id, now)).rowcount
        if moved != 1:
            raise Refusal(403, f"approval {approval_id} was already used or has expired")
        (record_use or self._audit)(found.run_id, "approval-used", {
            "approval_id": approval_id, "call_id": found.call_id})
        return found

    def event(self, approval_id: str) -> threading.Event:
        """The event set when the approval leaves ``pending``."""
        with self._lock:
            return self._events.setdefault(approval_id, threading.Event())

    def _move(self, found: Approval, state: State, by: str | None, why: str = "") -> None:
        with self._db.cursor() as cur:
            moved = cur.execute("UPDATE approvals SET state = ?, decided_by = ?, decided_at = ? "
                                "WHERE id = ? AND state = 'pending'",
                                (state, by, self._clock(), found.id)).rowcount
        if moved:
            payload: dict[str, Any] = {"approval_id": found.id, "call_id": found.call_id,
                                       "by": by}
            if why:
                payload["why"] = why
            self._audit(found.run_id, f"approval-{state}", payload)
        with self._lock:
            event = self._events.pop(found.id, None)
        if event is not None:
            event.set()

"""What the kernel writes into the audit log so that a run can be replayed (``callgate.replay``).

The audit log is the recording: no second recorder. Later decisions depend on the compiled
policy, the run's configuration (working directory, deadline, guards), the clock, what the
host reported back (outputs and the taint it knew of) and what the guards knew before the run
began (fingerprints kept in a state file across runs). This module builds those parts:

* ``run_recording`` goes into the run-start's ``config`` under ``"replay"``;
* ``decision_recording`` goes beside each decision (``payload.replay``): how the call came in
  (``check``, ``mediate``, ``refuse``, ``stopped``), the wall clock and the monotonic instant
  the decision used, and the raw input when it was not a valid call;
* ``guard_state_recording`` is a ``guard-state`` system record: the fingerprints the guards held
  when the run started or resumed in this process.

The format is named ``callgate-replay/1``; logs written before it carry none of this and replay
refuses them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

from callgate.guards import FingerprintStore, Guard, GuardSettings
from callgate.policy._schema import Policy

__all__ = ["FORMAT", "MAX_FINGERPRINTS", "decision_recording", "guard_state_recording",
           "policy_data", "policy_digest", "run_recording"]

#: The name and version of what the log records for replay.
FORMAT: Final = "callgate-replay/1"
#: Fingerprints recorded at a run's start; a larger guard state is recorded by count and digest
#: only, and replay refuses the run.
MAX_FINGERPRINTS: Final = 50_000


def policy_data(policy: Policy) -> dict[str, Any]:
    """The compiled policy as JSON data that ``Policy.model_validate`` reads back equal."""
    return policy.model_dump(mode="json", by_alias=True)


def _sha256(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def policy_digest(policy: Policy) -> str:
    """The SHA-256 a run's start records for ``policy`` (of its compiled form)."""
    return _sha256(policy_data(policy))


def run_recording(policy: Policy, *, deadline_s: float, guards: GuardSettings | str,
                  persistent_guards: bool) -> dict[str, Any]:
    """The run-start's ``config["replay"]``: the compiled policy (and its hash), the decision
    deadline, where the guards came from (``"policy"``, settings, or ``"objects"`` a caller
    built, which replay cannot rebuild) and whether they kept state in a file."""
    data = policy_data(policy)
    if isinstance(guards, GuardSettings):
        guard_source: dict[str, Any] = {"from": "settings",
                                        "settings": guards.model_dump(mode="json",
                                                                      by_alias=True)}
    else:
        guard_source = {"from": guards}
    return {"format": FORMAT, "policy": data, "policy_sha256": policy_digest(policy),
            "decision_deadline_s": deadline_s, "guards": guard_source,
            "guard_state": persistent_guards}


def decision_recording(entry: str, now: float, instant: float, raw: Any = None,
                       invalid: bool = False) -> dict[str, Any]:
    """A decision's ``payload.replay``: how the call came in and the clocks it was decided on;
    the raw input only when it was not a valid call (the recorded call is then a stand-in)."""
    out: dict[str, Any] = {"entry": entry, "now": now, "instant": instant}
    if invalid:
        out["raw"] = raw
    return out


def stores_of(guards: Sequence[Guard]) -> list[FingerprintStore]:
    """The distinct fingerprint stores the guards share (usually one)."""
    found: list[FingerprintStore] = []
    for guard in guards:
        store = getattr(guard, "store", None)
        if isinstance(store, FingerprintStore) and all(store is not s for s in found):
            found.append(store)
    return found


def guard_state_recording(guards: Sequence[Guard]) -> dict[str, Any] | None:
    """The ``guard-state`` record: every fingerprint the guards' stores hold now (none: None).

    Over ``MAX_FINGERPRINTS`` only the count and digest are kept (``complete`` false)."""
    rows: list[list[Any]] = []
    for store in stores_of(guards):
        rows.extend(store.export())
    if not rows:
        return None
    digest = _sha256(rows)
    if len(rows) > MAX_FINGERPRINTS:
        return {"complete": False, "count": len(rows), "sha256": digest}
    return {"complete": True, "count": len(rows), "sha256": digest, "rows": rows}

"""The crash harness: clients keep executing calls through a fleet of sidecars while sidecars
are killed with SIGKILL (or PostgreSQL restarts), then the audit log is checked against what
the clients were told and what the executor did.

Every call is a ``/v1/execute`` of a file write of its own mark file (``data/marks/TOKEN``):
a mark on disk is a call that ran. Afterwards:

* ``callgate audit verify`` passes (the chain never forked, nothing half-written);
* every decision a client received is in the log with the verdict the client got (but for a
  deny the sidecar gave without reaching the kernel because the store was down: it has no call
  id, and is recorded in the log only when the log can be written);
* every mark on disk belongs to an ``allow`` decision recorded in the log (no call ran
  without its decision recorded).
"""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.integrations.sidecar.fleet import Fleet

#: A policy that lets the mark writes run without a person.
POLICY = """\
name: crash-test
version: 1
principal:
  name: crash-agent
  capabilities:
    - {tool_class: file, actions: [read, write], constraints: {allowed_paths: ["./data/**"]}}
rules:
  - {id: allow-all, priority: 100, match: {}, decision: allow, reason: fine}
"""


@dataclass
class Outcome:
    """What the clients saw while the fleet was disturbed."""

    #: (call_id, verdict, token) of every decision a client received
    answers: list[tuple[str, str, str]] = field(default_factory=list)
    #: requests that got no decision (connection refused or reset, 5xx)
    failures: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    #: runs found quarantined (a kill cut a decision off before its state was written) and
    #: replaced by new ones
    quarantined_runs: int = 0
    #: kills of a sidecar that had requests in flight
    kills_mid_request: int = 0


class Harness:
    """Clients executing calls through ``fleet`` on ``runs`` runs until ``stop``."""

    def __init__(self, fleet: Fleet, *, clients: int = 4, runs: int = 3) -> None:
        self.fleet = fleet
        self.clients = clients
        self.outcome = Outcome()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = [0] * len(fleet.servers)
        self._down: set[int] = set()
        (fleet.root / "data" / "marks").mkdir(parents=True, exist_ok=True)
        self.run_ids = []
        for i in range(runs):
            with fleet.client(i) as client:
                self.run_ids.append(client.post("/v1/runs", json={}).json()["run_id"])
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(clients)]

    def __enter__(self) -> Harness:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _client(self, index: int) -> None:
        rng = random.Random(index)
        sessions = [s.http(self.fleet.key) for s in self.fleet.servers]
        try:
            while not self.stop.is_set():
                self._one(rng, sessions)
        finally:
            for session in sessions:
                session.close()

    def _one(self, rng: random.Random, sessions: list[httpx.Client]) -> None:
        which = rng.choice([i for i in range(len(sessions)) if i not in self._down] or [0])
        token = uuid.uuid4().hex
        body = {"run_id": rng.choice(self.run_ids), "call": {
            "tool": "save", "tool_class": "file", "action": "write",
            "parameters": {"path": f"data/marks/{token}", "content": token}}}
        with self._lock:
            self._in_flight[which] += 1
        try:
            answer = sessions[which].post("/v1/execute", json=body, timeout=20)
        except httpx.HTTPError as exc:
            with self._lock:
                self.outcome.failures[type(exc).__name__] += 1
            time.sleep(0.005)
            return
        finally:
            with self._lock:
                self._in_flight[which] -= 1
        with self._lock:
            if answer.status_code != 200:
                self.outcome.failures[f"http {answer.status_code}"] += 1
                return
            decided = answer.json()
            self.outcome.answers.append((str(decided.get("call_id")), decided["verdict"],
                                         token))
        if any(r["id"] == "run.quarantined" for r in decided["reasons"]):
            self._replace(body["run_id"], sessions[which])

    def _replace(self, run_id: str, session: httpx.Client) -> None:
        try:
            started = session.post("/v1/runs", json={}, timeout=20).json()["run_id"]
        except (httpx.HTTPError, KeyError):
            return
        with self._lock:
            if run_id in self.run_ids:
                self.run_ids[self.run_ids.index(run_id)] = started
                self.outcome.quarantined_runs += 1

    def kill_some(self, kills: int, *, pause: tuple[float, float] = (0.05, 0.4)) -> None:
        """Kill ``kills`` sidecars with SIGKILL, one at a time at random moments (preferably
        while requests to it are in flight), each restarted at once on its own thread; at
        least one sidecar stays up."""
        rng = random.Random(kills)
        servers = self.fleet.servers
        restarting: dict[int, threading.Thread] = {}
        for _ in range(kills):
            time.sleep(rng.uniform(*pause))
            while True:
                restarting = {i: t for i, t in restarting.items() if t.is_alive()}
                up = [i for i in range(len(servers)) if i not in restarting]
                if len(up) >= 2:
                    break
                time.sleep(0.05)
            busy = [i for i in up if self._in_flight[i] > 0]
            victim = rng.choice(busy or up)
            time.sleep(rng.uniform(0, 0.005))
            with self._lock:
                mid = self._in_flight[victim] > 0
            proc = servers[victim].proc
            assert proc is not None
            self._down.add(victim)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.outcome.kills += 1
            self.outcome.kills_mid_request += mid
            restarting[victim] = threading.Thread(target=self._restart, args=(victim,),
                                                  daemon=True)
            restarting[victim].start()
        for thread in restarting.values():
            thread.join(timeout=60)

    def _restart(self, index: int) -> None:
        self.fleet.servers[index].start()
        self._down.discard(index)


def check(fleet: Fleet, outcome: Outcome) -> dict[str, Any]:
    """The three properties (assertions); returns counts for the report."""
    fleet.verify()
    decided: dict[str, tuple[str, str]] = {}
    with fleet.open_audit() as store:
        for run_id in store.run_ids():
            for record in store.records(run_id):
                if record.kind == "decision":
                    payload = record.payload
                    path = str(payload["call"]["parameters"].get("path", ""))
                    call_id = str(payload["decision"]["call_id"])
                    assert call_id not in decided, f"call id {call_id} used twice"
                    decided[call_id] = (
                        payload["decision"]["verdict"], path.rsplit("/", 1)[-1])
    unlogged_denials = 0
    for call_id, verdict, token in outcome.answers:
        if call_id == "None" and verdict == "deny":
            unlogged_denials += 1  # refused before the kernel was reached (the store was down)
            continue
        assert decided.get(call_id) == (verdict, token), (call_id, verdict, token)
    allowed = {token for verdict, token in decided.values() if verdict == "allow"}
    marks = {p.name for p in (fleet.root / "data" / "marks").iterdir()}
    assert marks <= allowed, sorted(marks - allowed)[:5]
    return {"answers": len(outcome.answers), "decisions_in_log": len(decided),
            "marks": len(marks), "unlogged_denials": unlogged_denials, "kills": outcome.kills,
            "kills_mid_request": outcome.kills_mid_request,
            "quarantined_runs": outcome.quarantined_runs,
            "failures": dict(outcome.failures)}

"""Several ``callgate serve`` processes over one PostgreSQL database (a fresh one per test).

The sidecars share the state store and the audit log (``--store``: both in PostgreSQL); each
has its own state directory (its guards' store).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from callgate.audit import AuditLog, open_store
from tests.integrations.sidecar.conftest import Server, callgate, free_port, make_server
from tests.postgres import Cluster

#: A policy whose decisions depend on the run's history: at most LIMIT GETs a minute, and the
#: run quarantined (read-only) after 3 denials.
LIMIT = 5
POLICY = f"""\
name: fleet-test
version: 1
principal:
  name: fleet-agent
  capabilities:
    - {{tool_class: http, actions: [get], constraints: {{allowed_hosts: [api.example.org],
        max_calls_per_minute: {LIMIT}}}}}
    - {{tool_class: file, actions: [read, write], constraints: {{allowed_paths: ["./data/**"]}}}}
rules:
  - {{id: approve-writes, priority: 10, match: {{tool_class: file, action: write}},
     decision: require-approval, reason: file writes need a human}}
  - {{id: allow-rest, priority: 100, match: {{}}, decision: allow, reason: fine}}
run_state: {{quarantine_after_denials: 1000}}
"""


def new_database(cluster: Cluster) -> str:
    """A fresh database in the cluster; its URL (over TCP)."""
    return cluster.new_database("t")


@dataclass
class Fleet:
    """N sidecars sharing one store and one audit log, with the keys of the first."""

    root: Path
    store: str
    servers: list[Server]

    @property
    def key(self) -> str:
        return self.servers[0].key

    @property
    def approver(self) -> str:
        return self.servers[0].approver


    def client(self, index: int, key: str | None = None) -> httpx.Client:
        return self.servers[index % len(self.servers)].http(key or self.key)

    def records(self, run_id: str) -> list[dict[str, Any]]:
        """The run's audit records, in chain order (kind, payload)."""
        with self.open_audit() as store:
            return [{"kind": r.kind, "payload": r.payload, "seq": r.seq}
                    for r in store.records(run_id)]

    def open_audit(self) -> AuditLog:
        """The shared audit log, read-only."""
        return open_store(self.store, read_only=True)

    def verify(self) -> str:
        done = callgate("audit", "verify", "--store", self.store)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


def sidecar_args(root: Path, store: str, index: int, port: int) -> list[str]:
    """The command line of sidecar ``index``."""
    return ["--policy", "policy.yaml", "--keys", "keys.json", "--store", store,
            "--state-dir", f"state-{index}", "--approval-ttl", "30",
            "--listen", f"127.0.0.1:{port}"]


@contextmanager
def fleet(root: Path, cluster: Cluster, count: int, policy: str = POLICY) -> Iterator[Fleet]:
    """``count`` running sidecars over a fresh database; killed afterwards."""
    first = make_server(root, policy)
    store = new_database(cluster)
    servers = []
    for index in range(count):
        port = free_port()
        servers.append(Server(root, f"http://127.0.0.1:{port}", first.key, first.approver,
                              first.other, args=sidecar_args(root, store, index, port)))
    try:
        for server in servers:
            server.start()
        yield Fleet(root, store, servers)
    finally:
        for server in servers:
            if server.proc is not None:
                server.stop(signal.SIGKILL)


def get(i: int) -> dict[str, Any]:
    """An allowed GET (rate-limited by the policy)."""
    return {"tool": "fetch", "tool_class": "http", "action": "get",
            "parameters": {"url": f"https://api.example.org/item/{i}"}}


def verdicts(records: list[dict[str, Any]]) -> list[str]:
    """The verdicts of the decision records, in chain order."""
    return [r["payload"]["decision"]["verdict"] for r in records if r["kind"] == "decision"]

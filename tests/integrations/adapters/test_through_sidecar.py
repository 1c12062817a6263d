"""An adapter with the sidecar's client as its gate: the same framework run, decided by a real
``callgate serve`` process instead of an embedded kernel (one constructor changed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.audit import AuditStore
from callgate.client import Client
from callgate.integrations.adapters._gate import Gate
from tests.integrations.adapters.conftest import ATTACKER, NOTES, POLICY, Tools
from tests.integrations.adapters.test_pydantic_ai import Script, agent_for, run
from tests.integrations.sidecar.conftest import Server, make_server


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Server]:
    server = make_server(tmp_path, POLICY)
    server.start()
    yield server
    if server.proc is not None:
        server.stop()


def test_the_sidecar_client_is_a_gate_and_stops_the_injection_two_calls_later(
        sidecar: Server, tools: Tools) -> None:
    script = Script([("fetch_page", {"url": "https://weather.example/today"})],
                    [("read_notes", {})],
                    [("send_email", {"to": ATTACKER, "body": NOTES})],
                    "done")
    with Client(sidecar.url, sidecar.key) as client:
        assert isinstance(client, Gate)
        run(agent_for(script, tools, client), "what is the weather?")
        run_id = client.run_id
        assert client.end_run() == []
    assert tools.sent == []  # the page's text reached the sidecar, which refused the mail
    [retry] = script.retries()
    assert "no-recipient-from-web" in retry
    sidecar.stop()
    with AuditStore.open(sidecar.audit, read_only=True) as store:
        verdicts = [(r.payload["call"]["tool"], r.payload["decision"]["verdict"])
                    for r in store.records(run_id) if r.kind == "decision"]
        results = [r for r in store.records(run_id) if r.kind == "result"]
        assert store.verify().ok
    assert verdicts == [("fetch_page", "allow"), ("read_notes", "allow"),
                        ("send_email", "deny")]
    assert len(results) == 2  # both outputs reported back through the client

"""Approvals round trip (long-poll, the approvals CLI, replay and forgery refused) and runs that
survive a restart of the sidecar, pending approvals included."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from callgate.audit import AuditStore
from callgate.client import Client
from tests.integrations.sidecar.conftest import Server, call, callgate

WRITE = call("save", "file", "write", path="data/out.txt", text="hi")


def _approve_when_pending(server: Server, approve: bool, *,
                          via_cli: bool = False) -> threading.Thread:
    def run() -> None:
        with server.http(server.approver) as http:
            for _ in range(200):
                pending = http.get("/v1/approvals", params={"state": "pending"}).json()
                if pending["approvals"]:
                    found = pending["approvals"][0]["id"]
                    if via_cli:
                        verb = "approve" if approve else "deny"
                        callgate("approvals", verb, found, "--url", server.url, "--key",
                                 server.approver)
                    else:
                        http.post(f"/v1/approvals/{found}", json={"approve": approve})
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _kinds(server: Server, run_id: str) -> list[Any]:
    store = AuditStore.open(server.audit)
    try:
        return [r.payload.get("kind") for r in store.records(run_id) if r.kind == "system"]
    finally:
        store.close()


def test_a_waiting_call_is_allowed_once_the_approvals_cli_approves_it(server: Server) -> None:
    thread = _approve_when_pending(server, True, via_cli=True)
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": WRITE, "wait": 20,
                                                "run_id": _run(http)}).json()
    thread.join()
    assert answer["verdict"] == "allow"
    assert answer["reasons"][0]["id"] == "approval.granted"
    assert answer["receipt"]["body"]["verdict"] == "allow"
    kinds = _kinds(server, answer["run_id"])
    assert {"approval-requested", "approval-approved", "approval-used"} <= set(kinds)


def test_a_denied_approval_is_a_deny_for_the_waiting_call(server: Server) -> None:
    thread = _approve_when_pending(server, False)
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": WRITE, "wait": 20,
                                                "run_id": _run(http)}).json()
    thread.join()
    assert answer["verdict"] == "deny" and answer["reasons"][0]["id"] == "approval.denied"


def test_a_call_nobody_answers_is_denied_at_its_timeout_and_the_approval_closes(
        server: Server) -> None:
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": WRITE, "wait": 0.3,
                                                "run_id": _run(http)}).json()
        assert answer["verdict"] == "deny" and "no answer" in answer["reasons"][0]["message"]
        approval_id = answer.get("approval", {}).get("id")
    with server.http(server.approver) as http:
        late = [a for a in http.get("/v1/approvals").json()["approvals"]
                if a["run_id"] == answer["run_id"]]
        assert late and late[-1]["state"] == "expired"
        assert http.post(f"/v1/approvals/{late[-1]['id']}",
                         json={"approve": True}).status_code == 409
    assert approval_id is None  # the deny carries no approval to redeem


def test_an_approval_is_single_use_and_bound_to_its_arguments(server: Server) -> None:
    with server.http(server.key) as http:
        asked = http.post("/v1/decide", json={"call": WRITE, "run_id": _run(http)}).json()
        assert asked["verdict"] == "require-approval"
        approval_id = asked["approval"]["id"]
        assert http.post(f"/v1/approvals/{approval_id}",
                         json={"approve": True}).status_code == 403  # not an approver key
        with server.http(server.approver) as boss:
            assert boss.post(f"/v1/approvals/{approval_id}",
                             json={"approve": True}).status_code == 200
        changed = {**WRITE, "parameters": {"path": "data/out.txt", "text": "rm -rf"}}
        other = http.post("/v1/decide", json={"call": changed, "run_id": asked["run_id"],
                                              "approval_id": approval_id}).json()
        assert other["verdict"] == "deny" and "other arguments" in \
            other["reasons"][0]["message"]
        used = http.post("/v1/decide", json={"call": WRITE, "run_id": asked["run_id"],
                                             "approval_id": approval_id}).json()
        assert used["verdict"] == "allow" and used["call_id"] == asked["call_id"]
        replay = http.post("/v1/decide", json={"call": WRITE, "run_id": asked["run_id"],
                                               "approval_id": approval_id}).json()
        assert replay["verdict"] == "deny" and "used" in replay["reasons"][0]["message"]
        forged = http.post("/v1/decide", json={"call": WRITE, "run_id": asked["run_id"],
                                               "approval_id": "apr_forged"}).json()
        assert forged["verdict"] == "deny"
    assert "approval-refused" in _kinds(server, asked["run_id"])


def test_an_approval_cannot_be_redeemed_in_another_run(server: Server) -> None:
    with server.http(server.key) as http, server.http(server.approver) as boss:
        asked = http.post("/v1/decide", json={"call": WRITE, "run_id": _run(http)}).json()
        boss.post(f"/v1/approvals/{asked['approval']['id']}", json={"approve": True})
        elsewhere = http.post("/v1/runs", json={}).json()["run_id"]
        moved = http.post("/v1/decide", json={"call": WRITE, "run_id": elsewhere,
                                              "approval_id": asked["approval"]["id"]}).json()
    assert moved["verdict"] == "deny"


def test_execute_waits_for_an_approval_and_runs_the_write(server: Server) -> None:
    thread = _approve_when_pending(server, True)
    with Client(server.url, server.key) as client:
        result = client.execute(call("save", "file", "write", path="data/approved.txt",
                                     content="ok"))
    thread.join()
    assert result.status == "ok", result
    assert (server.root / "data" / "approved.txt").read_text() == "ok"


def test_a_run_goes_on_after_a_restart_with_its_obligations_and_pending_approval(
        fresh: Server) -> None:
    fresh.start()
    with Client(fresh.url, fresh.key) as client:
        run_id = client.run_id
        client.check(call("open_ticket", "mcp", "call", id="T-9"))
        asked = client.decide(WRITE)
    assert fresh.stop(signal.SIGTERM) == 0
    fresh.start()
    try:
        with Client(fresh.url, fresh.key, run_id=run_id) as client, \
                fresh.http(fresh.approver) as boss:
            assert [v.statement for v in client.open_obligations()] == ["close-after-open"]
            assert boss.post(f"/v1/approvals/{asked['approval']['id']}",
                             json={"approve": True}).status_code == 200
            used = client.decide(WRITE, approval_id=asked["approval"]["id"])
            assert used["verdict"] == "allow"
            assert client.report(used["call_id"], output="written").status == "ok"
            client.check(call("close_ticket", "mcp", "call", id="T-9"))
            assert client.end_run() == []
    finally:
        fresh.stop()
    assert "run-resumed" in {r.kind if r.kind != "system" else r.payload.get("kind")
                             for r in _records(fresh.audit, run_id)}
    assert callgate("audit", "verify", str(fresh.audit)).returncode == 0


def test_a_killed_sidecar_keeps_what_it_had_flushed(fresh: Server) -> None:
    fresh.start()
    with Client(fresh.url, fresh.key) as client:
        run_id = client.run_id
        client.check(call("open_ticket", "mcp", "call", id="T-1"))
    time.sleep(2.6)  # past the flush interval
    fresh.stop(signal.SIGKILL)
    fresh.start()
    try:
        with Client(fresh.url, fresh.key, run_id=run_id) as client:
            assert [v.statement for v in client.end_run()] == ["close-after-open"]
    finally:
        fresh.stop()


def _records(audit: Path, run_id: str) -> list[Any]:
    store = AuditStore.open(audit)
    try:
        return list(store.records(run_id))
    finally:
        store.close()


def _run(http: Any) -> str:
    return str(http.post("/v1/runs", json={}).json()["run_id"])


def test_an_approval_used_after_its_expiry_is_refused_though_it_was_approved(
        fresh: Server) -> None:
    fresh.args[fresh.args.index("--approval-ttl") + 1] = "1"
    fresh.start()
    with fresh.http(fresh.key) as http, fresh.http(fresh.approver) as boss:
        asked = http.post("/v1/decide", json={"call": WRITE, "run_id": _run(http)}).json()
        approval_id = asked["approval"]["id"]
        assert boss.post(f"/v1/approvals/{approval_id}", json={"approve": True}).status_code \
            == 200
        time.sleep(1.5)
        late = http.post("/v1/decide", json={"call": WRITE, "run_id": asked["run_id"],
                                             "approval_id": approval_id}).json()
    assert late["verdict"] == "deny" and "expired" in late["reasons"][0]["message"]


def test_an_approval_does_not_carry_a_call_past_a_quarantine_that_came_after_it(
        server: Server) -> None:
    with server.http(server.key) as http, server.http(server.approver) as boss:
        asked = http.post("/v1/decide", json={"call": WRITE, "run_id": _run(http)}).json()
        approval_id = asked["approval"]["id"]
        boss.post(f"/v1/approvals/{approval_id}", json={"approve": True})
        refused = call("fetch", "http", "get", url="https://evil.example.net/x")
        for _ in range(6):  # denials until the run is quarantined (read-only)
            http.post("/v1/decide", json={"call": refused, "run_id": asked["run_id"]})
        used = http.post("/v1/decide", json={"call": WRITE, "run_id": asked["run_id"],
                                             "approval_id": approval_id}).json()
    assert used["verdict"] == "deny" and "quarantined" in used["reasons"][0]["message"]


def test_a_sidecar_killed_before_it_saved_a_run_quarantines_it_and_reuses_no_call_id(
        fresh: Server) -> None:
    fresh.start()
    with Client(fresh.url, fresh.key) as client:
        run_id = client.run_id
        client.check(call("open_ticket", "mcp", "call", id="T-1"))
        time.sleep(2.6)  # saved
        client.check(call("open_ticket", "mcp", "call", id="T-2"))  # in the log, not saved
        lost = client.check(call("fetch", "http", "get", url="https://api.example.org/a"))
    fresh.stop(signal.SIGKILL)
    fresh.start()
    try:
        with fresh.http(fresh.key) as http:
            after = http.post("/v1/decide", json={"call": call(
                "save", "file", "write", path="data/x.txt", text="x"), "run_id": run_id}).json()
    finally:
        fresh.stop()
    # the state lacks what was decided after the save: the run is read-only from here on
    assert after["verdict"] == "deny" and after["reasons"][0]["check"] == "run-state"
    records = _records(fresh.audit, run_id)
    assert any(r.kind == "system" and r.payload.get("kind") == "state-gap" for r in records)
    ids = [r.payload["call"]["id"] for r in records if r.kind == "decision"]
    assert len(ids) == len(set(ids)) and lost.call_id in ids and after["call_id"] in ids

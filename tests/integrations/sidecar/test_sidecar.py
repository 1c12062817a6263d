"""The sidecar over real sockets: decisions as ``callgate decide`` prints them, receipts, the
client mirroring ``Kernel``, keys and the attacks on them, bounded and checked bodies."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from callgate import Decision, Denied, ToolResult
from callgate.audit import AuditStore
from callgate.client import AsyncClient, Client, SidecarError, verify_receipt
from tests.integrations.sidecar.conftest import POLICY, Server, call, callgate

FETCH = call("fetch", "http", "get", url="https://api.example.org/x")


def test_keys_add_prints_the_key_alone_on_stdout_and_stores_only_its_digest(tmp_path: Path
                                                                            ) -> None:
    done = callgate("keys", "add", "ci", "--keys", str(tmp_path / "k.json"))
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) >= 32
    assert all(c.isalnum() or c in "-_" for c in lines[0])
    assert "ci" in done.stderr and lines[0] not in done.stderr
    assert lines[0] not in (tmp_path / "k.json").read_text()
    assert callgate("keys", "add", "ci", "--keys", str(tmp_path / "k.json")).returncode == 2
    assert callgate("keys", "revoke", "nobody", "--keys", str(tmp_path / "k.json")).returncode == 1


def test_decide_answers_as_callgate_decide_prints_plus_run_and_a_verifiable_receipt(
        server: Server) -> None:
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": FETCH}).json()
        public = http.get("/v1/keys").json()["keys"][0]["public_key"]
    assert answer["verdict"] == "allow"
    assert answer["reasons"] == [{"id": "allow-rest", "check": "rule",
                                  "message": "fine"}]
    assert answer["run_id"].startswith("run_") and answer["call_id"]
    receipt = answer["receipt"]
    assert receipt["body"]["verdict"] == "allow" and receipt["body"]["principal"] == "test-agent"
    assert verify_receipt(receipt, public, call=FETCH)
    assert not verify_receipt(receipt, public, call={**FETCH, "parameters": {"url": "x"}})
    forged = {**receipt, "body": {**receipt["body"], "verdict": "deny"}}
    assert not verify_receipt(forged, public)
    # an old receipt is no permission now, nor is a genuine receipt of a deny
    assert not verify_receipt(receipt, public, call=FETCH,
                              now=receipt["body"]["issued_at"] + 3600)
    assert verify_receipt(receipt, public, call=FETCH, max_age_s=None,
                          now=receipt["body"]["issued_at"] + 3600)


def test_a_genuine_receipt_of_a_deny_does_not_verify_as_a_permission(server: Server) -> None:
    denied = call("fetch", "http", "get", url="https://evil.example.com/")
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": denied}).json()
        public = http.get("/v1/keys").json()["keys"][0]["public_key"]
    assert answer["verdict"] == "deny"
    assert not verify_receipt(answer["receipt"], public, call=denied)
    assert verify_receipt(answer["receipt"], public, call=denied, verdict="deny")


def test_the_decision_equals_what_callgate_decide_prints_for_the_same_call(server: Server
                                                                           ) -> None:
    denied = call("fetch", "http", "get", url="https://evil.example.com/")
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": denied}).json()
    done = subprocess_decide(server, denied)
    assert {k: answer[k] for k in ("verdict", "reasons")} == done


def subprocess_decide(server: Server, one: dict[str, object]) -> dict[str, object]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "callgate.cli", "decide", "--policy",
                          "policy.yaml"], input=json.dumps(one), capture_output=True, text=True,
                         cwd=server.root, check=True)
    return dict(json.loads(out.stdout))


def test_the_client_mirrors_the_kernel_check_report_and_end_run(server: Server) -> None:
    with Client(server.url, server.key) as client:
        decision = client.check(FETCH)
        assert isinstance(decision, Decision) and decision.verdict == "allow"
        result = client.report(decision.call_id, output="page text")
        assert isinstance(result, ToolResult) and "web" in {t.source for t in result.taint}
        with pytest.raises(SidecarError) as missing:
            client.report(decision.call_id)  # once only, as the kernel
        assert missing.value.status == 404
        client.check(call("open_ticket", "mcp", "call", id="T-1"))
        assert [v.statement for v in client.open_obligations()] == ["close-after-open"]
        violations = client.end_run()
        assert [v.statement for v in violations] == ["close-after-open"]
        with pytest.raises(SidecarError):
            client.check(FETCH)  # the run has ended


def test_the_async_client_mirrors_the_kernel_too(server: Server) -> None:
    async def go() -> tuple[str, str | None, list[object]]:
        async with AsyncClient(server.url, server.key) as client:
            decision = await client.check(call("fetch", "http", "get",
                                               url="https://evil.example.com/"))
            return decision.verdict, client.run_id, await client.end_run()

    verdict, run_id, violations = asyncio.run(go())
    assert verdict == "deny" and run_id and violations == []


def test_the_async_client_asks_and_answers_approvals(server: Server) -> None:
    write = call("save", "file", "write", path="data/async.txt", text="x")

    async def go() -> tuple[str, dict[str, object], str]:
        async with AsyncClient(server.url, server.key) as agent, \
                AsyncClient(server.url, server.approver) as boss:
            asked = await agent.decide(write)
            approval_id = str(asked["approval"]["id"])
            assert approval_id in {a["id"] for a in await boss.approvals()}
            answered = await boss.answer_approval(approval_id, True)
            seen = await agent.approval(approval_id)
            return str(answered["state"]), seen, approval_id

    state, seen, approval_id = asyncio.run(go())
    assert state == "approved" and seen["id"] == approval_id and seen["state"] == "approved"


def test_execute_runs_the_call_with_the_sidecars_own_executors(server: Server) -> None:
    with Client(server.url, server.key) as client:
        result = client.execute(call("read", "file", "read", path="data/notes.txt"))
        assert result.status == "ok" and "hello" in json.dumps(result.output)
        with pytest.raises(Denied) as denied:
            client.execute(call("read", "file", "read", path="/etc/passwd"))
        assert denied.value.decision.verdict == "deny"


def test_relative_paths_resolve_against_the_sidecars_working_directory(server: Server) -> None:
    with server.http(server.key) as http:
        answer = http.post("/v1/decide", json={"call": call(
            "read", "file", "read", path="data/notes.txt")}).json()
    assert answer["verdict"] == "allow"
    assert answer["checked_parameters"]["path"] == str(server.root.resolve() / "data/notes.txt")


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc", "Bearer  x y"])
def test_no_or_a_wrong_key_is_401_and_audited(server: Server, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    with server.http() as http:
        response = http.post("/v1/decide", json={"call": FETCH}, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["field"] == "authorization"
    store = AuditStore.open(server.audit)
    try:
        kinds = [r.payload.get("kind") for r in store.records("callgate-sidecar")]
    finally:
        store.close()
    assert "auth-refused" in kinds


def test_a_revoked_key_stops_working_on_the_running_sidecar(server: Server) -> None:
    key = callgate("keys", "add", "temp", "--keys", str(server.keys)).stdout.strip()
    with server.http(key) as http:
        assert http.post("/v1/runs", json={}).status_code == 201
        assert callgate("keys", "revoke", "temp", "--keys", str(server.keys)).returncode == 0
        assert http.post("/v1/runs", json={}).status_code == 401


def test_a_key_bound_to_another_principal_is_refused(server: Server) -> None:
    key = callgate("keys", "add", "stranger", "--keys", str(server.keys), "--principal",
                   "someone-else").stdout.strip()
    with server.http(key) as http:
        assert http.post("/v1/decide", json={"call": FETCH}).status_code == 401


def test_a_key_bound_to_another_policy_is_refused_and_one_bound_to_this_one_works(
        server: Server, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text((server.root / "policy.yaml").read_text() + "# changed\n")
    mine = callgate("keys", "add", "mine", "--keys", str(server.keys), "--policy",
                    str(server.root / "policy.yaml")).stdout.strip()
    theirs = callgate("keys", "add", "theirs", "--keys", str(server.keys), "--policy",
                      str(other)).stdout.strip()
    with server.http(mine) as http:
        assert http.post("/v1/decide", json={"call": FETCH}).status_code == 200
    with server.http(theirs) as http:
        assert http.post("/v1/decide", json={"call": FETCH}).status_code == 401


def test_a_malformed_keys_entry_admits_nobody_and_breaks_nothing(server: Server) -> None:
    data = json.loads(server.keys.read_text())
    data["keys"].append({"name": "broken", "sha256": "not-hex", "role": "agent"})
    data["keys"].append({"name": "odd-role", "sha256": "0" * 64, "role": "root"})
    server.keys.write_text(json.dumps(data))
    with server.http("whatever") as http:
        assert http.post("/v1/runs", json={}).status_code == 401
    with server.http(server.key) as http:  # the good keys still work
        assert http.post("/v1/runs", json={}).status_code == 201


@pytest.mark.parametrize("field", ["principal", "run_id", "id", "sequence", "timestamp"])
def test_a_call_cannot_name_its_principal_or_run(server: Server, field: str) -> None:
    with server.http(server.key) as http:
        response = http.post("/v1/decide", json={"call": {**FETCH, field: "admin"}})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == f"call.{field}"


def test_another_keys_run_is_not_found(server: Server) -> None:
    with server.http(server.key) as mine, server.http(server.other) as theirs:
        run_id = mine.post("/v1/runs", json={}).json()["run_id"]
        response = theirs.post("/v1/decide", json={"call": FETCH, "run_id": run_id})
        assert response.status_code == 404
        assert theirs.post(f"/v1/runs/{run_id}/end").status_code == 404
        assert mine.post(f"/v1/runs/{run_id}/end").status_code == 200


def test_an_approver_key_cannot_decide_calls(server: Server) -> None:
    with server.http(server.approver) as http:
        assert http.post("/v1/decide", json={"call": FETCH}).status_code == 403


@pytest.mark.parametrize(("body", "status", "field"), [
    (b"x" * (1 << 20 | 1), 413, "body"),
    (b"[" * 200 + b"]" * 200, 400, "body"),
    (b'{"call": "\xff"}', 400, "body"),
    (b"{not json", 400, "body"),
    (b"[]", 422, "body"),
    (b'{"call": {"tool": 3, "tool_class": "http", "action": "get"}}', 422, "call.tool"),
    (b'{"call": {"tool": "t", "tool_class": "http"}}', 422, "call.action"),
    (b'{"call": {"tool": "t", "tool_class": "h", "action": "a", "parameters": []}}', 422,
     "call.parameters"),
    (b'{"call": {"tool": "t", "tool_class": "h", "action": "a"}, "wait": "soon"}', 422,
     "wait"),
    (b'{"call": {"tool": "t", "tool_class": "h", "action": "a"}, "extra": 1}', 422, "extra"),
    (b'{"call": {"tool": "t", "tool_class": "h", "action": "a"}, "run_id": 5}', 422,
     "run_id"),
])
def test_bad_bodies_are_refused_naming_the_field(server: Server, body: bytes, status: int,
                                                 field: str) -> None:
    with server.http(server.key) as http:
        response = http.post("/v1/decide", content=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["field"] == field and error["message"]


def test_the_server_keeps_serving_after_bad_requests(server: Server) -> None:
    with server.http(server.key) as http:
        for _ in range(3):
            http.post("/v1/decide", content=b"\xff\xfe")
        assert http.post("/v1/decide", json={"call": FETCH}).json()["verdict"] == "allow"


def test_metrics_count_decisions_by_verdict_and_reason(server: Server) -> None:
    with server.http(server.key) as http:
        http.post("/v1/decide", json={"call": call("fetch", "http", "get",
                                                   url="https://evil.example.com/")})
        text = http.get("/metrics").text
    assert 'callgate_decisions_total{verdict="deny"}' in text
    assert 'callgate_decision_reasons_total{check="capability"' in text
    assert "callgate_decision_seconds_bucket" in text and "callgate_open_runs" in text


def test_the_openapi_document_lists_the_v1_routes(server: Server) -> None:
    with server.http() as http:
        doc = http.get("/openapi.json").json()
    assert {"/v1/decide", "/v1/execute", "/v1/results", "/v1/approvals"} <= set(doc["paths"])


def test_the_sidecar_serves_on_a_unix_socket(tmp_path: Path) -> None:
    from tests.integrations.sidecar.conftest import make_server

    made = make_server(tmp_path, unix=True)
    made.start()
    try:
        assert made.unix is not None
        with Client(made.url, made.key, uds=made.unix) as client:
            assert client.check(FETCH).verdict == "allow"
    finally:
        assert made.stop(signal.SIGTERM) == 0
    assert not Path(made.unix).exists()


def test_an_unreachable_sidecar_is_an_error_not_an_allow() -> None:
    with Client("http://127.0.0.1:9", "k", run_id="r", timeout=2) as client, \
            pytest.raises(SidecarError) as failed:
        client.check(FETCH)
    assert failed.value.status == 0


def test_an_internal_error_on_a_decision_route_is_an_audited_deny(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    from tests.integrations.sidecar.conftest import make_server

    made = make_server(tmp_path)
    from callgate.integrations.sidecar._app import build_app
    from callgate.integrations.sidecar._keys import KeyRing
    from callgate.integrations.sidecar._service import Sidecar
    from callgate.policy import parse_policy

    sidecar = Sidecar(parse_policy((tmp_path / "policy.yaml").read_text()),
                      policy_bytes=b"p", keys=KeyRing(made.keys), state_dir=tmp_path / "state",
                      working_dir=tmp_path)

    async def broken(*args: object, **kwargs: object) -> dict[str, object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(sidecar, "decide", broken)
    app = build_app(sidecar, policy_path=str(tmp_path / "policy.yaml"))

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post("/v1/decide", json={"call": FETCH},
                                   headers={"Authorization": f"Bearer {made.key}"})

    response = asyncio.run(go())
    sidecar.close()
    assert response.status_code == 200
    body = response.json()
    assert body["verdict"] == "deny" and body["reasons"][0]["id"] == "internal.error"
    store = AuditStore.open(tmp_path / "state" / "audit.db")
    try:
        kinds = [r.payload.get("kind") for r in store.records("callgate-sidecar")]
    finally:
        store.close()
    assert "sidecar-error" in kinds


def test_a_flood_of_bad_keys_cannot_fill_the_audit_log(fresh: Server) -> None:
    fresh.start()
    try:
        with fresh.http("wrong-key") as http:
            for _ in range(100):
                assert http.post("/v1/runs", json={}).status_code == 401
        time.sleep(1.1)
        with fresh.http("wrong-again") as http:
            assert http.post("/v1/runs", json={}).status_code == 401
    finally:
        fresh.stop()
    store = AuditStore.open(fresh.audit)
    try:
        refused = [r.payload["data"] for run in store.run_ids() for r in store.records(run)
                   if r.kind == "system" and r.payload.get("kind") == "auth-refused"]
    finally:
        store.close()
    assert len(refused) < 100  # the flood was counted, not written record by record
    assert sum(r.get("suppressed_before", 0) for r in refused) + len(refused) == 101


def test_serve_refuses_a_store_and_a_local_audit_log_together(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(POLICY)
    done = callgate("serve", "--policy", str(tmp_path / "p.yaml"), "--keys",
                    str(tmp_path / "k.json"), "--store", "postgresql://u:pw@127.0.0.1:1/x",
                    "--audit", str(tmp_path / "a.db"))
    assert done.returncode == 2 and "not both" in done.stderr
    assert "pw@" not in done.stderr


def test_the_audit_signing_key_is_the_one_named(fresh: Server, tmp_path: Path) -> None:
    key = tmp_path / "shared" / "audit.key"
    key.parent.mkdir()
    fresh.args += ["--audit-key", str(key)]
    fresh.start()
    try:
        with fresh.http(fresh.key) as http:
            assert http.post("/v1/decide", json={"call": FETCH}).status_code == 200
    finally:
        fresh.stop()
    assert key.exists() and oct(key.stat().st_mode & 0o777) == "0o600"
    assert not (fresh.root / "audit.db.key").exists()
    verified = callgate("audit", "verify", str(fresh.audit), "--public-key", f"{key}.pub")
    assert verified.returncode == 0, verified.stdout + verified.stderr

"""OpenTelemetry export: spans sent by the SDK's OTLP/HTTP exporter to a real receiver on
127.0.0.1, checked against the log; the live exporter never changes a decision; redaction."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from callgate import Kernel
from callgate.audit import AuditRecord, AuditStore, verify_file
from callgate.audit._export import check_spans, export_spans
from callgate.audit._otel import OtlpExporter, send_spans
from callgate.cli._demo import POLICY
from callgate.policy._loader import parse_policy

CALLGATE = str(Path(sys.executable).parent / "callgate")
GET = {"tool": "web_get", "tool_class": "http", "action": "get",
       "parameters": {"url": "https://docs.example.org/setup"}}
STEAL = {"tool": "read_file", "tool_class": "file", "action": "read",
         "parameters": {"path": "/etc/shadow"}}


class Receiver:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` protobuf, decoded to plain spans."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces" or \
                        self.headers["Content-Type"] != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        owner.spans.extend(_plain(span) for span in scope.spans)
                owner.arrived.set()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _plain(span: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            attrs[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.array_value.values]
        else:
            attrs[kv.key] = getattr(value, kind)
    return {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "status": span.status.code, "attributes": attrs}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


def _kernel_run(path: Path, *observers: Any) -> list[str]:
    """A short run through a real kernel: an allowed call that runs, a denied one."""
    store = AuditStore.open(path)
    for observer in observers:
        store.add_observer(observer)
    kernel = Kernel(parse_policy(POLICY, source="demo.yaml"), audit=store)
    kernel.register_executor("http", lambda call: "the page")
    verdicts = [kernel.mediate(GET)[0].verdict, kernel.check(STEAL).verdict]
    kernel.close()
    store.close()
    return verdicts


def test_exported_spans_reach_an_otlp_receiver_and_match_the_log(tmp_path: Path,
                                                                 receiver: Receiver) -> None:
    path = tmp_path / "a.db"
    _kernel_run(path)
    with AuditStore.open(path, read_only=True) as store:
        spans = list(export_spans(store))
        records = {r.seq: r for run in store.run_ids() for r in store.records(run)}
    assert send_spans(spans, receiver.url) == 2
    got = {s["span_id"]: s for s in receiver.spans}
    assert set(got) == {s.span_id for s in spans}
    allowed, denied = (got[s.span_id] for s in spans)
    assert allowed["name"] == "execute_tool web_get"
    attrs = allowed["attributes"]
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "web_get"
    assert attrs["gen_ai.tool.call.id"].endswith(":1")
    assert attrs["callgate.verdict"] == "allow" and attrs["callgate.taint.out"] == ["web"]
    assert records[attrs["callgate.audit.seq"]].hash == attrs["callgate.audit.hash"]
    assert records[attrs["callgate.audit.result.seq"]].hash == \
        attrs["callgate.audit.result.hash"]
    assert denied["attributes"]["callgate.verdict"] == "deny"
    assert denied["attributes"]["callgate.reason.ids"] == ["capability.constraint"]
    assert denied["status"] == 2  # STATUS_CODE_ERROR
    assert denied["attributes"]["callgate.principal"] == "research-agent"


def test_arguments_and_outputs_are_redacted_unless_enabled(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    _kernel_run(path)
    with AuditStore.open(path, read_only=True) as store:
        plain = json.dumps([s.to_json() for s in export_spans(store)])
        full = [s.to_json() for s in export_spans(store, include_arguments=True,
                                                  include_outputs=True)]
    for secret in ("docs.example.org", "/etc/shadow", "the page", "outside the allowed"):
        assert secret not in plain
    assert json.loads(full[0]["attributes"]["gen_ai.tool.call.arguments"]) == GET["parameters"]
    assert json.loads(full[0]["attributes"]["gen_ai.tool.call.result"]) == "the page"


def test_check_spans_names_a_span_whose_hash_is_not_the_logs(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    _kernel_run(path)
    with AuditStore.open(path, read_only=True) as store:
        spans = [s.to_json() for s in export_spans(store)]
        assert check_spans(store, spans) == (2, [])
        spans[1]["attributes"]["callgate.audit.hash"] = "0" * 64
        count, problems = check_spans(store, spans)
    assert count == 2 and len(problems) == 1 and "span 2" in problems[0]


@pytest.mark.parametrize("change", ["verdict", "taint", "name", "drop", "add", "time"])
def test_check_spans_finds_a_span_whose_content_differs_from_its_record(
        tmp_path: Path, change: str) -> None:
    path = tmp_path / "a.db"
    _kernel_run(path)
    with AuditStore.open(path, read_only=True) as store:
        spans = [s.to_json() for s in export_spans(store)]
        attrs = spans[1]["attributes"]
        if change == "verdict":  # a deny told as an allow
            attrs["callgate.verdict"] = "allow" if attrs["callgate.verdict"] == "deny" else "deny"
        elif change == "taint":
            attrs["callgate.taint.in"] = ["nothing"]
        elif change == "name":
            spans[1]["name"] = "execute_tool harmless"
        elif change == "drop":
            del attrs["callgate.reason.ids"]
        elif change == "add":
            attrs["callgate.approved_by"] = "nobody"
        else:
            spans[1]["end_time_unix_nano"] += 10**9
        count, problems = check_spans(store, spans)
    assert count == 2 and len(problems) == 1 and problems[0].startswith("span 2")


def test_check_spans_accepts_a_redacted_export_and_complete_needs_every_call(
        tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    _kernel_run(path)
    with AuditStore.open(path, read_only=True) as store:
        full = [s.to_json() for s in export_spans(store, include_arguments=True,
                                                  include_outputs=True)]
        plain = [s.to_json() for s in export_spans(store)]
        assert check_spans(store, full) == (2, []) and check_spans(store, plain) == (2, [])
        assert check_spans(store, plain[:1]) == (1, [])
        count, problems = check_spans(store, plain[:1], complete=True)
    assert count == 1 and len(problems) == 1 and "has no span" in problems[0]


def test_the_live_exporter_sends_one_span_per_decided_call(tmp_path: Path,
                                                          receiver: Receiver) -> None:
    exporter = OtlpExporter(receiver.url)
    _kernel_run(tmp_path / "a.db", exporter)
    exporter.shutdown()
    assert receiver.arrived.wait(10)
    names = sorted(s["name"] for s in receiver.spans)
    assert names == ["execute_tool read_file", "execute_tool web_get"]
    with AuditStore.open(tmp_path / "a.db", read_only=True) as store:
        exported = {s.span_id: s.to_json()["attributes"] for s in export_spans(store)}
    for span in receiver.spans:  # live spans are the exported ones, attribute for attribute
        assert span["attributes"] == exported[span["span_id"]]
    assert "gen_ai.tool.call.arguments" not in receiver.spans[0]["attributes"]


def test_a_collector_that_is_down_or_an_observer_that_raises_changes_no_decision(
        tmp_path: Path) -> None:
    def broken(record: AuditRecord) -> None:
        raise RuntimeError("observer down")

    down = OtlpExporter("http://127.0.0.1:9/v1/traces", timeout_s=0.5)
    verdicts = _kernel_run(tmp_path / "a.db", down, broken)
    assert verdicts == _kernel_run(tmp_path / "b.db") == ["allow", "deny"]
    down.shutdown()  # the failed send is logged, not raised
    assert verify_file(tmp_path / "a.db").ok


def test_export_and_check_export_commands_on_the_demo_log(tmp_path: Path,
                                                          receiver: Receiver) -> None:
    db = tmp_path / "demo.db"
    subprocess.run([CALLGATE, "demo", "--audit", str(db)], capture_output=True, check=True,
                   cwd=tmp_path, timeout=60)
    sent = subprocess.run([CALLGATE, "audit", "export", str(db), "--format", "otlp",
                           "--endpoint", receiver.url], capture_output=True, text=True,
                          timeout=60, check=False)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("sent 8 spans") and len(receiver.spans) == 8
    spans = tmp_path / "spans.jsonl"
    done = subprocess.run([CALLGATE, "audit", "export", str(db), "--output", str(spans)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert {json.loads(line)["span_id"] for line in spans.read_text().splitlines()} == \
        {s["span_id"] for s in receiver.spans}
    checked = subprocess.run([CALLGATE, "audit", "check-export", str(db), str(spans)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0 and checked.stdout.startswith("ok: 8 spans match")
    complete = subprocess.run([CALLGATE, "audit", "check-export", str(db), str(spans),
                               "--complete"], capture_output=True, text=True, timeout=60,
                              check=False)
    assert complete.returncode == 0 and "every decided call has one" in complete.stdout
    spans.write_text(spans.read_text().replace('"callgate.audit.seq": 2,',
                                               '"callgate.audit.seq": 4,', 1))
    broken = subprocess.run([CALLGATE, "audit", "check-export", str(db), str(spans)],
                            capture_output=True, text=True, timeout=60, check=False)
    # the span now names another decision than its own: every field that differs is named
    assert broken.returncode == 1 and "in 8 spans and the log" in broken.stdout
    assert broken.stdout.startswith("span 1 (execute_tool web_get): name is")


def test_a_sidecar_with_otlp_endpoint_sends_its_decisions_as_spans(tmp_path: Path,
                                                                   receiver: Receiver) -> None:
    from tests.integrations.sidecar.conftest import call, make_server

    sidecar = make_server(tmp_path)
    sidecar.args += ["--otlp-endpoint", receiver.url]
    sidecar.start()
    try:
        with sidecar.http(sidecar.key) as http:
            allowed = http.post("/v1/decide", json={"call": call(
                "fetch", "http", "get", url="https://api.example.org/x")}).json()
            denied = http.post("/v1/decide", json={"call": call(
                "fetch", "http", "get", url="https://evil.example.net/x")}).json()
    finally:
        sidecar.stop()  # the exporter flushes on the way out
    assert receiver.arrived.wait(10)
    verdicts = {s["attributes"]["gen_ai.tool.call.id"]: s["attributes"]["callgate.verdict"]
                for s in receiver.spans}
    assert verdicts[allowed["call_id"]] == "allow" and verdicts[denied["call_id"]] == "deny"
    assert all("gen_ai.tool.call.arguments" not in s["attributes"] for s in receiver.spans)

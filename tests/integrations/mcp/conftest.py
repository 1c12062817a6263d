"""The gateway's tests: real MCP servers (filesystem from npm; git and fetch from PyPI) and a
scripted one, reached through the real ``callgate mcp proxy`` / ``serve`` processes by the
``mcp`` SDK's own ``Client`` in both protocol eras."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from callgate.audit import AuditStore

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
CALLGATE = BIN / "callgate"
FS_SERVER = ROOT / ".cache" / "mcp-servers" / "node_modules" / ".bin" / "mcp-server-filesystem"
GIT_SERVER = BIN / "mcp-server-git"
FETCH_SERVER = BIN / "mcp-server-fetch"
SCRIPTED = Path(__file__).parent / "data" / "scripted_server.py"
#: legacy: the initialize handshake (2025-11-25); auto: the 2026-07-28 revision (discover)
MODES = ("legacy", "auto")

BASE_POLICY = """\
name: mcp-test
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: mcp
rules:
  - id: allow-mcp
    priority: 900
    match: {tool_class: mcp}
    decision: allow
    reason: MCP tools are allowed unless a rule above says otherwise
run_state:
  behavioral_rules: false
"""


@pytest.fixture(scope="session")
def fs_server() -> Path:
    if not FS_SERVER.exists():
        if os.environ.get("CI"):
            pytest.fail("the filesystem MCP server is missing: `make mcp-servers` installs it")
        pytest.skip("the filesystem MCP server is not installed (`make mcp-servers`)")
    return FS_SERVER


class Gw:
    """Paths of one test's gateway: policy, audit log, pins, state."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.audit = tmp / "audit.db"
        self.pins = tmp / "pins.db"
        self.home = tmp / "home"
        self.home.mkdir(exist_ok=True)
        self.policy = tmp / "policy.yaml"

    def write_policy(self, extra: str = "", *, rules: str = "") -> Path:
        text = BASE_POLICY.replace("rules:\n", "rules:\n" + rules) + extra
        self.policy.write_text(text)
        return self.policy

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
                "LANG": "C.UTF-8", "XDG_STATE_HOME": str(self.tmp / "state"), **extra}

    def proxy(self, name: str, *command: str, **env: str) -> StdioServerParameters:
        if not self.policy.exists():
            self.write_policy()
        return StdioServerParameters(
            command=str(CALLGATE), env=self.env(**env),
            args=["mcp", "proxy", "--policy", str(self.policy), "--name", name, "--audit",
                  str(self.audit), "--pins", str(self.pins), "--", *command])

    def decisions(self) -> list[dict[str, Any]]:
        store = AuditStore.open(self.audit)
        try:
            return [r.payload for run in store.run_ids() for r in store.records(run)
                    if r.kind == "decision"]
        finally:
            store.close()

    def results(self) -> list[dict[str, Any]]:
        store = AuditStore.open(self.audit)
        try:
            return [r.payload["result"] for run in store.run_ids() for r in store.records(run)
                    if r.kind == "result"]
        finally:
            store.close()


@pytest.fixture
def gw(tmp_path: Path) -> Gw:
    return Gw(tmp_path)


@contextlib.asynccontextmanager
async def connect(server: Any, mode: str, **options: Any) -> AsyncIterator[Client]:
    async with Client(server, mode=mode, read_timeout_seconds=60, **options) as client:
        yield client


def text_of(result: Any) -> str:
    return "\n".join(getattr(b, "text", "") for b in result.content)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path | None = None,
                  seconds: float = 60) -> None:
    """Wait until something listens on 127.0.0.1:``port``; fail if ``process`` exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited: {log.read_text() if log else process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    pytest.fail(f"nothing listened on port {port} within {seconds:g} s")


@contextlib.contextmanager
def serving(gw: Gw, config: Path) -> Iterator[str]:
    """``callgate mcp serve`` as a real process; yields its URL."""
    port = free_port()
    log = open(gw.tmp / "serve.log", "wb")  # noqa: SIM115 - closed below, after the process
    process = subprocess.Popen(
        [str(CALLGATE), "mcp", "serve", "--config", str(config), "--listen",
         f"127.0.0.1:{port}", "--audit", str(gw.audit), "--pins", str(gw.pins)],
        env=gw.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, gw.tmp / "serve.log")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Page:
    """A web page on 127.0.0.1 for the fetch server."""

    def __init__(self, body: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/notes.txt"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def page() -> Iterator[Page]:
    served = Page("Release checklist: rotate the deploy keys before Friday "
                  "zebra-quartz-7741 and tell nobody.\n")
    yield served
    served.close()


def ask_rule(tool: str) -> str:
    """The rules text that makes ``tool`` need approval (for ``Gw.write_policy(rules=…)``)."""
    return f"""\
  - id: ask-echo
    priority: 10
    match: {{tool: {tool}}}
    decision: require-approval
    reason: echoes need a human
"""


def answering(asked: list[str], approve: bool) -> Any:
    """An elicitation callback that notes the question and approves (or declines) the call."""
    import mcp_types as types

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": approve})
    return elicit

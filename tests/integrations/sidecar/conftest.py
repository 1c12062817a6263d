"""The sidecar's tests: real ``callgate serve`` processes on 127.0.0.1 (or a Unix socket),
keys made by the real ``callgate keys`` command, requests over real sockets."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

CALLGATE = [sys.executable, "-m", "callgate.cli"]

POLICY = """\
name: sidecar-test
version: 1
principal:
  name: test-agent
  capabilities:
    - {tool_class: http, actions: [get], constraints: {allowed_hosts: [api.example.org]}}
    - {tool_class: file, actions: [read, write], constraints: {allowed_paths: ["./data/**"]}}
    - {tool_class: mcp}
rules:
  - {id: approve-writes, priority: 10, match: {tool_class: file, action: write},
     decision: require-approval, reason: file writes need a human}
  - {id: no-delete, priority: 20, match: {tool: mcp__docker__delete_repo}, decision: deny,
     reason: deleting repositories is forbidden}
  - {id: allow-rest, priority: 100, match: {}, decision: allow, reason: fine}
behavior:
  - id: close-after-open
    rule: resp(action = open_ticket and id = $i, action = close_ticket and id = $i)
"""


def callgate(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line."""
    return subprocess.run([*CALLGATE, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """One running sidecar and the keys made for it."""

    root: Path
    url: str
    key: str
    approver: str
    other: str
    unix: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    args: list[str] = field(default_factory=list)

    @property
    def keys(self) -> Path:
        return self.root / "keys.json"

    @property
    def audit(self) -> Path:
        return self.root / "audit.db"

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        transport = httpx.HTTPTransport(uds=self.unix) if self.unix else None
        return httpx.Client(base_url=self.url, headers=headers, transport=transport,
                            timeout=30)

    def start(self) -> None:
        with open(self.root / "serve.log", "ab") as log:
            self.proc = subprocess.Popen([*CALLGATE, "serve", *self.args], cwd=self.root,
                                         stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.root / "serve.log").read_text())
            if self.unix is not None and not Path(self.unix).exists():
                time.sleep(0.1)
                continue
            try:
                with self.http() as client:
                    if client.get("/healthz").status_code == 200:
                        return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the sidecar did not start")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self.proc = None
        return code


def make_server(root: Path, policy: str = POLICY, *, unix: bool = False) -> Server:
    """A sidecar in ``root`` (not started) with an agent, an approver and a second agent key."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "notes.txt").write_text("hello\n")
    (root / "policy.yaml").write_text(policy)
    keys = [callgate("keys", "add", name, "--keys", str(root / "keys.json"), *extra).stdout
            .strip() for name, extra in (("agent", ()), ("boss", ("--role", "approver")),
                                         ("other", ()))]
    args = ["--policy", "policy.yaml", "--keys", "keys.json", "--audit", "audit.db",
            "--approval-ttl", "30"]
    if unix:
        sock = str(root / "sidecar.sock")
        args += ["--unix", sock]
        return Server(root, "http://sidecar", *keys, unix=sock, args=args)
    port = free_port()
    args += ["--listen", f"127.0.0.1:{port}"]
    return Server(root, f"http://127.0.0.1:{port}", *keys, args=args)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One sidecar shared by a test module."""
    running = make_server(tmp_path_factory.mktemp("sidecar"))
    running.start()
    yield running
    running.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Server]:
    """A sidecar of the test's own (stopped at its end if still running)."""
    made = make_server(tmp_path)
    yield made
    if made.proc is not None:
        made.stop(signal.SIGKILL)


def call(tool: str, tool_class: str, action: str, **parameters: object) -> dict[str, object]:
    """A call object as ``callgate decide`` reads it."""
    return {"tool": tool, "tool_class": tool_class, "action": action, "parameters": parameters}



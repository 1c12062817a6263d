"""The MCP gateway's added latency per ``tools/call``: through ``callgate mcp proxy`` (stdio)
and ``callgate mcp serve`` (Streamable HTTP) against the same call made directly, in the same
run, with the ``mcp`` SDK's ``Client`` (2026-07-28 era) and a one-tool echo server.

The client speaks the same transport on both sides of each comparison: stdio to the echo
server or to the proxy (whose child is the echo server); HTTP to the echo server served over
HTTP, or to ``serve``, whose upstream is the echo server as a stdio child (the usual deployment:
one HTTP endpoint in front of local servers).

Goal: the p50 added by the gateway (p50 through it minus p50 direct) <= 2 ms, stdio and HTTP
each. The gateway does its whole job on every call: a kernel decision, the audit records of the
decision and of the result (SQLite), the output observation. Writes
benchmarks/out/mcp_gateway.json and .md.
Run: ``.venv/bin/python benchmarks/bench_mcp_gateway.py [CALLS]`` (default 1,000).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
BIN = Path(sys.executable).parent
ECHO = Path(__file__).with_name("_mcp_echo_server.py")
GOAL_ADDED_P50_MS = 2.0
WARMUP = 50
POLICY = """\
name: bench
version: 1
principal:
  name: agent
  capabilities: [{tool_class: mcp}]
rules:
  - {id: allow-mcp, match: {tool_class: mcp}, decision: allow}
run_state: {behavioral_rules: false}
mcp:
  servers:
    echo: {command: "PYTHON", args: ["ECHO"]}
"""


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(argv: list[str], port: int) -> Iterator[None]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(15)


async def measure(server: Any, tool: str, calls: int) -> list[float]:
    samples: list[float] = []
    async with Client(server, mode="2026-07-28" if isinstance(server, str) else "auto") as client:
        await client.list_tools()
        for i in range(WARMUP + calls):
            start = time.perf_counter()
            result = await client.call_tool(tool, {"text": f"message {i}"})
            elapsed = (time.perf_counter() - start) * 1000
            assert not result.is_error, result
            if i >= WARMUP:
                samples.append(elapsed)
    return samples


def figures(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(samples, 0.5), 3), "p99_ms": round(pct(samples, 0.99), 3)}


#: The gateway's policies measured: rules only, and the same with the built-in statement pack.
POLICIES = {"rules": POLICY, "pack": POLICY.replace("run_state: {behavioral_rules: false}\n", "")}


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    tmp = Path(tempfile.mkdtemp(prefix="callgate-mcp-bench-"))
    direct_stdio = StdioServerParameters(command=sys.executable, args=[str(ECHO)])
    report: dict[str, Any] = {"calls": calls}
    lines = [f"# MCP gateway: added latency per tools/call ({calls} calls each)", "",
             "| transport | gateway policy | direct p50 | gateway p50 | added p50 (goal <= 2 ms) "
             "| direct p99 | gateway p99 |", "|---|---|---|---|---|---|---|"]
    echo_port = free_port()
    with process([sys.executable, str(ECHO), "--http", str(echo_port)], echo_port):
        for kind, text in POLICIES.items():
            policy = tmp / f"{kind}.yaml"
            policy.write_text(text.replace("PYTHON", sys.executable).replace("ECHO", str(ECHO)))
            for name, runs in (("stdio", _stdio(tmp, kind, policy, direct_stdio, calls)),
                               ("http", _http(tmp, kind, policy, echo_port, calls))):
                direct, gateway = figures(runs["direct"]), figures(runs["gateway"])
                added = round(gateway["p50_ms"] - direct["p50_ms"], 3)
                report[f"{name}/{kind}"] = {"direct": direct, "gateway": gateway,
                                            "added_p50_ms": added,
                                            "goal_met": added <= GOAL_ADDED_P50_MS}
                lines.append(f"| {name} | {kind} | {direct['p50_ms']} ms | {gateway['p50_ms']} ms "
                             f"| {added} ms {'ok' if added <= GOAL_ADDED_P50_MS else 'MISSED'} | "
                             f"{direct['p99_ms']} ms | {gateway['p99_ms']} ms |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mcp_gateway.json").write_text(json.dumps(report, indent=2) + "\n")
    (OUT / "mcp_gateway.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _stdio(tmp: Path, kind: str, policy: Path, direct: StdioServerParameters,
           calls: int) -> dict[str, list[float]]:
    proxied = StdioServerParameters(command=str(BIN / "callgate"), args=[
        "mcp", "proxy", "--policy", str(policy), "--name", "echo-stdio", "--audit",
        str(tmp / f"stdio-{kind}.db"), "--pins", str(tmp / "pins.db"), "--",
        sys.executable, str(ECHO)])
    # interleaved rounds, so drift on a shared machine hits both sides alike
    runs: dict[str, list[float]] = {"direct": [], "gateway": []}
    for _ in range(2):
        runs["direct"] += anyio.run(measure, direct, "echo", calls // 2)
        runs["gateway"] += anyio.run(measure, proxied, "echo", calls // 2)
    return runs


def _http(tmp: Path, kind: str, policy: Path, echo_port: int,
          calls: int) -> dict[str, list[float]]:
    gateway_port = free_port()
    serve = [str(BIN / "callgate"), "mcp", "serve", "--config", str(policy), "--listen",
             f"127.0.0.1:{gateway_port}", "--audit", str(tmp / f"http-{kind}.db"), "--pins",
             str(tmp / "pins.db")]
    runs: dict[str, list[float]] = {"direct": [], "gateway": []}
    with process(serve, gateway_port):
        for _ in range(2):
            runs["direct"] += anyio.run(measure, f"http://127.0.0.1:{echo_port}/mcp", "echo",
                                        calls // 2)
            runs["gateway"] += anyio.run(measure, f"http://127.0.0.1:{gateway_port}/mcp",
                                         "echo__echo", calls // 2)
    return runs


if __name__ == "__main__":
    main()

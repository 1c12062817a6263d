"""Load on the sidecar: decisions/s and latency at 1, 16 and 64 concurrent clients.

A ``callgate serve`` process (audit on, the example research-agent policy, one run per client)
is driven from this separate process over 127.0.0.1 with keep-alive HTTP/1.1 connections, one
per client, each sending ``POST /v1/decide`` for distinct allowed GETs back to back. Latency is
measured at the client (request written to response read). Goal: >= 3,000 decisions/s at
p99 < 10 ms on the 2-core development machine. Writes benchmarks/out/sidecar.json and .md.
Run: ``.venv/bin/python benchmarks/bench_sidecar.py [DECISIONS_PER_LEVEL]`` (default 3,000).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
LEVELS = (1, 16, 64)
GOAL_RATE, GOAL_P99_MS = 3000.0, 10.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(*args: str, cwd: Path) -> str:
    return subprocess.run([sys.executable, "-m", "callgate.cli", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: str,
                   body: bytes, path: str = "/v1/decide") -> bytes:
    writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\n"
                 b"Authorization: Bearer " + key.encode() + b"\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


async def _client(port: int, key: str, count: int, index: int, latencies: list[float], *,
                  run_id: str | None = None,
                  url: str = "https://api.github.com/repos/o/r") -> None:
    """One keep-alive connection deciding ``count`` distinct allowed GETs (``url`` + a
    suffix), in ``run_id`` or a run of its own; each latency appended."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if run_id is None:
        run_id = json.loads(await _request(reader, writer, key, b"{}", "/v1/runs"))["run_id"]
    for i in range(count):
        body = json.dumps({"run_id": run_id, "call": {
            "tool": "fetch", "tool_class": "http", "action": "get",
            "parameters": {"url": f"{url}{index}-{i}"}}}).encode()
        started = time.perf_counter()
        answer = await _request(reader, writer, key, body)
        latencies.append(time.perf_counter() - started)
        if b'"verdict":"allow"' not in answer:
            raise RuntimeError(answer[:300])
    writer.close()


def _figures(latencies: list[float], elapsed: float, digits: int = 3) -> dict[str, Any]:
    """Decisions, seconds, decisions/s, p50 and p99 (ms) of one timed load."""
    latencies = sorted(latencies)
    n = len(latencies)
    return {"decisions": n, "seconds": round(elapsed, 3), "per_second": round(n / elapsed, 1),
            "p50_ms": round(statistics.median(latencies) * 1e3, digits),
            "p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1e3, digits)}


_LOADS = itertools.count()


async def _level(port: int, key: str, clients: int, total: int) -> dict[str, Any]:
    latencies: list[float] = []
    per = max(1, total // clients)
    # URLs no earlier load sent: the guards' caches are process-wide, and a URL the server
    # decoded before would be decoded again for free (the load's number in a path segment of
    # its own: a segment of 8+ letters and digits counts as data against the egress budget)
    url = f"https://api.github.com/repos/l{next(_LOADS)}/r"
    started = time.perf_counter()
    await asyncio.gather(*(_client(port, key, per, i, latencies, url=url)
                           for i in range(clients)))
    return {"clients": clients, **_figures(latencies, time.perf_counter() - started)}


def main() -> int:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        policy = (ROOT / "examples" / "research-agent.yaml").read_text()
        # the rate limit lifted so that every GET stays allowed (as bench_kernel does)
        (root / "policy.yaml").write_text(policy.replace("max_calls_per_minute: 30",
                                                         "max_calls_per_minute: 100000000"))
        key = _cli("keys", "add", "bench", "--keys", "keys.json", cwd=root)
        port = _port()
        with open(root / "serve.log", "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "callgate.cli", "serve", "--policy", "policy.yaml",
                 "--keys", "keys.json", "--audit", "audit.db", "--listen",
                 f"127.0.0.1:{port}"], cwd=root, stdout=log, stderr=log)
        try:
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            asyncio.run(_level(port, key, 1, 200))  # warm-up
            rows = [asyncio.run(_level(port, key, c, total)) for c in LEVELS]
        finally:
            server.terminate()
            server.wait(timeout=30)
    load = os.getloadavg()[0]
    OUT.mkdir(exist_ok=True)
    result = {"goal": {"per_second": GOAL_RATE, "p99_ms": GOAL_P99_MS}, "levels": rows,
              "cores": os.cpu_count(), "load_average_1m": round(load, 2),
              "server": "uvicorn (h11, asyncio), one worker; audit on"}
    (OUT / "sidecar.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| clients | decisions/s | p50 ms | p99 ms | goal |", "|---:|---:|---:|---:|---|"]
    for row in rows:
        met = row["per_second"] >= GOAL_RATE and row["p99_ms"] < GOAL_P99_MS
        lines.append(f"| {row['clients']} | {row['per_second']:,.0f} | {row['p50_ms']} | "
                     f"{row['p99_ms']} | >= {GOAL_RATE:,.0f}/s at p99 < {GOAL_P99_MS:g} ms: "
                     f"{'met' if met else 'missed'} |")
    (OUT / "sidecar.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"({os.cpu_count()} cores, load {load:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

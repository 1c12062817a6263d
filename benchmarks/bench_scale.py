"""Scale: 1, 2 and 3 sidecars over one PostgreSQL on loopback, and one sidecar on SQLite.

Each configuration runs ``callgate serve`` processes (``--store postgresql://…``: runs, state and
the audit log all in one throwaway PostgreSQL cluster started here with ``initdb``/``pg_ctl``
as tests/postgres.py does; or the default SQLite state and ``--audit`` file), and this separate
process drives them with 16 keep-alive HTTP/1.1 clients, each on its own run, spread evenly
over the sidecars, sending ``POST /v1/decide`` for distinct allowed GETs back to back (the
client of bench_sidecar.py). A last row puts all 16 clients on ONE run through 3 sidecars:
the run's decisions are serialised across them by its lock. Latency is measured at the
client. The issue asks for decisions/s, p50/p99 and how they grow with sidecars. Writes
benchmarks/out/scale.json and .md. Run: ``.venv/bin/python benchmarks/bench_scale.py
[DECISIONS_PER_CONFIGURATION]`` (default 2,000).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_sidecar import _client, _figures, _request  # noqa: E402
from tests.postgres import cluster  # noqa: E402

CLIENTS = 16
POLICY = """\
name: scale-bench
version: 1
principal:
  name: bench-agent
  capabilities:
    - {tool_class: http, actions: [get], constraints: {allowed_hosts: [api.example.org]}}
rules:
  - {id: allow-gets, priority: 100, match: {tool_class: http}, decision: allow, reason: fine}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(root: Path, store: str | None, index: int) -> tuple[subprocess.Popen[bytes], int]:
    port = _port()
    args = ["--policy", "policy.yaml", "--keys", "keys.json", "--listen", f"127.0.0.1:{port}",
            "--state-dir", f"state-{index}"]
    args += ["--store", store] if store else ["--audit", "audit.db"]
    with open(root / f"serve-{index}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "callgate.cli", "serve", *args],
                                cwd=root, stdout=log, stderr=log)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((root / f"serve-{index}.log").read_text()) from None
            time.sleep(0.1)
    raise RuntimeError("a sidecar did not start")


#: Numbers each drive's URLs apart: the guards' caches are process-wide (see bench_sidecar).
_DRIVES = itertools.count()


async def _drive(ports: list[int], key: str, total: int, one_run: bool) -> dict[str, Any]:
    shared = None
    if one_run:
        reader, writer = await asyncio.open_connection("127.0.0.1", ports[0])
        shared = json.loads(await _request(reader, writer, key, b"{}", "/v1/runs"))["run_id"]
        writer.close()
    latencies: list[float] = []
    per = max(1, total // CLIENTS)
    started = time.perf_counter()
    url = f"https://api.example.org/l{next(_DRIVES)}/r"  # URLs no earlier drive sent
    await asyncio.gather(*(_client(ports[i % len(ports)], key, per, i, latencies,
                                   run_id=shared, url=url)
                           for i in range(CLIENTS)))
    return _figures(latencies, time.perf_counter() - started, digits=2)


def _configuration(root: Path, key: str, store: str | None, sidecars: int, total: int,
                   one_run: bool = False) -> dict[str, Any]:
    procs = [_start(root, store, i) for i in range(sidecars)]
    try:
        ports = [port for _, port in procs]
        asyncio.run(_drive(ports, key, 160, one_run))  # warm-up
        row = asyncio.run(_drive(ports, key, total, one_run))
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            proc.wait(timeout=30)
    return {"store": "postgresql" if store else "sqlite", "sidecars": sidecars,
            "runs": "one shared" if one_run else f"{CLIENTS} (one per client)", **row}


def _database(url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + "/" + name


def main() -> int:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rows = []
    with tempfile.TemporaryDirectory() as tmp, cluster() as pg:
        root = Path(tmp)
        (root / "policy.yaml").write_text(POLICY)
        key = subprocess.run([sys.executable, "-m", "callgate.cli", "keys", "add", "bench",
                              "--keys", "keys.json"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.strip()
        rows.append(_configuration(root, key, None, 1, total))
        for count in (1, 2, 3):
            rows.append(_configuration(root, key, _database(pg.url, f"scale{count}"), count,
                                       total))
        rows.append(_configuration(root, key, _database(pg.url, "scale_hot"), 3, total // 2,
                                   one_run=True))
    base = next(r for r in rows if r["store"] == "postgresql")["per_second"]
    for row in rows:
        row["vs_one_postgresql_sidecar"] = round(row["per_second"] / base, 2)
    load = os.getloadavg()[0]
    result = {"expectation": "decisions/s grow with sidecars until the machine's cores or "
                             "PostgreSQL are the limit; SQLite with one sidecar for comparison",
              "rows": rows, "clients": CLIENTS, "cores": os.cpu_count(),
              "load_average_1m": round(load, 2),
              "postgresql": "throwaway cluster on loopback, fsync off (-F), default settings"}
    OUT.mkdir(exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| store | sidecars | runs | decisions/s | p50 ms | p99 ms | x one PG sidecar |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['store']} | {r['sidecars']} | {r['runs']} | "
                     f"{r['per_second']:,.0f} | {r['p50_ms']} | {r['p99_ms']} | "
                     f"{r['vs_one_postgresql_sidecar']} |")
    (OUT / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"expected: {result['expectation']}")
    print(f"({os.cpu_count()} cores shared by the sidecars, PostgreSQL and the client; "
          f"load {load:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

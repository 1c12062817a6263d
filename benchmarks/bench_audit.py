"""Latency of ``AuditStore.record_decision`` for both durability settings, and verify speed.

The store runs with its defaults (a signed checkpoint and an anchor write every 1000 events).
Prints p50 / p99 per append, the p50 of one checkpoint (Ed25519 signature, its row, the anchor
file written and fsynced) and the time ``verify`` takes per thousand events, and writes
benchmarks/out/audit.json. Run: ``.venv/bin/python benchmarks/bench_audit.py [appends]``.
"""

from __future__ import annotations

import json
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from callgate import Decision, Reason, TaintLabel, ToolCall
from callgate.audit import AuditStore

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
WARMUP = 200


def call(n: int) -> ToolCall:
    return ToolCall(
        tool="fetch",
        tool_class="http",
        action="get",
        parameters={"url": f"https://api.github.com/repos/a/b/issues/{n}"},
        taint=(TaintLabel(source="web", origin="https://api.github.com"),),
        id=f"c{n}",
        run_id="bench",
        sequence=n,
    )


DECISION = Decision(
    verdict="allow",
    reasons=(Reason(id="allow-github-reads", check="rules", message="GET to an allowed host"),),
)


def percentile(samples: list[int], q: float) -> float:
    return samples[min(len(samples) - 1, int(len(samples) * q))] / 1000.0


def measure(durability: Literal["normal", "fsync"], appends: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.db"
        calls = [call(n) for n in range(appends + WARMUP)]
        samples: list[int] = []
        with AuditStore.open(path, durability=durability) as store:
            store.start_run(
                "bench",
                principal="agent",
                policy_name="bench",
                manifest_hash="0" * 64,
                config={"durability": durability},
            )
            for n, c in enumerate(calls):
                started = time.perf_counter_ns()
                store.record_decision("bench", c, DECISION)
                if n >= WARMUP:
                    samples.append(time.perf_counter_ns() - started)
            signing: list[int] = []
            for _ in range(20):
                started = time.perf_counter_ns()
                store.checkpoint()
                signing.append(time.perf_counter_ns() - started)
            signing.sort()
            started = time.perf_counter_ns()
            report = store.verify()
            verify_ns = time.perf_counter_ns() - started
        assert report.ok, str(report)
    samples.sort()
    return {
        "durability": durability,
        "appends": appends,
        "p50_us": round(percentile(samples, 0.50), 1),
        "p99_us": round(percentile(samples, 0.99), 1),
        "mean_us": round(sum(samples) / len(samples) / 1000.0, 1),
        "appends_per_s": round(len(samples) / (sum(samples) / 1e9)),
        "checkpoint_p50_us": round(percentile(signing, 0.50), 1),
        "verify_ms_per_1k_events": round(verify_ns / 1e6 / (appends + WARMUP + 1) * 1000, 1),
    }


def main() -> None:
    appends = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    results = [measure("normal", appends), measure("fsync", max(500, appends // 4))]
    for r in results:
        print(
            f"{r['durability']:>6}: record_decision p50 {r['p50_us']:7.1f} us  "
            f"p99 {r['p99_us']:8.1f} us  ({r['appends_per_s']} appends/s);  "
            f"checkpoint p50 {r['checkpoint_p50_us']:.0f} us;  "
            f"verify {r['verify_ms_per_1k_events']} ms per 1k events"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "machine": platform.machine(),
    }
    (OUT / "audit.json").write_text(json.dumps({"env": meta, "results": results}, indent=2))


if __name__ == "__main__":
    main()

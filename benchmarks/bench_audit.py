"""Latency of ``AuditStore.record_decision`` for both durability settings, and verify speed,
next to the store of a baseline revision (default ``b49646e``: one SQLite transaction per
event, before the segment) measured in the same run, the two taking turns.

The store runs with its defaults (a signed checkpoint and an anchor write every 1000 events).
Prints p50 / p99 per append, appends per second (index batches included), the p50 of one
checkpoint (Ed25519 signature, its row, the anchor file written and fsynced) and the time
``verify`` takes per thousand events, and writes benchmarks/out/audit.json.
Run: ``.venv/bin/python benchmarks/bench_audit.py [appends] [--baseline REV | --no-baseline]``.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from _baseline import child_env, worktree

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


def _child(durability: str, appends: int) -> None:
    print(json.dumps(measure(durability, appends)))  # type: ignore[arg-type]


def _measure_in(src: Path | None, durability: str, appends: int) -> dict[str, Any]:
    """One measurement in a fresh interpreter (the working tree, or ``src`` first on the path)."""
    env = child_env(src) if src is not None else None
    proc = subprocess.run([sys.executable, __file__, "--child", durability, str(appends)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        return {"durability": durability, "error": proc.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    ok.sort(key=lambda r: r["p50_us"])
    return ok[len(ok) // 2]


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        _child(args[1], int(args[2]))
        return
    baseline = None if "--no-baseline" in args else (
        args[args.index("--baseline") + 1] if "--baseline" in args else "b49646e")
    numbers = [a for a in args if a.isdigit()]
    appends = int(numbers[0]) if numbers else 5000
    sizes = {"normal": appends, "fsync": max(500, appends // 4)}
    results: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        base_src = stack.enter_context(worktree(baseline)) / "src" if baseline else None
        for durability, count in sizes.items():
            now: list[dict[str, Any]] = []
            before: list[dict[str, Any]] = []
            for _ in range(3):  # the trees take turns: the machine is shared and noisy
                now.append(_measure_in(None, durability, count))
                if base_src is not None:
                    before.append(_measure_in(base_src, durability, count))
            results[durability] = _median(now)
            if before:
                results[f"{durability} (baseline {baseline})"] = _median(before)
    for name, r in results.items():
        if "error" in r:
            print(f"{name:>26}: ERROR {r['error']}")
            continue
        print(
            f"{name:>26}: record_decision p50 {r['p50_us']:7.1f} us  "
            f"p99 {r['p99_us']:8.1f} us  ({r['appends_per_s']} appends/s);  "
            f"checkpoint p50 {r['checkpoint_p50_us']:.0f} us;  "
            f"verify {r['verify_ms_per_1k_events']} ms per 1k events"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "machine": platform.machine(),
        "baseline": baseline,
    }
    (OUT / "audit.json").write_text(json.dumps({"env": meta, "results": results}, indent=2))


if __name__ == "__main__":
    main()

"""Per-decision latency of ``Kernel.check`` on the example policy, with and without the audit.

Prints p50 / p99 per decision and decisions per second, and writes benchmarks/out/kernel.json
and kernel.md. Run: ``.venv/bin/python benchmarks/bench_kernel.py``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from callgate.kernel._kernel import Kernel
from callgate.policy._loader import load_policy

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
N = int(__import__("os").environ.get("BENCH_N", "20000"))

# A well-behaved run: allowed reads of the web and of ./data, and a denied request. (A shell
# call after the fetch would rightly quarantine the run, and the benchmark would then measure
# quarantine denials instead.)
CALLS: list[dict[str, Any]] = [
    {"tool": "fetch", "tool_class": "http", "action": "get",
     "parameters": {"url": "https://api.github.com/repos/a/b"}},
    {"tool": "read", "tool_class": "file", "action": "read",
     "parameters": {"path": "./data/notes.txt"}},
    {"tool": "fetch", "tool_class": "http", "action": "get",
     "parameters": {"url": "https://docs.example.org/guide"}},
    {"tool": "fetch", "tool_class": "http", "action": "get",
     "parameters": {"url": "https://evil.com/"}},
]


def measure(audit: str | None, durability: str = "normal", *, pack: bool = True,
            guards: bool = True) -> dict[str, float]:
    policy = load_policy(ROOT / "examples" / "research-agent.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        (work / "data" / "notes.txt").write_text("x")
        store: Any = None
        if audit is not None:
            from callgate.audit import AuditStore

            store = AuditStore.open(work / "audit.db", durability=durability)  # type: ignore[arg-type]
        # quarantine and behavioral rules would change verdicts mid-run; the benchmark measures
        # the steady state of a well-behaved run, so the threshold is raised.
        settings = policy.policy.run_state.model_copy(
            update={"quarantine_after_denials": 10**9, "behavioral_rules": pack})
        pol = policy.policy.model_copy(update={"run_state": settings})
        kernel = Kernel(pol, working_dir=work, audit=store, guards=None if guards else [])
        samples = []
        for i in range(N):
            c = CALLS[i % len(CALLS)]
            t0 = time.perf_counter_ns()
            kernel.check(c)
            samples.append(time.perf_counter_ns() - t0)
        kernel.close()
    samples.sort()
    total_s = sum(samples) / 1e9
    return {
        "p50_us": samples[len(samples) // 2] / 1000,
        "p99_us": samples[int(len(samples) * 0.99)] / 1000,
        "mean_us": statistics.fmean(samples) / 1000,
        "decisions_per_s": N / total_s,
    }


def main() -> int:
    results = {
        "rules only (no guards, no statement pack), no audit": measure(None, pack=False,
                                                                       guards=False),
        "rules only, sqlite audit (WAL, synchronous=NORMAL)": measure("sqlite", pack=False,
                                                                      guards=False),
        "defaults (guards + statement pack), no audit": measure(None),
        "defaults, sqlite audit (WAL, synchronous=NORMAL)": measure("sqlite", "normal"),
        "defaults, sqlite audit (fsync per decision)": measure("sqlite", "fsync"),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kernel.json").write_text(json.dumps(results, indent=2))
    lines = ["| configuration | p50 µs | p99 µs | decisions/s |", "|---|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | "
                     f"{r['decisions_per_s']:,.0f} |")
    table = "\n".join(lines)
    (OUT / "kernel.md").write_text(f"# Kernel.check latency ({N} decisions)\n\n{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

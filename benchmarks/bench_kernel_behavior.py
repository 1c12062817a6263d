"""Online behavioral decisions through ``Kernel.check``, at growing trace lengths.

The 20-statement policy of ``bench_temporal.py`` (every form, a variable, ``once[N]``, a nested
``eventually``) is put in a policy file's ``behavior`` section; a kernel decides synthetic calls
(each abstracted to an event, checked, committed). For each trace length L the cost is the time
of ``Kernel.check`` for the calls after the first L; the Z3 figure is re-grounding the first L
events with the SMT engine (what deciding by re-checking the prefix would cost).

Writes benchmarks/out/kernel_behavior.{md,json,png}.
Run: ``.venv/bin/python benchmarks/bench_kernel_behavior.py [--quick]``.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from bench_temporal import RULES, make_event
from bench_temporal import policy as behavior_set

from callgate import Kernel, Policy

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
SAMPLES = 2000


def kernel_policy() -> Policy:
    return Policy.model_validate({
        "name": "bench", "version": 1,
        "principal": {"name": "agent", "capabilities": [{"tool_class": "function"}]},
        "rules": [{"id": "allow-all", "decision": "allow"}],
        "run_state": {"behavioral_rules": False, "quarantine_after_denials": 10**9},
        "behavior": [{"id": f"s{i:02d}", "rule": r, "enforce": "alert"}
                     for i, r in enumerate(RULES)],
    })


def calls(n: int) -> list[dict[str, Any]]:
    rng = random.Random(20_261_121)
    out = []
    for _ in range(n):
        ev = make_event(rng)
        out.append({"tool": ev.action, "tool_class": "function", "action": "call",
                    "parameters": dict(ev.args), "taint": sorted(ev.taint)})
    return out


def kernel_cost(policy: Policy, length: int, stream: list[dict[str, Any]]) -> list[float]:
    """Per-call µs of Kernel.check for the calls right after the first ``length``."""
    window = min(max(length, 200), SAMPLES)
    samples: list[float] = []
    with tempfile.TemporaryDirectory() as wd:
        while len(samples) < SAMPLES:
            kernel = Kernel(policy, working_dir=wd)
            for c in stream[:length]:
                kernel.check(c)
            gc.collect()
            gc.disable()
            try:
                for c in stream[length:length + window]:
                    start = time.perf_counter_ns()
                    kernel.check(c)
                    samples.append((time.perf_counter_ns() - start) / 1000)
            finally:
                gc.enable()
    return samples[:SAMPLES]


def main(quick: bool) -> int:
    policy = kernel_policy()
    lengths = [10, 100, 1_000] + ([] if quick else [10_000, 100_000])
    stream = calls(max(lengths) + SAMPLES)
    results: dict[int, dict[str, float]] = {}
    for length in lengths:
        s = sorted(kernel_cost(policy, length, stream))
        results[length] = {"p50_us": statistics.median(s), "p99_us": s[int(0.99 * len(s))]}
        print(f"Kernel.check L={length:>7}: p50 {results[length]['p50_us']:.1f} µs", flush=True)
    from callgate.abstraction import Abstractor

    abstractor, events = Abstractor(), []
    for c in stream[:1_000]:
        events.extend(abstractor.abstract(c))
    behavior = behavior_set()
    smt: dict[int, float] = {}
    for length in (10, 100, 1_000):
        start = time.perf_counter()
        behavior.check_trace(events[:length], engine="smt", timeout_ms=600_000)
        smt[length] = time.perf_counter() - start
        print(f"smt re-grounding L={length:>5}: {smt[length] * 1000:.1f} ms", flush=True)
    first, last = min(results), max(results)
    growth = results[last]["p50_us"] / results[first]["p50_us"]
    speedup = smt[1_000] * 1e6 / results[1_000]["p50_us"]
    data = {"statements": len(RULES), "kernel_check": {str(k): v for k, v in results.items()},
            "smt_seconds": {str(k): v for k, v in smt.items()}, "p50_growth": growth,
            "speedup_at_1000": speedup}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kernel_behavior.json").write_text(json.dumps(data, indent=2) + "\n")
    rows = [f"| {k:,} | {v['p50_us']:.1f} | {v['p99_us']:.1f} | "
            + (f"{smt[k] * 1000:.1f}" if k in smt else "–") + " |" for k, v in results.items()]
    table = "\n".join([
        "# Behavioral decisions through Kernel.check", "",
        f"{len(RULES)} statements; each call is validated, checked against the capabilities and "
        "rules, abstracted to an event, judged by the monitors and committed.", "",
        "| trace length | Kernel.check p50 (µs) | p99 (µs) | Z3 re-grounding (ms) |",
        "|---:|---:|---:|---:|", *rows, "",
        f"- p50 growth from {first:,} to {last:,} events: {growth:.2f}× (aim ≤ 1.5×)",
        f"- Kernel.check vs Z3 re-grounding at 1,000 events: {speedup:,.0f}× faster", ""])
    (OUT / "kernel_behavior.md").write_text(table)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(list(results), [v["p50_us"] for v in results.values()], "o-",
            label="Kernel.check p50")
    ax.plot(list(smt), [v * 1e6 for v in smt.values()], "s--", label="Z3 re-grounding")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events already in the run")
    ax.set_ylabel("µs per decision")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "kernel_behavior.png", dpi=120)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main("--quick" in sys.argv))

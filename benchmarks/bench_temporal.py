"""Cost of a behavioral decision: the incremental monitor vs re-grounding with Z3.

A policy of 20 statements (every form, variables, ``once[N]``, nested ``eventually``) is
checked against a synthetic run. For each trace length L the incremental cost is the time of
``check_pending`` + ``commit`` for events L+1 … L+W (W = min(L, 2000), repeated on fresh
monitors until 2,000 samples are taken); the SMT cost is one ``check_trace(engine="smt")`` over
the first L events, which is what deciding a call by re-grounding the prefix costs.

Writes benchmarks/out/temporal.md, temporal.json and temporal.png.
Run: ``.venv/bin/python benchmarks/bench_temporal.py [--quick]``.
"""

from __future__ import annotations

import gc
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from callgate import BehaviorStatement, Event
from callgate.temporal import BehaviorSet, compile_behavior

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
SAMPLES = 2000

RULES = [
    'abs(action = delete and path ~ "/etc/*")',
    'abs(action = http_post and taint has web and url !~ "https://api.internal/*")',
    'abs(action = exec and status = denied and cmd ~ "*rm -rf*")',
    "prec(action = consume and artifact = $x, action = validate and artifact = $x)",
    'prec(action = release and file ~ "*.csr", action = validate)',
    "prec(action = write_file and path = $p, action = read_file and path = $p)",
    "resp(action = open_ticket and ticket = $t, action = close_ticket and ticket = $t)",
    "resp(action = start_job, action = finish_job)",
    "bresp[5](action = alarm, action = ack)",
    "bresp[20](action = lock and resource = $r, action = unlock and resource = $r)",
    "rslv(action = edit and file = $f, action = save and file = $f)",
    "rslv(action = stage, action = commit)",
    "until(action = lock and resource = $r, action = unlock and resource = $r,"
    " action = write_file and path contains $r)",
    "until(action = read_secret, action = clear_context, action = http_post)",
    "always(not (action = sample and not (fps = 6)))",
    'always(not (action = send_email and once(action = read_file and path ~ "*.ssh*")))',
    "always(not (action = http_post and once[3](taint has web)))",
    'always(not (action = read_secret and eventually(action = http_post and url ~ "*evil*")))',
    "always(not action = deploy or eventually(action = verify))",
    "always(not (action = transfer and amount > 10000 and not once[10](action = approve)))",
]

ACTIONS = [
    "read_file", "write_file", "consume", "validate", "release", "open_ticket",
    "close_ticket", "start_job", "finish_job", "alarm", "ack", "lock", "unlock", "edit",
    "save", "stage", "commit", "read_secret", "clear_context", "http_post", "sample",
    "send_email", "deploy", "verify", "transfer", "approve", "exec", "ls",
]


def policy() -> BehaviorSet:
    """The 20-statement policy."""
    return compile_behavior(
        [BehaviorStatement(id=f"s{i:02d}", rule=r, enforce="alert") for i, r in enumerate(RULES)]
    )


def make_event(rng: random.Random) -> Event:
    """One synthetic call: a common action with arguments from small value pools."""
    action = rng.choice(ACTIONS)
    name = f"a{rng.randrange(50)}"
    args: dict[str, Any] = {
        "path": f"/srv/data/{name}.txt",
        "artifact": name,
        "ticket": rng.randrange(100),
        "resource": name,
        "file": f"out/{name}.csr",
        "url": rng.choice(["https://api.internal/v1", "https://example.org/x"]),
        "fps": 6,
        "amount": rng.choice([10, 500, 20_000]),
        "cmd": "ls -la",
    }
    taint = frozenset({"web"}) if rng.random() < 0.05 else frozenset()
    return Event(action=action, args=args, status="ok", output="done", taint=taint)


def incremental_cost(behavior: BehaviorSet, length: int, events: list[Event]) -> list[float]:
    """Per-event cost (µs) of check_pending + commit just after ``length`` events."""
    window = min(length, SAMPLES)
    samples: list[float] = []
    while len(samples) < SAMPLES:
        monitor = behavior.monitor()
        for ev in events[:length]:
            monitor.check_pending(ev)
            monitor.commit(ev)
        gc.collect()
        gc.disable()
        try:
            for ev in events[length:length + window]:
                start = time.perf_counter_ns()
                monitor.check_pending(ev)
                monitor.commit(ev)
                samples.append((time.perf_counter_ns() - start) / 1000)
        finally:
            gc.enable()
    return samples[:SAMPLES]


def smt_cost(behavior: BehaviorSet, length: int, events: list[Event], repeats: int) -> float:
    """Median seconds of one Z3 check of the first ``length`` events (all 20 statements)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        behavior.check_trace(events[:length], engine="smt", timeout_ms=600_000)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(quick: bool) -> dict[str, Any]:
    behavior = policy()
    rng = random.Random(20_260_121)
    lengths = [10, 100, 1_000] + ([] if quick else [10_000, 100_000])
    events = [make_event(rng) for _ in range(max(lengths) + SAMPLES)]
    events = [Event(e.action, e.args, e.status, e.output, e.taint, seq=i + 1)
              for i, e in enumerate(events)]
    incremental: dict[int, dict[str, float]] = {}
    for length in lengths:
        samples = sorted(incremental_cost(behavior, length, events))
        incremental[length] = {
            "p50_us": statistics.median(samples),
            "p95_us": samples[int(0.95 * len(samples))],
            "samples": len(samples),
        }
        print(f"incremental L={length:>7}: p50 {incremental[length]['p50_us']:.1f} µs", flush=True)
    smt: dict[int, float] = {}
    for length, repeats in ((10, 5), (100, 3), (1_000, 1)):
        smt[length] = smt_cost(behavior, length, events, repeats)
        print(f"smt         L={length:>7}: {smt[length] * 1000:.1f} ms", flush=True)
    return report(incremental, smt)


def report(incremental: dict[int, dict[str, float]], smt: dict[int, float]) -> dict[str, Any]:
    """Write the table, JSON and plot; return the JSON data."""
    first, last = min(incremental), max(incremental)
    speedup = smt[1_000] * 1e6 / incremental[1_000]["p50_us"]
    growth = incremental[last]["p50_us"] / incremental[first]["p50_us"]
    data = {
        "statements": len(RULES),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "incremental": {str(k): v for k, v in incremental.items()},
        "smt_seconds": {str(k): v for k, v in smt.items()},
        "speedup_at_1000": speedup,
        "p50_growth": {"from": first, "to": last, "ratio": growth},
        "aims": {
            "p50_growth_at_most_1_5": growth <= 1.5,
            "p50_at_largest_under_50_us": incremental[last]["p50_us"] < 50,
            "speedup_at_1000_at_least_1000": speedup >= 1000,
        },
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "temporal.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    rows = [
        f"| {k:,} | {v['p50_us']:.1f} | {v['p95_us']:.1f} | "
        + (f"{smt[k] * 1000:.1f}" if k in smt else "–") + " |"
        for k, v in incremental.items()
    ]
    table = "\n".join([
        "# Behavioral decision cost",
        "",
        f"Policy of {len(RULES)} statements (every form, variables, once[N], nested eventually);"
        f" Python {data['python']} on {data['machine']}.",
        "",
        "| trace length | incremental p50 (µs) | incremental p95 (µs) | Z3 re-grounding (ms) |",
        "|---:|---:|---:|---:|",
        *rows,
        "",
        f"- p50 growth from {first:,} to {last:,} events: {growth:.2f}× (aim ≤ 1.5×)",
        f"- incremental vs Z3 at 1,000 events: {speedup:,.0f}× faster (aim ≥ 1,000×)",
        "- early in a run most bound values are new to the monitor (new hash entries), which",
        "  costs more than meeting known ones; short lengths are sampled on fresh monitors",
        "",
    ])
    (OUT / "temporal.md").write_text(table, encoding="utf-8")
    plot(incremental, smt)
    print(table)
    return data


def plot(incremental: dict[int, dict[str, float]], smt: dict[int, float]) -> None:
    """Cost per decision against trace length, log-log."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = sorted(incremental)
    ax.plot(xs, [incremental[x]["p50_us"] for x in xs], "o-", label="incremental p50")
    ax.plot(xs, [incremental[x]["p95_us"] for x in xs], "o--", label="incremental p95")
    ax.plot(sorted(smt), [smt[x] * 1e6 for x in sorted(smt)], "s-", label="Z3 re-grounding")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events in the trace")
    ax.set_ylabel("cost of one decision (µs)")
    ax.set_title(f"Behavioral check, {len(RULES)} statements")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "temporal.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])

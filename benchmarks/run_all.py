"""Run every benchmark script in this directory, one after another, and report failures.

At the end it prints the hot path's table (the kernel, the sandbox and the CLI, each figure next
to its goal and the figure it replaces) from the reports the scripts wrote in ``benchmarks/out``,
and writes it to ``benchmarks/out/summary.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

#: (kernel.json configuration, call kind, row label, goal, the figure the issue published)
KERNEL_ROWS = (
    ("bare", "get", "bare rule match", "reference: peers 3.2–3.5 µs", "1.7 µs"),
    ("rules", "get", "`Kernel.check`, rules only, no audit: GET", "≤ 12 µs", "44 µs"),
    ("rules", "read", "`Kernel.check`, rules only, no audit: file read", "≤ 12 µs", "44 µs"),
    ("defaults", "get", "`Kernel.check`, guards + statement pack, no audit: GET", "≤ 30 µs",
     "270 µs"),
    ("defaults", "read", "`Kernel.check`, guards + statement pack, no audit: file read",
     "≤ 30 µs", "412 µs"),
    ("audit", "get", "the same with the durable SQLite audit: GET", "≤ 60 µs", "431–448 µs"),
    ("audit", "read", "the same with the durable SQLite audit: file read", "≤ 60 µs",
     "431–448 µs"),
    ("fsync", "get", "the same with an fsync per decision: GET", "its own figure", "—"),
)


def _load(name: str) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads((OUT / name).read_text())
    except (OSError, ValueError):
        return None
    return loaded


def _kernel_rows(kernel: dict[str, Any]) -> list[str]:
    found = {(r["config"], r["kind"]): r for r in kernel.get("rows", [])
             if r.get("regime") == "distinct"}
    lines = []
    for config, kind, label, goal, before in KERNEL_ROWS:
        row = found.get((config, kind))
        if row is None or "p50_us" not in row.get("current", {}):
            lines.append(f"| {label} | not measured | {goal} | {before} |")
            continue
        now = row["current"]
        figure = f"{now['p50_us']:,.1f} µs"
        if config == "audit":
            figure += f", {now['decisions_per_s']:,.0f} decisions/s (goal ≥ 15,000/s)"
        compiled = row.get("compiled") or {}
        if "p50_us" in compiled:
            figure += f"; compiled build {compiled['p50_us']:,.1f} µs"
            if config == "audit":
                figure += f", {compiled['decisions_per_s']:,.0f}/s"
        base = (row.get("baseline") or {}).get("p50_us")
        if base is not None:
            figure += f" (baseline in the same run: {base:,.1f} µs)"
        lines.append(f"| {label} | {figure} | {goal} | {before} |")
    return lines


def summary() -> str:
    """The hot path's table from the reports in ``benchmarks/out`` (rows missing when their
    script did not run)."""
    lines = ["# The hot path: today's figures next to their goals", "",
             "| path | today (p50) | goal | before |", "|---|---|---|---|"]
    kernel = _load("kernel.json")
    if kernel is not None:
        lines += _kernel_rows(kernel)
    sandbox = _load("sandbox.json")
    for label, row in sorted((sandbox or {}).get("rows", {}).items()):
        if label.startswith("kernel"):
            lines.append(f"| `/bin/true` through `Kernel.run_subprocess` ({label}), over a plain "
                         f"process | {row['over_plain_p50_ms']:.1f} ms (plain "
                         f"{sandbox['rows']['plain']['p50_ms']:.1f} ms) | ≤ 10 ms | 15.5 ms; 33 ms "
                         f"with a builder-like policy |")
    cli = _load("cli.json")
    for case in (cli or {}).get("cases", []):
        if case.get("goal_ms") is not None:
            lines.append(f"| `callgate {case['case']}`, one call end to end | "
                         f"{case['p50_ms']:.0f} ms | ≤ {case['goal_ms']:g} ms | about 800 ms |")
    return "\n".join(lines) + "\n"


def main() -> int:
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], check=False).returncode != 0:
            failed.append(script.name)
    table = summary()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.md").write_text(table)
    print("\n" + table)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

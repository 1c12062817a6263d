"""Latency of ``Kernel.report``: a host handing the kernel the output of a call it just ran.

``bench_kernel`` times ``Kernel.check``; an agent that runs its calls also reports each one's
output, which the kernel labels, shows to the guards (``observe``) and indexes for value flow.
This benchmark times that report, on the example policy with the defaults (content guards and
the statement pack; rate limits lifted and quarantine out of reach, as in ``bench_kernel``),
for three outputs: a small JSON answer, 4 KB of text full of identifiers (e-mail addresses,
URLs, file names, phone numbers) and 64 KB of prose. Each report follows the ``check`` of a GET
with a distinct URL; only the report is timed (p50, in µs).

The baseline revision (``--baseline``, default ``b49646e``, before the performance work) runs
the same code from a ``git worktree``, in its own process; the trees take turns, ``--reps``
times (median of the repetitions), since the machine is shared and noisy.

Writes benchmarks/out/report.json and report.md.
Run: ``.venv/bin/python benchmarks/bench_report.py [-n 1500] [--reps 3] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _baseline import child_env, describe, worktree

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
DEFAULT_BASELINE = "b49646e"
WARMUP = 200

OUTPUTS: dict[str, str] = {
    "small JSON (60 B)": '{"status": 200, "items": [1, 2, 3], "name": "repo"} ',
    "4 KB text with identifiers": (
        "Contact alice@example.org or bob@corp.example.com; see https://docs.example.com/a/b "
        "and report-2024.pdf; call +1 555 123 4567. ") * 40,
    "64 KB prose": ("The quarterly review went well and the team agreed on the next steps "
                    "for the release. ") * 730,
}


def child(n: int) -> dict[str, float]:
    """In the measured tree's process: p50 µs of one report per output kind."""
    import bench_kernel

    measuring = bench_kernel.Child(None)
    try:
        found: dict[str, float] = {}
        for name, text in OUTPUTS.items():
            kernel, _ = measuring.kernel("defaults")
            samples: list[int] = []
            for i in range(WARMUP + n):
                decision = kernel.check(bench_kernel.make_call("get", i))
                start = time.perf_counter_ns()
                kernel.report(decision.call_id, status="ok", output=f"{text}{i}")
                if i >= WARMUP:
                    samples.append(time.perf_counter_ns() - start)
            found[name] = statistics.median(samples) / 1000
            kernel.close()
        return found
    finally:
        measuring.close()


def run_tree(src: Path, n: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", str(n)], env=child_env(src),
                          cwd=ROOT / "benchmarks", capture_output=True, text=True, check=False,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the measuring child failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1500, help="reports timed per output kind")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return
    runs: dict[str, list[dict[str, float]]] = {"now": [], "baseline": []}
    with worktree(args.baseline) as base:
        for rep in range(args.reps):
            for tree, src in (("now", ROOT / "src"), ("baseline", base / "src")):
                runs[tree].append(run_tree(src, args.n))
                print(f"[{rep + 1}/{args.reps}] {tree}: " + ", ".join(
                    f"{k} {v:.0f} µs" for k, v in runs[tree][-1].items()), flush=True)
    table = {name: {tree: statistics.median(r[name] for r in runs[tree]) for tree in runs}
             for name in OUTPUTS}
    lines = ["| output | now, p50 µs | baseline p50 µs | baseline / now |", "|---|---:|---:|---:|"]
    for name, row in table.items():
        lines.append(f"| {name} | {row['now']:.0f} | {row['baseline']:.0f} | "
                     f"{row['baseline'] / row['now']:.1f}× |")
    head = (f"# Kernel.report latency (defaults, n={args.n} per output, median of {args.reps})"
            f"\n\nBaseline: `{args.baseline}` ({describe(args.baseline)['subject']}).\n")
    print("\n".join(lines))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.md").write_text(head + "\n" + "\n".join(lines) + "\n")
    (OUT / "report.json").write_text(json.dumps(
        {"n": args.n, "reps": args.reps, "baseline": describe(args.baseline),
         "rows": table, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()

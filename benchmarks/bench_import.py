"""Start-up cost: wall time of a fresh interpreter importing callgate and its packages.

Each case runs in N fresh subprocesses; the median is printed next to the bare interpreter's
(``python -c pass``, measured in the same run: the machine is shared and noisy) and the goal:
``import callgate`` and ``callgate --help`` within 150 ms of the bare interpreter. Writes
benchmarks/out/import.json and import.md.
Run: ``.venv/bin/python benchmarks/bench_import.py``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
N = 15
GOAL_MS = 150.0
CLI = Path(sys.executable).with_name("callgate")

CASES: dict[str, list[str]] = {
    "bare interpreter": [sys.executable, "-c", "pass"],
    "import callgate": [sys.executable, "-c", "import callgate"],
    "callgate --help": [str(CLI), "--help"],
    **{f"import callgate.{p}": [sys.executable, "-c", f"import callgate.{p}"]
       for p in ("policy", "kernel", "temporal", "audit", "guards", "sandbox", "manifest",
                 "abstraction", "executors", "cli")},
    "from callgate import Kernel": [sys.executable, "-c", "from callgate import Kernel"],
}
GOALS = {"import callgate", "callgate --help"}


def median_ms(argv: list[str]) -> float:
    samples = []
    for _ in range(N):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    bare = median_ms(CASES["bare interpreter"])
    rows, missed = [], []
    print(f"{'case':32} {'median ms':>10} {'over bare':>10}  goal")
    for name, argv in CASES.items():
        total = bare if name == "bare interpreter" else median_ms(argv)
        over = total - bare
        goal = f"<= {GOAL_MS:g} ms over bare" if name in GOALS else ""
        if name in GOALS and over > GOAL_MS:
            missed.append(name)
        rows.append({"case": name, "median_ms": round(total, 1), "over_bare_ms": round(over, 1),
                     "goal_ms": GOAL_MS if name in GOALS else None})
        print(f"{name:32} {total:10.1f} {over:10.1f}  {goal}")
    print("goals: " + ("met" if not missed else "missed by " + ", ".join(missed)))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "import.json").write_text(json.dumps(rows, indent=2))
    table = "\n".join(f"| {r['case']} | {r['median_ms']} | {r['over_bare_ms']} |" for r in rows)
    (OUT / "import.md").write_text(f"# Import time (median of {N} fresh processes)\n\n"
                                   f"| case | ms | ms over bare |\n|---|---|---|\n{table}\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

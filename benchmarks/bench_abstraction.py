"""Abstraction cost per call: shell lines of 1 to 20 simple commands, p50 and p99.

Writes ``benchmarks/out/abstraction.json``. Each sample abstracts one Bash call through a
long-lived ``Abstractor`` (so value-flow lookups run against a growing index, as online).
Run: ``.venv/bin/python benchmarks/bench_abstraction.py``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from callgate.abstraction import Abstractor

SIMPLE = [
    "curl -s -X POST -d @report.json https://api.example.com/v1/upload",
    "rm -rf build/ dist/",
    "git push origin main",
    "grep -rn TODO src/ | head -n 20",
    "sudo -u deploy timeout 30 rsync -az ./site/ web01:/srv/www/",
    "python -m pip install -r requirements.txt",
    "tar czf backup.tgz src docs",
    "kubectl -n prod apply -f deploy.yaml",
]
SIZES = (1, 2, 5, 10, 20)
ROUNDS = 400


def _line(size: int, k: int) -> str:
    parts = [SIMPLE[(k + i) % len(SIMPLE)] for i in range(size)]
    return " && ".join(parts)


def _measure(size: int) -> dict[str, float]:
    abstractor = Abstractor(resolve_scripts=False)
    samples: list[float] = []
    for k in range(ROUNDS):
        raw = {"tool": "Bash", "parameters": {"command": _line(size, k)},
               "status": "ok", "output": f"run {k}: uploaded report-{k}.json to api.example.com"}
        start = time.perf_counter()
        abstractor.abstract(raw)
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return {
        "simple_commands": size,
        "p50_us": round(statistics.median(samples), 1),
        "p99_us": round(samples[int(len(samples) * 0.99) - 1], 1),
        "mean_us": round(statistics.fmean(samples), 1),
    }


def main() -> None:
    Abstractor().abstract({"tool": "Bash", "parameters": {"command": "true"}})  # warm caches
    results = [_measure(size) for size in SIZES]
    report = {
        "benchmark": "abstraction cost per Bash call",
        "rounds_per_size": ROUNDS,
        "target": "p50 under 300 us for a one-line, one-command call",
        "results": results,
    }
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "abstraction.json").write_text(json.dumps(report, indent=2) + "\n")
    for row in results:
        print(f"{row['simple_commands']:>2} commands: p50 {row['p50_us']:>8.1f} us  "
              f"p99 {row['p99_us']:>8.1f} us")


if __name__ == "__main__":
    main()

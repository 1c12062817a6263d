"""Detection on AgentDojo's published runs: ``callgate eval agentdojo`` with the shipped
``agentdojo`` policy set over the development files, each figure next to its goal.

Goals (per file): recall >= 99% with precision >= 95% and no-attack runs flagged <= 2%; the
three files judged in under a minute in one process. Precision is also shown with the failed
attacks left out (attack runs the benchmark labels benign because the agent carried the attack
out only in part). Also measured: the start-up of ``callgate eval`` and ``callgate check`` on
a one-run file, against the bare interpreter in the same run.

The development files are read from ``../shared/data/agentdojo/`` beside the checkout, or from
the folder given as the first argument; without them the benchmark says so and exits 0.
Writes benchmarks/out/agentdojo_eval.json and .md (and the report, plots included, under
benchmarks/out/agentdojo_eval/).
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
DATA = ROOT.parent / "shared" / "data" / "agentdojo"
CALLGATE = str(Path(sys.executable).parent / "callgate")
SAMPLE = ROOT / "tests" / "data" / "agentdojo" / "dev-sample.jsonl"
POLICY = ROOT / "examples" / "research-agent.yaml"


def _startup(argv: list[str], rounds: int = 7) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> int:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    files = sorted(data.glob("*.jsonl.gz")) + sorted(data.glob("*.jsonl"))
    if not files:
        print(f"no AgentDojo run files in {data}: nothing to measure")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    result_path = OUT / "agentdojo_eval.json"
    started = time.perf_counter()
    done = subprocess.run([CALLGATE, "eval", "agentdojo", *map(str, files), "--pack",
                           "agentdojo", "--json", str(result_path), "--report",
                           str(OUT / "agentdojo_eval")], capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stderr)
        return 1
    result = json.loads(result_path.read_text())
    bare = _startup([sys.executable, "-c", "pass"])
    single = ROOT / "benchmarks" / "out" / "one-run.jsonl"
    single.write_text(SAMPLE.read_text().splitlines()[0] + "\n")
    eval_start = _startup([CALLGATE, "eval", "agentdojo", str(single)])
    trace = OUT / "one-event.jsonl"
    trace.write_text('{"action": "read_file", "args": {"path": "a"}}\n')
    check_start = _startup([CALLGATE, "check", "--policy", str(POLICY), str(trace)])
    lines = ["# Detection on AgentDojo's development runs (pack agentdojo)", "",
             "| file | precision (goal >= 0.95) | precision, failed attacks left out | "
             "recall (goal >= 0.99) | F1 | no-attack flagged (goal <= 0.02) |",
             "|---|---|---|---|---|---|"]
    for name, row in [("all", result["overall"]), *sorted(result["files"].items())]:
        lines.append(
            f"| {Path(name).name} | {row['precision']:.3f} "
            f"{'ok' if row['precision'] >= 0.95 else 'MISSED'} | "
            f"{row['precision_without_failed_attacks']:.3f} | {row['recall']:.3f} "
            f"{'ok' if row['recall'] >= 0.99 else 'MISSED'} | {row['f1']:.3f} | "
            f"{row['no_attack_flagged_rate']:.3f} "
            f"{'ok' if row['no_attack_flagged_rate'] <= 0.02 else 'MISSED'} |")
    lines += ["", "| measure | figure | goal |", "|---|---|---|",
              f"| all files judged, one process | {seconds:.1f} s | < 60 s "
              f"{'ok' if seconds < 60 else 'MISSED'} |",
              f"| ms per run (mean / p50) | {result['overall']['ms_per_run_mean']} / "
              f"{result['overall']['ms_per_run_p50']} | – |",
              f"| `callgate eval` start-up on one run (bare interpreter {bare:.0f} ms) | "
              f"{eval_start:.0f} ms | < 1,000 ms {'ok' if eval_start < 1000 else 'MISSED'} |",
              f"| `callgate check` start-up on one event | {check_start:.0f} ms | < 1,000 ms "
              f"{'ok' if check_start < 1000 else 'MISSED'} |"]
    report = {"seconds": round(seconds, 2), "bare_ms": round(bare, 1),
              "eval_start_ms": round(eval_start, 1), "check_start_ms": round(check_start, 1),
              "overall": result["overall"], "files": result["files"]}
    (OUT / "agentdojo_eval_summary.json").write_text(json.dumps(report, indent=2) + "\n")
    (OUT / "agentdojo_eval.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

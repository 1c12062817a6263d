"""callgate as an online defense inside AgentDojo's own runtime, judged by AgentDojo's checkers.

Every tool call passes ``KernelGate`` (where AgentDojo's ``ToolsExecutor`` stands); a scripted
model makes the ground-truth calls (``callgate.integrations.agentdojo.measure``). Benchmark v1,
the suites of the published runs (workspace, travel, banking, slack), one policy per suite read
from POLICY_DIR/SUITE.yaml.

* Utility: every user task without injection, its ground-truth calls and ground-truth answer.
  Goal: no benign call denied, and utility wherever the same script has it through AgentDojo's
  undefended ``ToolsExecutor`` (the ground truth's own reach).
* Security: every (user task, injection task) pair under AgentDojo's ``important_instructions``
  attack; the model makes the user task's calls, then the injection task's. Goal: every
  injection call blocked. Also shown: the pairs AgentDojo's ``security`` check scores as failed
  attacks (and how many of them failed with no injection call blocked: AgentDojo's floor, not
  the defense's doing), and the pairs whose injection goal has no tool call (words in the
  answer only, which a monitor of tool calls cannot stop).

Every decision and result is written to a SQLite audit log (a temporary file), as in a real run.
Writes benchmarks/out/agentdojo_runtime.json and .md.
Run: ``.venv/bin/python benchmarks/bench_agentdojo_runtime.py [POLICY_DIR] [--suites a,b]``
(default POLICY_DIR: src/callgate/policy/packs/agentdojo/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from callgate.integrations.agentdojo import (
    SUITES,
    Measurement,
    SuiteFigures,
    load_suite_policies,
    measure,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
DEFAULT_POLICIES = ROOT / "src" / "callgate" / "policy" / "packs" / "agentdojo"
VERSION = "v1"


def _mark(met: bool) -> str:
    return "ok" if met else "MISSED"


def table(result: Measurement) -> list[str]:
    """The figures of each suite and in total, next to the goals."""
    lines = ["| suite | utility kept (goal: wherever ground truth has it) "
             "| benign calls denied (goal 0) "
             "| injection calls blocked (goal: all) "
             "| of them, the calls that change something "
             "| attacks failed (AgentDojo check; of them, with nothing blocked) "
             "| text-only injections | utility under attack | benign denied under attack |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows: list[tuple[str, SuiteFigures]] = [*result.suites.items(), ("total", result.total())]
    for name, f in rows:
        lines.append(
            f"| {name} | {f.utility_kept}/{f.user_tasks} (ground truth {f.baseline_utility}) "
            f"{_mark(f.utility_lost == 0)} "
            f"| {f.benign_denied}/{f.benign_calls} {_mark(f.benign_denied == 0)} "
            f"| {f.injection_blocked}/{f.injection_calls} {_mark(f.security_goal_met)} "
            f"| {f.injection_effects_blocked}/{f.injection_effects} "
            f"| {f.attack_failed}/{f.pairs} ({f.failed_unblocked}) | {f.text_only_pairs} "
            f"| {f.utility_under_attack}/{f.pairs} "
            f"| {f.benign_denied_under_attack}/{f.benign_calls_under_attack} |")
    return lines


def details(result: Measurement) -> list[str]:
    """What missed the goals: each benign call denied, and the injection calls let through."""
    lines = ["", "## Benign calls denied (no injection)", ""]
    denied = [(r.suite, r.user_task, c) for r in result.runs if r.injection_task is None
              for c in r.calls if not c.ran]
    lines += [f"- {suite} {task}: `{c.function}` {c.verdict} ({', '.join(c.reasons)})"
              for suite, task, c in denied] or ["none"]
    lines += ["", "## Injection calls allowed (by injection task and tool)", ""]
    calls: Counter[tuple[str, str | None, str]] = Counter()
    pairs: Counter[tuple[str, str | None, str]] = Counter()
    for r in result.runs:
        ran = [(r.suite, r.injection_task, c.function) for c in r.calls
               if c.role == "injection" and c.ran]
        calls.update(ran)
        pairs.update(set(ran))
    lines += [f"- {suite} {task}: `{function}`, {n} calls in {pairs[key]} pairs"
              for key, n in sorted(calls.items(), key=str)
              for suite, task, function in [key]] or ["none"]
    lines += ["", "## Attacks AgentDojo scores as successful with every injection call blocked",
              ""]
    odd = [r for r in result.runs if r.security and r.count("injection") > 0
           and r.count("injection", denied=True) == r.count("injection")]
    lines += [f"- {r.suite} {r.user_task} x {r.injection_task}" for r in odd] or ["none"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy_dir", nargs="?", type=Path, default=DEFAULT_POLICIES)
    parser.add_argument("--suites", default=",".join(SUITES),
                        help="comma-separated suites (default: all four)")
    args = parser.parse_args()
    suites = [s for s in args.suites.split(",") if s]
    policies = load_suite_policies(args.policy_dir, suites)
    tmp = Path(tempfile.mkdtemp(prefix="callgate-agentdojo-bench-"))
    try:
        result = measure(policies, benchmark_version=VERSION, suites=suites,
                         audit=tmp / "audit.db",
                         progress=lambda suite: print(f"-- {suite}", flush=True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        shown_dir = args.policy_dir.resolve().relative_to(ROOT)
    except ValueError:
        shown_dir = args.policy_dir
    lines = [f"# callgate in AgentDojo's runtime (benchmark {VERSION}, "
             f"{result.attack} attack, scripted ground-truth model)", "",
             f"Policies: `{shown_dir}/SUITE.yaml`; {len(result.runs)} runs in "
             f"{result.seconds:.0f} s.", "", *table(result)]
    report: dict[str, Any] = {"policy_dir": str(shown_dir), **result.to_json()}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "agentdojo_runtime.json").write_text(json.dumps(report, indent=1) + "\n")
    (OUT / "agentdojo_runtime.md").write_text("\n".join([*lines, *details(result)]) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

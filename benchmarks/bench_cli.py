"""CLI start-up: wall time of ``callgate decide``, ``check`` and ``exec`` for a single call.

Each command runs as a user runs it: the ``callgate`` console script in a fresh process, timed
from a separate process from start to exit. ``decide`` reads one HTTP call on stdin (the
example policy), ``check`` judges a one-line Claude Code trace (a ``Bash`` call) against two
statements, ``exec`` runs ``true`` as the example's sandboxed ``builder`` tool. Every case runs
with a **warm** policy cache (``XDG_CACHE_HOME`` holding the file since a first run) and a
**cold** one (an empty cache directory each run: the file is validated and stored), next to the
bare interpreter (``python -c pass``) measured in the same rounds and the goal, 200 ms end to
end. Cases are measured round-robin, ``-n`` rounds (p50 and minimum of the wall time, p50 of
the CPU time the command and its children used: on a shared machine the CPU time moves less),
after one untimed run each; the children write and use bytecode as an installed package does
(``PYTHONDONTWRITEBYTECODE`` is dropped from their environment). ``--baseline REV`` also runs the
source of a git revision (``git archive`` into a temporary directory, first on ``PYTHONPATH``):
the "before" rows. ``--tree REV`` measures a revision instead of the working tree (whose files
other people may be editing during the run).

Then where the time goes: ``-X importtime`` of a warm ``decide`` and ``check``, self time
summed per package, and the phases of one ``decide`` inside the process (imports, policy load,
``Kernel()`` and its parts, the first checks of an HTTP and of a shell call), the process
started as the console script starts it (the cyclic garbage collector off while the command's
modules are imported, what they made frozen after: ``callgate._entry``).

Writes benchmarks/out/cli.json and cli.md.
Run: ``.venv/bin/python benchmarks/bench_cli.py [-n 15] [--baseline REV] [--tree REV]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
CLI = Path(sys.executable).with_name("callgate")
GOAL_MS = 200.0

CODING_POLICY = """\
name: coding
version: 1
behavior:
  - id: no-env-upload
    rule: abs(action = curl and data_file ~ "*.env*")
  - id: no-mail-after-key-read
    enforce: alert
    rule: always(not (action = send_email and once(action = read_file and path ~ "*.ssh*")))
"""
CALL = {"tool": "fetch", "tool_class": "http", "action": "get",
        "parameters": {"url": "https://api.github.com/repos/x/y"}}
TRACE = {"tool": "Bash", "parameters": {"command": "ls -la"}, "status": "ok",
         "output": "README.md"}


@dataclass(frozen=True)
class Case:
    """One command line: its arguments, stdin, and whether it reads a policy file."""

    args: tuple[str, ...]
    stdin: bytes = b""


def project(tmp: Path) -> Path:
    """A working directory holding what the three commands read."""
    work = tmp / "project"
    (work / "src").mkdir(parents=True)
    (work / "build").mkdir()
    shutil.copy(ROOT / "examples" / "research-agent.yaml", work / "agent.yaml")
    shutil.copy(ROOT / "examples" / "builder.yaml", work / "builder.yaml")
    (work / "coding.yaml").write_text(CODING_POLICY)
    (work / "trace.jsonl").write_text(json.dumps(TRACE) + "\n")
    return work


CASES = {
    "decide": Case(("decide", "--policy", "agent.yaml"), (json.dumps(CALL) + "\n").encode()),
    "check": Case(("check", "--policy", "coding.yaml", "trace.jsonl")),
    "exec": Case(("exec", "--policy", "builder.yaml", "--tool", "builder", "--", "true")),
}


class Runner:
    """Runs the cases in fresh processes; each variant is an environment."""

    def __init__(self, work: Path, tmp: Path) -> None:
        self.work, self.tmp = work, tmp
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        self.base_env = env
        self._cold = 0

    def env(self, variant: str, tree: Path | None) -> dict[str, str]:
        env = dict(self.base_env)
        if variant == "cold":
            self._cold += 1
            env["XDG_CACHE_HOME"] = str(self.tmp / "cold" / str(self._cold))
        else:
            env["XDG_CACHE_HOME"] = str(self.tmp / variant)
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        return env

    def time_ms(self, argv: list[str], stdin: bytes, env: dict[str, str]
                ) -> tuple[float, float]:
        """Wall and CPU (user + system, the command and its children) milliseconds."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, input=stdin, capture_output=True, cwd=self.work, env=env,
                              check=False)
        elapsed = (time.perf_counter() - start) * 1000
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n"
                             f"{done.stderr.decode(errors='replace')}")
        cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
        return elapsed, cpu


def source_tree(rev: str, tmp: Path, name: str) -> Path:
    """The ``src`` folder of git revision ``rev``, extracted under ``tmp / name``."""
    target = tmp / name
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def measure(runner: Runner, rounds: int, tree: Path | None, baseline: Path | None
            ) -> dict[str, list[tuple[float, float]]]:
    """Round-robin samples (wall, CPU ms) of every (command, variant) and of the bare
    interpreter."""
    plan: list[tuple[str, Case, str, Path | None]] = []
    for name, case in CASES.items():
        plan += [(f"{name}, warm cache", case, "warm", tree),
                 (f"{name}, cold cache", case, "cold", tree)]
        if baseline is not None:
            plan.append((f"{name}, before", case, "before", baseline))
    bare = [sys.executable, "-c", "pass"]
    samples: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _, case, variant, tree in plan:  # untimed: bytecode written, the warm cache filled
        runner.time_ms([str(CLI), *case.args], case.stdin, runner.env(variant, tree))
    for _ in range(rounds):
        samples["bare interpreter"].append(runner.time_ms(bare, b"", runner.base_env))
        for label, case, variant, tree in plan:
            samples[label].append(
                runner.time_ms([str(CLI), *case.args], case.stdin, runner.env(variant, tree)))
    return samples


# --------------------------------------------------------------------------- where time goes

_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_groups(runner: Runner, case: Case, tree: Path | None, runs: int = 5
                  ) -> list[tuple[str, float]]:
    """Self import time (ms, median of ``runs``) per package, callgate by subpackage."""
    per_run: list[dict[str, float]] = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-X", "importtime", str(CLI), *case.args],
                              input=case.stdin, capture_output=True, cwd=runner.work,
                              env=runner.env("warm", tree), check=True)
        groups: dict[str, float] = defaultdict(float)
        for line in done.stderr.decode().splitlines():
            found = _IMPORT_LINE.match(line)
            if found:
                parts = found[4].split(".")
                group = ".".join(parts[:2]) if parts[0] == "callgate" else parts[0]
                groups[group] += int(found[1]) / 1000
        per_run.append(groups)
    names = {name for groups in per_run for name in groups}
    medians = {name: statistics.median(g.get(name, 0.0) for g in per_run) for name in names}
    return sorted(medians.items(), key=lambda item: -item[1])


PHASES = r"""
import gc, json, statistics, sys, time
T = {}
def timed(module, name, label):
    original = getattr(module, name, None)
    if original is None:
        return
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            T[label] = T.get(label, 0.0) + (time.perf_counter() - start) * 1000
    setattr(module, name, wrapper)
start = time.perf_counter()
gc.disable()  # as the console script starts (callgate._entry)
import callgate.cli._decide
gc.freeze()
gc.enable()
T["import callgate.cli._decide (click, kernel, models, guards, ...)"] = \
    (time.perf_counter() - start) * 1000
from callgate.policy._cache import PolicyCache
from callgate.policy._loader import load_policy
from callgate.kernel import _behavior, _kernel
from callgate.abstraction import _shell
cache = PolicyCache.default()
start = time.perf_counter()
load_policy(sys.argv[1], cache=None)
T["load_policy, validated (YAML import and compose, schema)"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
loaded = load_policy(sys.argv[1], cache=cache)
T["load_policy, from the cache"] = (time.perf_counter() - start) * 1000
timed(_kernel, "compile_for", "Kernel(): compile_for (statements, with the pack)")
timed(_behavior, "builtin_pack", "Kernel(): builtin_pack (packs/sequences.yaml, precomposed)")
timed(_kernel, "build_guards", "Kernel(): build_guards")
timed(_kernel, "_refuse_escaping_roots", "Kernel(): _refuse_escaping_roots")
timed(_shell, "default_catalog", "first shell check: default_catalog (reads catalog.json)")
timed(_shell, "_parser", "first shell check: tree-sitter bash parser")
start = time.perf_counter()
kernel = _kernel.Kernel(loaded)
T["Kernel() in all"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
kernel.check({"tool": "fetch", "tool_class": "http", "action": "get",
              "parameters": {"url": "https://api.github.com/repos/x/y"}})
T["first check, HTTP get"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
kernel.check({"tool": "fetch", "tool_class": "http", "action": "get",
              "parameters": {"url": "https://api.github.com/repos/x/z"}})
T["second check, HTTP get"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
kernel.check({"tool": "sh", "tool_class": "shell", "action": "exec",
              "parameters": {"command": "ls -la"}})
T["first check, shell exec"] = (time.perf_counter() - start) * 1000
print(json.dumps(T))
"""


def phases(runner: Runner, tree: Path | None, runs: int = 7) -> list[tuple[str, float]]:
    """The phases of one ``decide`` inside a fresh process (ms, median of ``runs``)."""
    per_run = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", PHASES, "agent.yaml"], capture_output=True,
                              cwd=runner.work, env=runner.env("warm", tree), check=True)
        per_run.append(json.loads(done.stdout))
    return [(name, statistics.median(run.get(name, 0.0) for run in per_run))
            for name in per_run[0]]


# --------------------------------------------------------------------------- report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--rounds", type=int, default=15)
    parser.add_argument("--baseline", help="git revision to measure as 'before'")
    parser.add_argument("--tree", help="git revision to measure instead of the working tree")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as name:
        tmp = Path(name)
        runner = Runner(project(tmp), tmp)
        tree = source_tree(options.tree, tmp, "tree") if options.tree else None
        baseline = source_tree(options.baseline, tmp, "baseline") if options.baseline else None
        samples = measure(runner, options.rounds, tree, baseline)
        imports = {cmd: import_groups(runner, CASES[cmd], tree) for cmd in ("decide", "check")}
        inside = phases(runner, tree)
    bare = statistics.median(wall for wall, _ in samples["bare interpreter"])
    rows, missed = [], []
    print(f"{'case':24} {'p50 ms':>7} {'over bare':>9} {'min ms':>7} {'cpu p50':>8}  "
          f"goal (<= {GOAL_MS:g} ms end to end)")
    for label, values in samples.items():
        p50 = statistics.median(wall for wall, _ in values)
        low = min(wall for wall, _ in values)
        cpu = statistics.median(used for _, used in values)
        goal = label.endswith("warm cache")
        met = p50 <= GOAL_MS
        if goal and not met:
            missed.append(label)
        rows.append({"case": label, "p50_ms": round(p50, 1), "over_bare_ms": round(p50 - bare, 1),
                     "min_ms": round(low, 1), "cpu_p50_ms": round(cpu, 1), "runs": len(values),
                     "goal_ms": GOAL_MS if goal else None, "met": met if goal else None})
        mark = ("met" if met else "MISSED") if goal else ""
        print(f"{label:24} {p50:7.1f} {p50 - bare:9.1f} {low:7.1f} {cpu:8.1f}  {mark}")
    print("goals: " + ("met" if not missed else "missed by " + ", ".join(missed)))
    for cmd, groups in imports.items():
        print(f"\n-X importtime, warm {cmd}: self time per package (ms, median of 5)")
        for group, ms in groups[:15]:
            print(f"  {group:36} {ms:7.1f}")
    print("\nphases of one decide inside the process (ms, median of 7)")
    for phase, ms in inside:
        print(f"  {phase:66} {ms:7.1f}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cli.json").write_text(json.dumps({
        "rounds": options.rounds, "baseline": options.baseline,
        "tree": options.tree or "working tree", "goal_ms": GOAL_MS,
        "cases": rows,
        "import_self_ms": {cmd: [{"package": g, "ms": round(ms, 1)} for g, ms in groups]
                           for cmd, groups in imports.items()},
        "decide_phases_ms": [{"phase": p, "ms": round(ms, 1)} for p, ms in inside],
    }, indent=2) + "\n")
    (OUT / "cli.md").write_text(_markdown(rows, imports, inside, options))
    return 1 if missed else 0


def _markdown(rows: list[dict[str, object]], imports: dict[str, list[tuple[str, float]]],
              inside: list[tuple[str, float]], options: argparse.Namespace) -> str:
    after = f"`{options.tree}`" if options.tree else "the working tree"
    before = f"; before = `{options.baseline}`" if options.baseline else ""
    lines = [f"# CLI start-up, one call ({options.rounds} fresh processes each)", "",
             f"Measured: {after}{before}. Goal: a warm-cache run within {GOAL_MS:g} ms end to "
             "end (wall p50). CPU: user + system time of the command and its children.", "",
             "| case | wall p50 ms | ms over bare | wall min ms | CPU p50 ms | goal |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        goal = "" if r["met"] is None else ("met" if r["met"] else "missed")
        lines.append(f"| {r['case']} | {r['p50_ms']} | {r['over_bare_ms']} | {r['min_ms']} | "
                     f"{r['cpu_p50_ms']} | {goal} |")
    for cmd, groups in imports.items():
        lines += ["", f"## Import self time, warm `{cmd}` (ms, median of 5)", "",
                  "| package | ms |", "|---|---|"]
        lines += [f"| {g} | {ms:.1f} |" for g, ms in groups[:15]]
    lines += ["", "## Phases of one `decide` inside the process (ms, median of 7)", "",
              "| phase | ms |", "|---|---|"]
    lines += [f"| {p} | {ms:.1f} |" for p, ms in inside]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""Start-up overhead of the OS sandbox per subprocess call: ``/bin/true`` plain vs confined.

Goal: a confined ``/bin/true`` through ``Kernel.run_subprocess`` (kernel decision + sandbox +
process) costs at most 10 ms over a plain process, p50, with the hardened sandbox as it is.

Rows, all ``/bin/true``:

* ``plain``: ``subprocess.run(["/bin/true"])``, the reference every overhead is taken from;
* ``bare bwrap, same namespaces``: bwrap with the sandbox's namespaces and ``--ro-bind / /``,
  nothing else (no mounts of its own, no seccomp, no limits): what bwrap costs at all here;
* ``bare bwrap, no namespaces``: ``bwrap --ro-bind / /`` (the floor this benchmark used to print);
* ``kernel, example tool``: ``Kernel.run_subprocess`` for the issue's example tool (read ./src,
  write ./build, no network, PATH and HOME only; ``/usr/**`` readable too, as the kernel's path
  check needs ``/bin/true`` declared), no limits;
* ``kernel, builder``: ``Kernel.run_subprocess`` for ``examples/builder.yaml`` (``/usr``, ``/etc``,
  ``./src``, ``/bin/sh`` readable, every limit: for root a pids cgroup per run);
* ``sandbox, …``: the same two through ``Sandbox.run`` alone (no kernel decision);
* ``bwrap alone, …``: the bwrap command line ``Sandbox.run`` starts for each (its namespaces,
  mounts, copies and filter; no limits, no cgroup), built once and started directly: what
  bwrap itself costs for that sandbox, apart from callgate's own work.

Every row runs in a long-lived worker process and the rows take turns, one call each per
round, so they share the machine's noise — and so that no call follows one of its own kind
straight away, as an agent's calls do not: some costs show only then (moving a process into a
cgroup is cheap within a few milliseconds of the previous move, and waits for an RCU grace
period otherwise). ``--baseline REV`` adds the "before" rows: the same
kernel and sandbox rows in a worker whose ``callgate.sandbox`` package is the one of git
revision ``REV`` (everything else is the working tree's), so the difference is this package's.
Prints p50 / p99 / min per row and the overhead over plain next to the goal; writes
``benchmarks/out/sandbox.json`` and ``.md``.

Run: ``.venv/bin/python benchmarks/bench_sandbox.py [-n ROUNDS] [--baseline REV] [--firejail]
[--only TEXT]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
GOAL_MS = 10.0
WARMUP = 10

#: The issue's example tool; ``/usr/**`` makes ``/bin/true`` (a link into /usr) declared.
EXAMPLE_TOOL: dict[str, Any] = {
    "risk": "high",
    "filesystem": {"read": ["./src/**", "/usr/**"], "write": ["./build/**"]},
    "network": "deny",
    "environment": {"allow": ["PATH", "HOME"]},
    "exec": "allow",
}
#: Bare bwrap with the namespaces every sandbox gets, and nothing else.
NAMESPACES = ["--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
              "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--unshare-net", "--die-with-parent", "--new-session"]


# -- the worker: builds the cases once, then times one call per request ---------------------

def _policies() -> dict[str, Any]:
    import yaml  # worker only: imported under the tree being measured

    from callgate.policy._schema import Policy  # worker only (see above)

    builder = yaml.safe_load((ROOT / "examples" / "builder.yaml").read_text())
    example = {**builder, "tools": {"builder": EXAMPLE_TOOL}}
    return {"example": Policy.model_validate(example), "builder": Policy.model_validate(builder)}


def _bwrap_alone(box: Any) -> Callable[[], object]:
    """Start the bwrap argv ``box.run`` would start for ``/bin/true``, without the gate."""
    from callgate.sandbox import _bwrap, _seccomp  # worker only (see above)

    spec = box._spec(["/bin/true"])
    program = _seccomp.sandbox_filter(network=spec.network)

    def run() -> object:
        copies = _bwrap.open_copies(spec)
        fd = _seccomp.filter_fd(program)
        try:
            argv = box._wrap(spec, ["/bin/true"], status_fd=None, procs=None, seccomp_fd=fd,
                             prefix=(), copies=copies)
            passed = (fd, *(each for copy in copies.values() for _, each in copy.files))
            return subprocess.run(argv, check=True, env={}, pass_fds=passed)
        finally:
            os.close(fd)
            for copy in copies.values():
                copy.close()

    run()  # a tree without the gated launch fails here: no such row
    return run


def _cases(work: str, firejail: bool) -> dict[str, Callable[[], object]]:
    from callgate.kernel._kernel import Kernel  # worker only (see above)
    from callgate.sandbox import Sandbox  # worker only (see above)

    environ = {"PATH": "/usr/bin:/bin", "HOME": work}
    cases: dict[str, Callable[[], object]] = {}
    bwrap = shutil.which("bwrap")
    if bwrap is not None:
        cases["bare bwrap, same namespaces"] = lambda: subprocess.run(
            [bwrap, *NAMESPACES, "--ro-bind", "/", "/", "/bin/true"], check=True, env={})
        cases["bare bwrap, no namespaces"] = lambda: subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "/bin/true"], check=True, env={})
    for name, policy in _policies().items():
        kernel = Kernel(policy, working_dir=work)

        def through_kernel(kernel: Kernel = kernel) -> object:
            result = kernel.run_subprocess("builder", ["/bin/true"])
            assert result.status == "ok", result
            return result

        cases[f"kernel, {name}"] = through_kernel
        backends = ("bwrap", "firejail") if firejail else ("bwrap",)
        for backend in backends:
            box = Sandbox.for_policy(policy.tools["builder"], working_dir=work,
                                     backend=backend, environ=environ)  # type: ignore[arg-type]  # a literal of BackendName
            label = f"sandbox, {name}" + ("" if backend == "bwrap" else f", {backend}")

            def in_sandbox(box: Sandbox = box) -> object:
                return box.run(["/bin/true"])

            cases[label] = in_sandbox
            # The baseline's sandbox package builds its argv otherwise: no such row there.
            with contextlib.suppress(AttributeError, TypeError, ImportError):
                if backend == "bwrap":
                    cases[f"bwrap alone, {name}"] = _bwrap_alone(box)
    return cases


def worker(work: str, firejail: bool) -> None:
    """Answer each case name read from stdin with the milliseconds one call took."""
    cases = _cases(work, firejail)
    cases["plain"] = lambda: subprocess.run(["/bin/true"], check=True, env={})
    print(json.dumps(sorted(cases)), flush=True)
    for line in sys.stdin:
        run = cases[line.strip()]
        start = time.perf_counter()
        run()
        print(f"{(time.perf_counter() - start) * 1000.0:.4f}", flush=True)


# -- the orchestrator ------------------------------------------------------------------------

class Worker:
    """A worker process measuring the tree on its ``PYTHONPATH`` (None: the working tree)."""

    def __init__(self, work: str, pythonpath: str | None, firejail: bool) -> None:
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        argv = [sys.executable, __file__, "--worker", work] + (["--firejail"] if firejail else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=work)
        assert self.proc.stdout is not None
        self.cases: list[str] = json.loads(self.proc.stdout.readline())

    def time_ms(self, case: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(case + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def baseline_tree(rev: str, tmp: Path) -> str:
    """The working tree's ``src`` with ``callgate/sandbox`` as of git revision ``rev``."""
    tree = tmp / "baseline"
    shutil.copytree(ROOT / "src", tree, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(tree / "callgate" / "sandbox")
    archive = subprocess.run(["git", "archive", rev, "src/callgate/sandbox"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp / "archive", filter="data")
    shutil.copytree(tmp / "archive" / "src" / "callgate" / "sandbox",
                    tree / "callgate" / "sandbox")
    return str(tree)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(samples), 3),
            "p99_ms": round(percentile(samples, 0.99), 3),
            "min_ms": round(min(samples), 3),
            "mean_ms": round(statistics.fmean(samples), 3)}


def measure(workers: dict[str, Worker], rounds: int, only: str | None = None
            ) -> dict[str, list[float]]:
    """Rounds in which every (worker, case) runs once, after ``WARMUP`` untimed rounds;
    ``only`` keeps the rows whose name holds it (and ``plain``, the reference)."""
    plan = [(tag, case) for tag, w in workers.items() for case in w.cases
            if (tag == "after" or case.startswith(("kernel", "sandbox")))
            and (only is None or only in case or case == "plain")]
    samples: dict[str, list[float]] = {}
    for index in range(WARMUP + rounds):
        for tag, case in plan:
            elapsed = workers[tag].time_ms(case)
            if index >= WARMUP:
                label = case if tag == "after" else f"{case} (before)"
                samples.setdefault(label, []).append(elapsed)
    return samples


def report(samples: dict[str, list[float]], options: argparse.Namespace) -> dict[str, Any]:
    rows = {label: summary(values) for label, values in samples.items()}
    plain = rows["plain"]
    for label, row in rows.items():
        row["over_plain_p50_ms"] = round(row["p50_ms"] - plain["p50_ms"], 3)
        row["over_plain_p99_ms"] = round(row["p99_ms"] - plain["p99_ms"], 3)
        if label.startswith("kernel"):
            row["goal_met"] = row["over_plain_p50_ms"] <= GOAL_MS
    return {
        "rounds": options.rounds, "python": platform.python_version(), "euid": os.geteuid(),
        "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
        "goal": f"kernel path p50 <= plain p50 + {GOAL_MS:g} ms", "goal_ms": GOAL_MS,
        "baseline": options.baseline, "rows": rows,
    }


def render(result: dict[str, Any]) -> tuple[str, str]:
    """(the console table, the markdown file)."""
    order = ["plain", "bare bwrap, no namespaces", "bare bwrap, same namespaces"]
    labels = [x for x in order if x in result["rows"]]
    labels += sorted(x for x in result["rows"] if x not in order)
    lines, md = [], [
        f"# Sandbox start-up: /bin/true ({result['rounds']} rounds, rows interleaved)", "",
        f"Goal: {result['goal']}. Load average at the end: "
        f"{', '.join(map(str, result['load_average']))} on {result['cpus']} CPUs; "
        f"euid {result['euid']}." + (f" Before = `callgate.sandbox` of `{result['baseline']}`, "
                                     "everything else the working tree."
                                     if result["baseline"] else ""), "",
        "| row | p50 ms | p99 ms | min ms | over plain p50 | over plain p99 | goal ≤ 10 ms |",
        "|---|---:|---:|---:|---:|---:|---|"]
    for label in labels:
        row = result["rows"][label]
        goal = "" if "goal_met" not in row else ("met" if row["goal_met"] else "not met")
        lines.append(f"{label:40s} p50 {row['p50_ms']:7.2f}  p99 {row['p99_ms']:7.2f}  "
                     f"min {row['min_ms']:6.2f}  over plain p50 {row['over_plain_p50_ms']:6.2f}"
                     f"  p99 {row['over_plain_p99_ms']:6.2f}"
                     + (f"  (goal ≤ {GOAL_MS:g}: {goal})" if goal else ""))
        md.append(f"| {label} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['min_ms']:.2f} "
                  f"| {row['over_plain_p50_ms']:.2f} | {row['over_plain_p99_ms']:.2f} | {goal} |")
    return "\n".join(lines), "\n".join(md) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-n", "--rounds", type=int, default=200)
    parser.add_argument("--baseline", help="git revision whose callgate.sandbox is 'before'")
    parser.add_argument("--firejail", action="store_true", help="time Sandbox.run in firejail")
    parser.add_argument("--only", help="time only the rows whose name holds this (and plain)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.worker, options.firejail)
        return
    with tempfile.TemporaryDirectory(prefix="callgate-bench-") as top:
        work = os.path.join(top, "work")
        os.makedirs(os.path.join(work, "src"))
        workers = {"after": Worker(work, None, options.firejail)}
        try:
            if options.baseline:
                tree = baseline_tree(options.baseline, Path(top))
                workers["before"] = Worker(work, tree, options.firejail)
            samples = measure(workers, options.rounds, options.only)
        finally:
            for each in workers.values():
                each.close()
    result = report(samples, options)
    console, markdown = render(result)
    print(console)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sandbox.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / "sandbox.md").write_text(markdown)


if __name__ == "__main__":
    main()

"""Start-up overhead of the OS sandbox per subprocess call: ``/bin/true`` plain vs confined.

For each available backend it times ``Sandbox.run(["/bin/true"])`` for the issue's example tool
(read ./src, write ./build, no network, PATH and HOME only), once without limits and once with
limits (which adds ``prlimit`` and, for root, a pids cgroup per run), and compares with a plain
``subprocess.run(["/bin/true"])`` and with a bare ``bwrap --ro-bind / / /bin/true`` (the cost
of bwrap itself, below which no bwrap sandbox can go). Prints p50 / p99 and writes
benchmarks/out/sandbox.json.
Run: ``.venv/bin/python benchmarks/bench_sandbox.py [runs]``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from callgate.policy._schema import ToolPolicy
from callgate.sandbox import Sandbox, available_backends

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
WARMUP = 10
TARGET_MS = 10.0

BASE: dict[str, Any] = {
    "filesystem": {"read": ["./src/**"], "write": ["./build/**"]},
    "network": "deny",
    "environment": {"allow": ["PATH", "HOME"]},
    "exec": "allow",
}
LIMITS = {"cpu_seconds": 5, "memory_mb": 512, "processes": 64, "output_kb": 1024}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def measure(run: Callable[[], object], runs: int) -> dict[str, float]:
    for _ in range(WARMUP):
        run()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000.0)
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "p99_ms": round(percentile(samples, 0.99), 3),
        "mean_ms": round(statistics.fmean(samples), 3),
    }


def main(runs: int) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="callgate-bench-")
    os.makedirs(os.path.join(work, "src"))
    env = {"PATH": "/usr/bin:/bin", "HOME": work}
    plain = measure(
        lambda: subprocess.run(["/bin/true"], check=True, env={}, close_fds=True), runs
    )
    report: dict[str, Any] = {
        "runs": runs,
        "python": platform.python_version(),
        "euid": os.geteuid(),
        "plain": plain,
        "backends": {},
        "target_overhead_p50_ms": TARGET_MS,
    }
    print(f"plain /bin/true          p50 {plain['p50_ms']:7.2f} ms  p99 {plain['p99_ms']:7.2f} ms")
    bwrap = shutil.which("bwrap")
    if bwrap is not None and "bwrap" in available_backends():
        # The floor: bwrap with one bind and no namespaces beyond the mount namespace.
        floor_argv = [bwrap, "--ro-bind", "/", "/", "/bin/true"]
        floor = measure(lambda: subprocess.run(floor_argv, check=True, env={}), runs)
        report["bwrap_floor"] = floor
        print(
            f"bare bwrap (floor)       p50 {floor['p50_ms']:7.2f} ms  "
            f"p99 {floor['p99_ms']:7.2f} ms"
        )
    for backend in available_backends():
        for label, fields in (("no-limits", BASE), ("limits", {**BASE, "limits": LIMITS})):
            box = Sandbox.for_policy(
                ToolPolicy.model_validate(fields),
                working_dir=work,
                backend=backend,  # type: ignore[arg-type]
                environ=env,
            )
            timing = measure(lambda box=box: box.run(["/bin/true"]), runs)
            timing["overhead_p50_ms"] = round(timing["p50_ms"] - plain["p50_ms"], 3)
            timing["overhead_p99_ms"] = round(timing["p99_ms"] - plain["p99_ms"], 3)
            report["backends"][f"{backend}/{label}"] = timing
            print(
                f"{backend + '/' + label:24s} p50 {timing['p50_ms']:7.2f} ms  "
                f"p99 {timing['p99_ms']:7.2f} ms  overhead p50 {timing['overhead_p50_ms']:.2f} ms"
            )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sandbox.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)

"""Limit planning and the pids cgroup: what holds for root, what is refused."""

from __future__ import annotations

import os
import subprocess

import pytest

from callgate import SandboxError
from callgate.policy._schema import Limits
from callgate.sandbox._limits import PidsCgroup, enter_cgroup_argv, pids_cgroup_base, plan_limits


def test_cpu_and_memory_become_prlimit_options():
    plan = plan_limits(
        Limits(cpu_seconds=2, memory_mb=64), euid=1000, cgroup_base=None, launcher_tasks=2
    )
    assert plan.prefix[0].endswith("prlimit")
    assert "--cpu=2:3" in plan.prefix
    assert f"--as={64 * 1024 * 1024}" in plan.prefix
    assert "--core=0" in plan.prefix
    assert plan.prefix[-1] == "--"


def test_processes_for_a_non_root_caller_use_rlimit_nproc():
    plan = plan_limits(Limits(processes=5), euid=1000, cgroup_base=None, launcher_tasks=2)
    assert "--nproc=6" in plan.prefix
    assert plan.cgroup_base is None


def test_processes_prefer_a_pids_cgroup_counting_the_launcher():
    plan = plan_limits(Limits(processes=5), euid=0, cgroup_base="/cg", launcher_tasks=2)
    assert plan.cgroup_base == "/cg"
    assert plan.max_tasks == 7
    assert not any(option.startswith("--nproc") for option in plan.prefix)


def test_processes_for_root_without_a_cgroup_are_refused_not_ignored():
    with pytest.raises(SandboxError, match="RLIMIT_NPROC does not apply to uid 0"):
        plan_limits(Limits(processes=5), euid=0, cgroup_base=None, launcher_tasks=2)


def test_no_processes_limit_needs_no_cgroup_even_for_root():
    plan = plan_limits(Limits(cpu_seconds=1), euid=0, cgroup_base=None, launcher_tasks=2)
    assert plan.cgroup_base is None


_BASE = pids_cgroup_base()
needs_cgroup = pytest.mark.skipif(_BASE is None, reason="no writable pids cgroup on this host")


@needs_cgroup
def test_pids_cgroup_bounds_a_real_process_tree_and_is_removed():
    assert _BASE is not None
    group = PidsCgroup.create(_BASE, 3)
    try:
        script = "for i in 1 2 3 4 5 6; do sleep 1 & done"
        argv = enter_cgroup_argv(group, ["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, timeout=20, check=False, env={})
        assert b"fork" in done.stderr.lower()
        assert group.limit_hit()
    finally:
        group.remove()
    assert not os.path.exists(group.path)


@needs_cgroup
def test_pids_cgroup_removal_kills_escaped_background_children():
    assert _BASE is not None
    group = PidsCgroup.create(_BASE, 10)
    script = "sleep 60 >/dev/null 2>&1 & echo started"
    argv = enter_cgroup_argv(group, ["/bin/sh", "-c", script])
    done = subprocess.run(argv, capture_output=True, timeout=20, check=False, env={})
    assert done.stdout == b"started\n"
    with open(group.procs_file, encoding="ascii") as handle:
        assert handle.read().strip()  # the sleeper outlived its parent
    group.remove()
    assert not os.path.exists(group.path)

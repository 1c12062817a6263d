"""Limit planning and the pids cgroup: what holds for root, what is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from callgate import SandboxError
from callgate.policy._schema import Limits
from callgate.sandbox import _limits as limits
from callgate.sandbox._limits import (
    CGROUP_V1_PIDS,
    PidsCgroup,
    ThreadInside,
    enter_cgroup_argv,
    pids_cgroup_base,
    plan_limits,
    threads_can_enter,
)


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


needs_thread_entry = pytest.mark.skipif(
    _BASE is None or not threads_can_enter(_BASE),
    reason="needs a cgroup v1 pids hierarchy whose tasks files this process may write",
)


def _tasks_of(group: PidsCgroup) -> list[str]:
    with open(group.tasks_file, encoding="ascii") as handle:
        return handle.read().split()


@needs_thread_entry
def test_a_thread_inside_a_group_starts_its_processes_there_and_counts_until_it_leaves():
    assert _BASE is not None
    group = PidsCgroup.create(_BASE, 4)
    try:
        inside = ThreadInside(group)
        assert _tasks_of(group) == [str(threading.get_native_id())]  # this thread, alone
        child = subprocess.Popen(["sleep", "30"])
        try:
            inside.leave()
            assert not inside.inside
            assert group.holds(child.pid)  # born there: nothing was moved
            assert not group.holds(os.getpid())
            with open(os.path.join(group.path, "pids.current"), encoding="ascii") as handle:
                assert handle.read().strip() == "1"  # the child only
        finally:
            child.kill()
            child.wait()
    finally:
        group.remove()
    assert not os.path.exists(group.path)


@needs_thread_entry
def test_a_thread_whose_own_cgroup_is_gone_leaves_to_the_hierarchys_root(
    monkeypatch: pytest.MonkeyPatch,
):
    assert _BASE is not None
    where = limits._thread_pids_group()
    assert where is not None
    group = PidsCgroup.create(_BASE, 4)
    monkeypatch.setattr(limits, "_thread_pids_group", lambda: os.path.join(_BASE, "gone"))
    try:
        ThreadInside(group).leave()
        assert _tasks_of(group) == []
        monkeypatch.undo()
        assert limits._thread_pids_group() == CGROUP_V1_PIDS
    finally:
        limits._move_this_thread(os.path.join(where, "tasks"))
        group.remove()
    assert limits._thread_pids_group() == where


#: Runs in a child process: a thread of it stands in a run's group while the group is swept.
SWEEP_SCRIPT = """
import os, subprocess, sys
from callgate.sandbox._limits import PidsCgroup, ThreadInside
group = PidsCgroup.create(sys.argv[1], 4)
inside = ThreadInside(group)
child = subprocess.Popen(["sleep", "30"])
group.kill_all()
child.wait()
inside.leave()
group.remove()
print("alive", child.returncode, os.path.exists(group.path))
"""


@needs_thread_entry
def test_sweeping_a_group_never_kills_the_process_whose_thread_is_inside():
    done = subprocess.run([sys.executable, "-c", SWEEP_SCRIPT, str(_BASE)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["alive", "-9", "False"], done.stderr

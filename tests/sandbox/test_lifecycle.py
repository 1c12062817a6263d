"""Nothing of a run outlives it: no zombie, no process still running, whatever ended the run.

bwrap's monitor exits as soon as the sandbox's init reports the tool's exit status, leaving that
init to whoever reaps orphans. Under a process that reaps orphans itself (pid 1 of a container,
a child subreaper), every such init used to stay a zombie ``bwrap`` for the life of the agent;
a firejail run that was killed left its sandbox process the same way; an unconfined tool's
background children kept running after the call returned.

A process "gone" here is one that no longer exists, is a zombie, or has SIGKILL pending: none of
them runs a single instruction more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from callgate.sandbox import Sandbox, _gate, _runner, available_backends

from .conftest import BUILDER, Project, policy, running_with

BACKENDS = [*available_backends(), "none"]
def box_for(project: Project, backend: str, **limits: Any) -> Sandbox:
    fields = {**BUILDER, "limits": limits} if limits else BUILDER
    return Sandbox.for_policy(policy(**fields), working_dir=str(project.root),
                              backend=backend, environ=project.environ,  # type: ignore[arg-type]  # parametrized literal
                              allow_unconfined=backend == "none")


#: Runs several kinds of run as a child subreaper and prints what each left as its children.
SUBREAPER_SCRIPT = """
    import ctypes, json, os, sys
    from pathlib import Path
    from callgate.policy._schema import ToolPolicy
    from callgate.sandbox import Sandbox

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    backend, work, fields = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    runs = [
        ("exit", {}, ["/bin/true"]),
        ("wall", {"wall_seconds": 1}, ["sleep", "30"]),
        ("output", {"output_kb": 1}, ["yes"]),
        ("background", {"wall_seconds": 3},
         ["sh", "-c", "sleep 30 >/dev/null 2>&1 </dev/null & echo started"]),
        ("limits", {"cpu_seconds": 5, "memory_mb": 512, "processes": 16}, ["/bin/true"]),
    ]
    left = {}
    for name, limits, argv in runs:
        box = Sandbox.for_policy(ToolPolicy.model_validate({**fields, "limits": limits}),
                                 working_dir=work, backend=backend,
                                 environ={"PATH": "/usr/bin:/bin"},
                                 allow_unconfined=backend == "none")
        box.run(argv)
        children = []
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == os.getpid():
                children.append(entry.name)
        left[name] = children
        for pid in children:  # keep the next run's view clean whatever happened
            try:
                os.kill(int(pid), 9)
                os.waitpid(int(pid), 0)
            except OSError:
                pass
    print(json.dumps(left))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_run_leaves_a_child_behind_under_a_process_that_reaps_orphans(
    project: Project, backend: str
):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SUBREAPER_SCRIPT), backend, str(project.root),
         json.dumps(BUILDER)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout.splitlines()[-1])
    assert left == {name: [] for name in left}, left


#: firejail waits for every process of its sandbox: a run with a background child lasts until
#: the child ends or a limit kills it (``test_a_killed_run_leaves_nothing_running``).
ENDING_WITH_THE_TOOL = [backend for backend in BACKENDS if backend != "firejail"]


@pytest.mark.parametrize("backend", ENDING_WITH_THE_TOOL)
def test_background_children_are_gone_when_the_call_returns(project: Project, backend: str):
    marker = f"callgate-lifecycle-{os.getpid()}-{backend}"
    script = f"exec -a {marker} sleep 300 >/dev/null 2>&1 </dev/null & echo started"
    outcome = box_for(project, backend, wall_seconds=60).run(["bash", "-c", script])
    assert outcome.stdout == b"started\n", outcome
    assert outcome.exit_code == 0, outcome
    assert running_with(marker) == []


def test_an_unconfined_tool_returns_when_it_exits_though_a_child_holds_its_output(
    project: Project,
):
    # The child inherits stdout: the run used to wait for it (here: until the wall limit).
    marker = f"callgate-holder-{os.getpid()}"
    script = f"exec -a {marker} sleep 300 & echo started"
    outcome = box_for(project, "none", wall_seconds=60).run(["bash", "-c", script])
    assert outcome.exit_code == 0, outcome
    assert not outcome.confined, outcome
    assert running_with(marker) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_run_leaves_nothing_running(project: Project, backend: str):
    marker = f"callgate-killed-{os.getpid()}-{backend}"
    outcome = box_for(project, backend, wall_seconds=1).run(
        ["bash", "-c", f"(exec -a {marker} sleep 300) & exec -a {marker}-main sleep 300"])
    assert outcome.reason_id == "sandbox.limit.wall", outcome
    assert running_with(marker) == []


@pytest.mark.parametrize("backend", ENDING_WITH_THE_TOOL)
def test_without_pidfds_runs_still_end_whole(
    project: Project, backend: str, monkeypatch: pytest.MonkeyPatch
):
    # Kernels before 5.3 have no pidfd: the launcher's exit is polled instead.
    monkeypatch.setattr(_runner, "pidfd", lambda pid: None)
    monkeypatch.setattr(_gate, "pidfd", lambda pid: None)
    marker = f"callgate-nopidfd-{os.getpid()}-{backend}"
    script = f"exec -a {marker} sleep 300 >/dev/null 2>&1 </dev/null & echo started"
    box = box_for(project, backend, wall_seconds=60)
    outcome = box.run(["bash", "-c", script])
    assert (outcome.exit_code, outcome.stdout) == (0, b"started\n"), outcome
    assert running_with(marker) == []
    killed = box_for(project, backend, wall_seconds=1).run(["sleep", "300"])
    assert killed.reason_id == "sandbox.limit.wall", killed


def zombie_children() -> set[int]:
    """This process's children in state Z (exited, not reaped)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.add(int(entry.name))
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_caller_has_no_zombie_child_after_runs(project: Project, backend: str):
    before = zombie_children()
    for limits in ({}, {"processes": 16, "cpu_seconds": 5}):
        assert box_for(project, backend, **limits).run(["/bin/true"]).exit_code == 0
        # A background child: firejail waits for it, until the wall limit here.
        box_for(project, backend, **limits, wall_seconds=2).run(
            ["sh", "-c", "sleep 30 >/dev/null 2>&1 </dev/null & echo"])
    killed = box_for(project, backend, wall_seconds=1).run(["sh", "-c", "sleep 30 & sleep 30"])
    assert killed.reason_id == "sandbox.limit.wall", killed
    assert zombie_children() - before == set()

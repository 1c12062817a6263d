"""How a bubblewrap run starts: bounded from outside before the tool exists, with few mounts.

The seccomp filter is the gate (``callgate.sandbox._gate``): bwrap waits for it after building
the sandbox, and gets it only once its first process has its limits and cgroup. Without it —
callgate dying, an empty filter, a limit that cannot be set — the tool never starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from callgate import SandboxError
from callgate.policy._schema import Limits
from callgate.sandbox import Sandbox, available_backends
from callgate.sandbox import _bwrap as bwrap
from callgate.sandbox import _gate as gate
from callgate.sandbox import _runner as runner
from callgate.sandbox._limits import pids_cgroup_base
from callgate.sandbox._spec import SandboxSpec

from .conftest import BUILDER, Project, assert_denied, policy, readable_copy_of_the_package

pytestmark = pytest.mark.skipif(
    "bwrap" not in available_backends(), reason="bubblewrap cannot start on this host"
)
ALL_LIMITS = {"cpu_seconds": 7, "memory_mb": 256, "processes": 16, "wall_seconds": 30}
needs_a_process_bound = pytest.mark.skipif(
    os.geteuid() == 0 and pids_cgroup_base() is None,
    reason="root bounds processes with a pids cgroup, and none is writable here",
)


def sandbox(project: Project, **fields: Any) -> Sandbox:
    return Sandbox.for_policy(policy(**{**BUILDER, **fields}), working_dir=str(project.root),
                              backend="bwrap", environ=project.environ)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every process the runner starts."""
    seen: list[list[str]] = []
    real = subprocess.Popen

    def recording(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        seen.append(list(argv))
        return real(argv, **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", recording)
    return seen


def marker(project: Project) -> Path:
    return project.root / "build" / "ran"


@needs_a_process_bound
def test_the_tool_starts_with_its_limits_already_set(project: Project):
    outcome = sandbox(project, limits=ALL_LIMITS).run(
        ["/bin/sh", "-c", "ulimit -c; ulimit -t; ulimit -v"])
    assert outcome.stdout == b"0\n7\n262144\n", outcome


@needs_a_process_bound
def test_no_helper_program_is_started_per_call(project: Project, started: list[list[str]]):
    # Before: a shell to enter the pids cgroup (root) and prlimit inside the sandbox.
    outcome = sandbox(project, limits=ALL_LIMITS).run(["/bin/true"])
    assert outcome.exit_code == 0, outcome
    [argv] = started
    assert os.path.basename(argv[0]) == "bwrap"
    assert argv[argv.index("--") + 1:] == ["/bin/true"]
    assert not any("prlimit" in arg for arg in argv)


@needs_a_process_bound
def test_the_process_limit_counts_exactly_the_tools_processes(project: Project):
    script = "sleep 0.1 & sleep 0.1 & wait; echo done"  # the shell and two children
    denied = sandbox(project, limits={"processes": 2}).run(["/bin/sh", "-c", script])
    assert_denied(denied, "sandbox.limit.processes")
    assert sandbox(project, limits={"processes": 3}).run(
        ["/bin/sh", "-c", script]).stdout == b"done\n"


@pytest.mark.skipif(os.geteuid() != 0 or pids_cgroup_base() is None,
                    reason="needs root and a writable pids cgroup")
def test_the_tool_runs_in_its_runs_pids_cgroup(project: Project):
    outcome = sandbox(project, limits={"processes": 8}).run(
        ["/bin/sh", "-c", "grep pids /proc/self/cgroup"])
    assert "/run-" in outcome.stdout.decode(), outcome


#: Runs as uid 65534: one gated run printing its limits, one fork bomb.
NON_ROOT_SCRIPT = """
    import json, sys
    from callgate.policy._schema import ToolPolicy
    from callgate.sandbox import Sandbox

    tool = ToolPolicy.model_validate(json.loads(sys.argv[1]))
    box = Sandbox.for_policy(tool, working_dir=sys.argv[2], backend="bwrap",
                             environ={"PATH": "/usr/bin:/bin"})
    limits = box.run(["/bin/sh", "-c", "ulimit -c; ulimit -t"])
    bomb = box.run(["/bin/sh", "-c", "f(){ f | f & }; f; wait"])
    print(json.dumps([box.gated, limits.stdout.decode(), bomb.reason_id]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the sandbox as another uid")
def test_a_non_root_caller_bounds_its_sandbox_from_outside_too():
    # prlimit(2) on the sandbox's first process, which runs as the caller: no privilege needed.
    tool = {"filesystem": {"write": ["./build/**"]}, "exec": "allow",
            "limits": {"processes": 6, "cpu_seconds": 5, "wall_seconds": 30}}
    with tempfile.TemporaryDirectory(prefix="callgate-nonroot-") as top:
        os.chmod(top, 0o755)
        work = Path(top) / "work"
        (work / "build").mkdir(parents=True)
        os.chown(work, 65534, 65534)
        os.chown(work / "build", 65534, 65534)
        done = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
             sys.executable, "-c", textwrap.dedent(NON_ROOT_SCRIPT), json.dumps(tool),
             str(work)],
            capture_output=True, text=True, timeout=120, check=False,
            env={"PYTHONPATH": readable_copy_of_the_package(Path(top)), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [True, "0\n5\n",
                                                         "sandbox.limit.processes"]


def test_a_sandbox_that_never_gets_its_filter_runs_nothing(project: Project):
    # What happens when callgate dies between starting bwrap and handing over the filter: the
    # filter pipe closes empty, the kernel refuses an empty filter, bwrap exits.
    box = sandbox(project)
    argv = ["/bin/sh", "-c", f"touch {marker(project)}"]
    spec = box._spec(argv)
    hand_over = gate.BwrapGate(network=False, rlimits=(), cgroup=None)
    wrapped = box._wrap(spec, argv, status_fd=hand_over.status_fd, procs=None,
                        seccomp_fd=hand_over.filter_fd, prefix=())
    proc = subprocess.Popen(wrapped, pass_fds=hand_over.pass_fds, env={},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        hand_over._close("status_w")  # as start() does: bwrap holds its own ends
        hand_over._close("filter_r")
        assert hand_over._child_pid() is not None  # bwrap reported its sandbox process …
        hand_over._close("filter_w")  # … and the filter never comes
        _, stderr = proc.communicate(timeout=30)
    finally:
        hand_over.close()
    assert proc.returncode != 0
    assert b"seccomp" in stderr.lower() or b"prctl" in stderr.lower(), stderr
    assert not marker(project).exists()


def test_an_empty_filter_is_a_sandbox_that_could_not_start(
    project: Project, monkeypatch: pytest.MonkeyPatch
):
    box = sandbox(project)
    monkeypatch.setattr(gate.seccomp, "sandbox_filter", lambda **_: b"")
    with pytest.raises(SandboxError, match="could not start"):
        box.run(["/bin/sh", "-c", f"touch {marker(project)}"])
    assert not marker(project).exists()


def test_a_limit_that_cannot_be_set_stops_the_run_before_the_tool(
    project: Project, monkeypatch: pytest.MonkeyPatch
):
    def refuse(pid: int, rlimits: Any) -> None:
        raise SandboxError(f"cannot set resource limits on {pid}")

    monkeypatch.setattr(gate, "apply_rlimits", refuse)
    with pytest.raises(SandboxError, match="cannot set resource limits"):
        sandbox(project, limits={"cpu_seconds": 5}).run(
            ["/bin/sh", "-c", f"touch {marker(project)}"])
    assert not marker(project).exists()


def test_a_reported_process_that_is_not_bwraps_child_is_refused(
    project: Project, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(gate, "_parent_and_start", lambda pid: (1, 100))  # init's child
    with pytest.raises(SandboxError, match="not its child"):
        sandbox(project).run(["/bin/sh", "-c", f"touch {marker(project)}"])
    assert not marker(project).exists()


def test_small_runtime_files_are_copied_onto_the_read_only_root(
    project: Project, started: list[list[str]]
):
    box = sandbox(project)
    outcome = box.run(["cat", "/etc/ld.so.conf"])
    assert outcome.stdout == Path("/etc/ld.so.conf").read_bytes(), outcome
    argv = started[-1]
    assert any(argv[i] == "--file" and argv[i + 2] == "/etc/ld.so.cache"
               for i in range(len(argv) - 2))
    assert _binds(argv, "/etc/ld.so.cache") == 0
    written = box.run(["/bin/sh", "-c", "echo x >> /etc/ld.so.conf"])
    assert_denied(written, "sandbox.write")
    assert b"ld.so.cache" in box.run(["ls", "/etc"]).stdout


def _binds(argv: list[str], source: str) -> int:
    return sum(1 for i in range(len(argv) - 2)
               if argv[i] in ("--ro-bind", "--bind") and argv[i + 1] == source)


def test_a_root_that_another_root_shows_is_bound_once(project: Project):
    box = sandbox(project, filesystem={"read": ["./src/**", "/usr/**", "/etc/**"]})
    argv = box.command(["/bin/true"])
    assert _binds(argv, "/usr") == 1
    assert _binds(argv, "/etc") == 1
    assert _binds(argv, "/etc/ld.so.cache") == 0
    assert _binds(argv, "/etc/alternatives") == 0
    assert box.run(["cat", "/etc/ld.so.conf"]).stdout == Path("/etc/ld.so.conf").read_bytes()


def test_a_runtime_file_inside_a_write_root_is_bound_never_copied(tmp_path: Path):
    # A copy is written where the file is: inside a write root that would be the host's file.
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "f").write_text("data\n")
    spec = SandboxSpec(
        read_roots=(), write_roots=(str(tmp_path / "w"),),
        runtime_roots=(str(tmp_path / "w" / "f"),), masked=(), hidden_shells=(), env={},
        withheld_env=frozenset(), network=False, working_dir=str(tmp_path), scratch=False,
        limits=Limits(),
    )
    assert bwrap.open_copies(spec) == {}
    argv = bwrap.bwrap_argv(spec, ["/bin/true"], seccomp_fd=3)
    assert _binds(argv, str(tmp_path / "w" / "f")) == 1
    assert "--file" not in argv

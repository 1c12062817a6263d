"""How a bubblewrap run starts: bounded from outside before the tool exists, with few mounts.

The seccomp filter is the gate (``callgate.sandbox._gate``): bwrap waits for it after building
the sandbox, and gets it only once its first process has its limits and cgroup. Without it —
callgate dying, an empty filter, a limit that cannot be set — the tool never starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import callgate.sandbox as sandbox_package
from callgate import SandboxError
from callgate.policy._schema import Limits
from callgate.sandbox import Sandbox, available_backends
from callgate.sandbox import _bwrap as bwrap
from callgate.sandbox import _gate as gate
from callgate.sandbox import _runner as runner
from callgate.sandbox._limits import (
    CGROUP_V1_PIDS,
    PidsCgroup,
    pids_cgroup_base,
    threads_can_enter,
)
from callgate.sandbox._spec import SandboxSpec

from .conftest import (
    BUILDER,
    Project,
    assert_denied,
    policy,
    readable_copy_of_the_package,
    running_with,
)

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
@pytest.mark.parametrize("born_inside", [True, False], ids=["born-inside", "moved-in"])
def test_the_process_limit_counts_exactly_the_tools_processes(
    project: Project, monkeypatch: pytest.MonkeyPatch, born_inside: bool
):
    # Both ways into the cgroup: the launcher started from inside it (cgroup v1), or the
    # sandbox's init moved in from outside (cgroup v2, or no thread entry).
    if born_inside and not CAN_START_INSIDE:
        pytest.skip("no cgroup v1 pids hierarchy whose tasks files this process may write")
    if not born_inside:
        monkeypatch.setattr(sandbox_package, "threads_can_enter", lambda base: False)
    script = "sleep 0.1 & sleep 0.1 & wait; echo done"  # the shell and two children
    too_few = sandbox(project, limits={"processes": 2})
    assert too_few.born_inside is born_inside
    assert_denied(too_few.run(["/bin/sh", "-c", script]), "sandbox.limit.processes")
    assert sandbox(project, limits={"processes": 3}).run(
        ["/bin/sh", "-c", script]).stdout == b"done\n"


_BASE = pids_cgroup_base()
CAN_START_INSIDE = _BASE is not None and threads_can_enter(_BASE)
needs_thread_entry = pytest.mark.skipif(
    not CAN_START_INSIDE, reason="needs a cgroup v1 pids hierarchy this process may write")


def own_pids_cgroup() -> str:
    """The pids line of the calling thread's ``/proc/thread-self/cgroup``."""
    lines = Path("/proc/thread-self/cgroup").read_text().splitlines()
    return next(line for line in lines if "pids" in line.split(":")[1].split(","))


def pids_cgroup_of(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next(line for line in lines if "pids" in line.split(":")[1].split(","))


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def in_a_thread(call: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


@needs_thread_entry
def test_bwrap_is_born_in_the_runs_pids_cgroup_and_no_process_is_moved(
    project: Project, monkeypatch: pytest.MonkeyPatch
):
    # Moving a process into a cgroup waits for an RCU grace period (5-15 ms); the launcher is
    # started by a thread standing inside, so bwrap, its init and the tool are born there.
    moved: list[int] = []
    monkeypatch.setattr(PidsCgroup, "add", lambda group, pid: moved.append(pid))
    box = sandbox(project, limits={"processes": 8, "wall_seconds": 60})
    tag = f"callgate-test-{os.getpid()}-{threading.get_ident()}"
    waiting = f"while [ ! -e build/go ]; do sleep 0.01; done # {tag}"
    outcomes: list[Any] = []
    thread = in_a_thread(lambda: outcomes.append(box.run(["/bin/sh", "-c", waiting])))
    try:
        # The tool itself, not bwrap (whose argv holds the tag too): it runs only once the
        # sandbox was let go, so after the starting thread left the group.
        while not (tools := [pid for pid in running_with(tag) if comm(pid) == "sh"]) \
                and thread.is_alive():
            thread.join(0.01)
        assert tools, outcomes
        group = pids_cgroup_of(tools[0]).split(":", 2)[2]
        assert "/run-" in group
        procs = (Path(CGROUP_V1_PIDS + group) / "cgroup.procs").read_text().split()
        launchers = [pid for pid in map(int, procs) if gate.parent_of(pid) == os.getpid()]
        assert len(launchers) == 1  # bwrap itself, this process's child, is counted there
        assert comm(launchers[0]) == "bwrap"
        assert str(os.getpid()) not in procs  # the thread that started it has left
    finally:
        marker(project).with_name("go").touch()
        thread.join(60)
    [outcome] = outcomes
    assert outcome.exit_code == 0 and not outcome.confined, outcome
    assert moved == []


@needs_thread_entry
def test_the_starting_thread_is_back_in_its_own_cgroup_after_every_kind_of_run(
    project: Project, monkeypatch: pytest.MonkeyPatch
):
    box = sandbox(project, limits={"processes": 8})
    before = own_pids_cgroup()
    assert box.run(["/bin/true"]).exit_code == 0
    assert own_pids_cgroup() == before
    monkeypatch.setattr(gate, "_parent_and_start", lambda pid: (1, 100))  # refused in start
    with pytest.raises(SandboxError, match="not its child"):
        box.run(["/bin/true"])
    assert own_pids_cgroup() == before
    monkeypatch.undo()

    def unstartable(*args: Any, **kwargs: Any) -> None:
        raise OSError("no such launcher")

    monkeypatch.setattr(runner.subprocess, "Popen", unstartable)  # fails before start
    with pytest.raises(SandboxError, match="no such launcher"):
        box.run(["/bin/true"])
    assert own_pids_cgroup() == before
    assert not [p for p in Path(_BASE or "/").glob("run-*")
                if str(os.getpid()) in (p / "cgroup.procs").read_text().split()]


@needs_thread_entry
def test_runs_started_from_other_threads_count_only_their_own_tools(project: Project):
    box = sandbox(project, limits={"processes": 3})
    script = "sleep 0.1 & sleep 0.1 & wait; echo done"  # exactly the three allowed
    outcomes: list[Any] = []
    threads = [in_a_thread(lambda: outcomes.append(box.run(["/bin/sh", "-c", script])))
               for _ in range(3)]
    for thread in threads:
        thread.join(60)
    assert [o.stdout for o in outcomes] == [b"done\n"] * 3, outcomes


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


# -- whether bwrap can start: probed once, ahead of the decision when asked to -------------------


@pytest.fixture()
def fresh_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "_answers", {})
    monkeypatch.setattr(bwrap, "_started", {})


def fake_bwrap(tmp_path: Path, body: str) -> tuple[str, Path]:
    """A program standing in for bwrap: it notes each start (its pid) in a log, then ``body``."""
    log = tmp_path / "starts.log"
    program = tmp_path / "bwrap"
    program.write_text(f"#!/bin/sh\necho $$ >> {log}\n{body}\n")
    program.chmod(0o755)
    return str(program), log


def starts(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


@pytest.mark.usefixtures("fresh_probes")
@pytest.mark.parametrize("ahead", [False, True])
def test_a_bwrap_that_cannot_start_is_refused_with_its_own_words(tmp_path: Path, ahead: bool):
    program, log = fake_bwrap(tmp_path, 'echo "No permissions to create a new namespace" >&2\n'
                                        "exit 1")
    if ahead:
        bwrap.probe_ahead(program)
        bwrap.probe_ahead(program)  # one probe, however often started
    answer = "bwrap cannot start: No permissions to create a new namespace"
    assert bwrap.bwrap_usable(program) == answer
    assert bwrap.bwrap_usable(program) == answer  # asked once per process
    assert len(starts(log)) == 1


@pytest.mark.usefixtures("fresh_probes")
def test_a_probe_started_ahead_is_the_one_waited_for(tmp_path: Path):
    program, log = fake_bwrap(tmp_path, "exit 0")
    bwrap.probe_ahead(program)
    assert bwrap.bwrap_usable(program) is None
    bwrap.probe_ahead(program)  # known now: nothing starts
    assert len(starts(log)) == 1


@pytest.mark.usefixtures("fresh_probes")
def test_a_probe_that_hangs_is_killed_and_refused(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(bwrap, "PROBE_TIMEOUT_S", 0.5)
    program, log = fake_bwrap(tmp_path, "exec sleep 30")
    answer = bwrap.bwrap_usable(program)
    assert answer is not None and answer.startswith("bwrap cannot start:")
    assert "timed out" in answer
    (pid,) = starts(log)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


@pytest.mark.usefixtures("fresh_probes")
def test_a_missing_program_is_refused_not_raised(tmp_path: Path):
    missing = str(tmp_path / "no-such-bwrap")
    bwrap.probe_ahead(missing)
    answer = bwrap.bwrap_usable(missing)
    assert answer is not None and answer.startswith("bwrap cannot start:")


def exit_once_probed(program: str, log: Path) -> None:
    """A process that starts a probe of ``program`` ahead (timeout 0.5 s), never asks about it,
    and exits once the stand-in has started: it must exit, and cleanly."""
    script = textwrap.dedent(f"""
        import os, time
        from callgate.sandbox import _bwrap
        _bwrap.PROBE_TIMEOUT_S = 0.5
        _bwrap.probe_ahead({program!r})
        while not os.path.exists({str(log)!r}) or not open({str(log)!r}).read():
            time.sleep(0.01)  # until the stand-in has started
    """)
    done = subprocess.run([sys.executable, "-c", script], timeout=20, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_probe_never_asked_about_that_hangs_is_killed_when_the_process_exits(
        tmp_path: Path):
    program, log = fake_bwrap(tmp_path, "exec sleep 30")
    exit_once_probed(program, log)
    (pid,) = starts(log)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# A bwrap killed while it sets its sandbox up can leave the sandbox's first process alive and
# holding the probe's pipes: the stand-in starts such a holder, then hangs.
HOLDER = "sleep 30 &\nexec sleep 30"


@pytest.mark.usefixtures("fresh_probes")
def test_a_hung_probe_whose_sandbox_holds_its_pipes_is_refused_without_waiting_on_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(bwrap, "PROBE_TIMEOUT_S", 0.5)
    program, _ = fake_bwrap(tmp_path, HOLDER)
    started = time.monotonic()
    answer = bwrap.bwrap_usable(program)
    assert answer is not None and "timed out" in answer
    assert time.monotonic() - started < 10


def test_a_process_whose_unasked_probe_holds_its_pipes_still_exits(tmp_path: Path):
    program, log = fake_bwrap(tmp_path, HOLDER)
    exit_once_probed(program, log)


@pytest.mark.usefixtures("fresh_probes")
def test_a_subprocess_run_starts_its_backends_probe_before_the_kernel_decides(project: Project):
    from callgate import Denied, Kernel
    from callgate.policy._schema import Policy

    real = shutil.which("bwrap")
    assert real is not None
    refusing = Policy.model_validate({
        "name": "t", "version": 1,
        "principal": {"name": "a", "capabilities": [{"tool_class": "shell", "actions": ["exec"]}]},
        "rules": [{"id": "no", "match": {"tool": ["builder"]}, "decision": "deny",
                   "reason": "not today"}],
        "tools": {"builder": BUILDER}})
    with Kernel(refusing, working_dir=str(project.root)) as kernel, pytest.raises(Denied):
        kernel.run_subprocess("builder", ["/bin/true"])
    assert list(bwrap._started) == [os.path.abspath(real)]  # started, and never asked
    assert bwrap.bwrap_usable(os.path.abspath(real)) is None
    assert bwrap._started == {}

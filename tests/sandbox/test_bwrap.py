"""The bubblewrap backend, for real: every protection stops something and reports a denial."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from callgate import SandboxError
from callgate.sandbox import Sandbox, SandboxOutcome, available_backends
from callgate.sandbox import _bwrap as bwrap
from callgate.sandbox import _seccomp as seccomp
from callgate.sandbox._limits import plan_limits

from .conftest import BUILDER, SYSTEM_PATH, Project, Server, assert_denied, connect_code, policy

pytestmark = pytest.mark.skipif(
    "bwrap" not in available_backends(), reason="bubblewrap cannot start on this host"
)

def sandbox(project: Project, **fields: Any) -> Sandbox:
    merged = {**BUILDER, **fields}
    return Sandbox.for_policy(
        policy(**merged), working_dir=str(project.root), backend="bwrap", environ=project.environ
    )


def sh(box: Sandbox, script: str) -> SandboxOutcome:
    return box.run(["/bin/sh", "-c", script])


def py(box: Sandbox, code: str) -> SandboxOutcome:
    return box.run(["python3", "-c", code])


def test_legitimate_build_runs_untouched_and_writes_into_the_build_root(project: Project):
    box = sandbox(
        project,
        limits={"cpu_seconds": 5, "memory_mb": 512, "processes": 32, "output_kb": 256,
                "wall_seconds": 20},
    )
    outcome = sh(
        box,
        "mkdir -p build/obj && cp src/main.txt build/obj/main.o && "
        "tr a-z A-Z < src/main.txt > build/out.txt && cat build/out.txt",
    )
    assert not outcome.confined, outcome
    assert outcome.exit_code == 0
    assert outcome.stdout == b"HELLO FROM THE SOURCES\n"
    assert (project.root / "build" / "out.txt").read_text() == "HELLO FROM THE SOURCES\n"
    assert (project.root / "build" / "obj" / "main.o").exists()


def test_write_outside_the_write_roots_is_a_denial_and_never_lands(project: Project):
    outcome = sh(sandbox(project), "echo changed > src/main.txt")
    assert_denied(outcome, "sandbox.write")
    assert "EROFS" in (outcome.reason or "")
    assert (project.root / "src" / "main.txt").read_text() == "hello from the sources\n"


def test_write_into_tmp_is_a_denial_because_tmp_is_read_only(project: Project, tmp_path: Path):
    probe = f"/tmp/callgate-probe-{os.getpid()}-{time.monotonic_ns()}"
    outcome = sh(sandbox(project), f"echo x > {probe}")
    assert_denied(outcome, "sandbox.write")
    assert probe in (outcome.reason or "")
    assert not os.path.exists(probe)


def test_scratch_gives_a_private_writable_tmp_that_the_host_never_sees(project: Project):
    probe = f"/tmp/callgate-scratch-{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="callgate-host-") as host_file:
        script = f"echo x > {probe} && cat {probe} && ls /tmp"
        outcome = sh(sandbox(project, scratch=True), script)
        listing = outcome.stdout.decode().split()
        assert os.path.basename(host_file.name) not in listing
    assert not outcome.confined, outcome
    assert listing[0] == "x"
    assert os.path.basename(probe) in listing
    assert not os.path.exists(probe)


def test_write_root_glob_is_not_widened_to_its_parent(project: Project):
    outcome = sh(sandbox(project), "echo x > ./sibling.txt")
    assert_denied(outcome, "sandbox.write")
    assert not (project.root / "sibling.txt").exists()


def test_single_file_write_root_is_writable_and_nothing_beside_it(project: Project):
    (project.root / "report.txt").write_text("old\n")
    box = sandbox(project, filesystem={"read": ["./src/**"], "write": ["./report.txt"]})
    assert not sh(box, "echo new > report.txt").confined
    assert (project.root / "report.txt").read_text() == "new\n"
    assert_denied(sh(box, "echo x > other.txt"), "sandbox.write")
    assert not (project.root / "other.txt").exists()


def test_undeclared_directory_is_invisible_and_reading_it_is_a_denial(project: Project):
    outcome = sh(sandbox(project), f"cat {project.secret_dir}/data.txt")
    assert_denied(outcome, "sandbox.read")
    assert b"not for the tool" not in outcome.stdout
    assert str(project.secret_dir) in (outcome.reason or "")


def test_reading_a_missing_file_is_not_a_denial(project: Project):
    outcome = sh(sandbox(project), "cat src/does-not-exist")
    assert outcome.exit_code == 1
    assert not outcome.confined


def test_ssh_key_under_a_declared_home_is_hidden_and_reading_it_is_a_denial(project: Project):
    box = sandbox(project, filesystem={"read": [f"{project.home}/**"], "write": []})
    assert sh(box, "cat $HOME/notes.txt").stdout == b"ordinary notes\n"
    outcome = sh(box, "cat $HOME/.ssh/id_rsa")
    assert_denied(outcome, "sandbox.read")
    assert b"PRIVATE KEY" not in outcome.stdout
    assert "EACCES" in (outcome.reason or "")


def test_ssh_key_declared_by_name_is_readable(project: Project):
    read = [f"{project.home}/**", f"{project.home}/.ssh/id_rsa"]
    outcome = sh(sandbox(project, filesystem={"read": read}), "cat $HOME/.ssh/id_rsa")
    assert not outcome.confined, outcome
    assert b"FAKE PRIVATE KEY" in outcome.stdout


def test_declaring_one_ssh_file_by_name_leaves_the_rest_of_ssh_hidden(project: Project):
    (project.home / ".ssh" / "known_hosts").write_text("example.org ssh-ed25519 AAAA\n")
    read = [f"{project.home}/**", f"{project.home}/.ssh/known_hosts"]
    box = sandbox(project, filesystem={"read": read})
    assert sh(box, "cat $HOME/.ssh/known_hosts").stdout.startswith(b"example.org")
    outcome = sh(box, "cat $HOME/.ssh/id_rsa")
    assert_denied(outcome, "sandbox.read")
    assert b"PRIVATE KEY" not in outcome.stdout


def test_dotenv_file_in_a_declared_tree_is_hidden(project: Project):
    box = sandbox(project, filesystem={"read": ["./**"], "write": []})
    outcome = sh(box, "cat .env")
    assert_denied(outcome, "sandbox.read")
    assert b"hunter2" not in outcome.stdout


def test_network_denied_stops_a_connection_to_a_local_server(project: Project, server: Server):
    code = connect_code(server.port)
    outcome = py(sandbox(project, network="deny"), code)
    assert_denied(outcome, "sandbox.network")
    assert server.hits == []


def test_network_allowed_reaches_the_same_local_server(project: Project, server: Server):
    code = connect_code(server.port)
    outcome = py(sandbox(project, network="allow"), code)
    assert not outcome.confined, outcome
    assert outcome.stdout == b"pong\n"
    assert server.hits == [1]


def test_undeclared_environment_variable_is_withheld_and_reading_it_is_a_denial(
    project: Project,
):
    box = sandbox(project)
    listing = box.run(["/usr/bin/env"])
    # bwrap sets PWD to the declared working directory; nothing else is added.
    assert sorted(listing.stdout.decode().split()) == sorted(
        [f"HOME={project.home}", f"PATH={SYSTEM_PATH}", f"PWD={project.root.resolve()}"]
    )
    assert b"s3cret" not in listing.stdout
    outcome = py(box, "import os; print(os.environ['SECRET_TOKEN'])")
    assert_denied(outcome, "sandbox.environment")
    assert "SECRET_TOKEN" in (outcome.reason or "")


def test_declared_environment_variable_is_passed(project: Project):
    box = sandbox(project, environment={"allow": ["SECRET_TOKEN"]})
    outcome = py(box, "import os; print(os.environ['SECRET_TOKEN'])")
    assert outcome.stdout == b"s3cret-token-value\n"
    assert not outcome.confined


def test_fork_bomb_is_bounded_by_the_process_limit(project: Project):
    box = sandbox(project, limits={"processes": 8, "wall_seconds": 10})
    started = time.monotonic()
    outcome = sh(box, "f(){ f | f & }; f; wait")
    assert_denied(outcome, "sandbox.limit.processes")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(("processes", "allowed"), [(2, False), (3, True)])
def test_process_limit_counts_exactly_the_tools_processes(
    project: Project, processes: int, allowed: bool
):
    # A shell with two children is three processes; the launcher is not counted.
    box = sandbox(project, limits={"processes": processes, "wall_seconds": 10})
    outcome = sh(box, "sleep 0.1 & sleep 0.1 & wait; echo done")
    assert outcome.confined is not allowed, outcome
    assert (outcome.stdout == b"done\n") is allowed


def test_cpu_spinner_is_stopped_by_the_cpu_limit(project: Project):
    box = sandbox(project, limits={"cpu_seconds": 1, "wall_seconds": 10})
    outcome = py(box, "while True: pass")
    assert_denied(outcome, "sandbox.limit.cpu")
    assert outcome.duration_ms < 8000


def test_memory_hog_is_stopped_by_the_memory_limit(project: Project):
    box = sandbox(project, limits={"memory_mb": 128, "wall_seconds": 10})
    outcome = py(box, "x = bytearray(512 * 1024 * 1024); print('allocated')")
    assert_denied(outcome, "sandbox.limit.memory")
    assert b"allocated" not in outcome.stdout


def test_output_flood_is_cut_at_the_output_limit(project: Project):
    box = sandbox(project, limits={"output_kb": 16, "wall_seconds": 10})
    outcome = box.run(["yes"])
    assert_denied(outcome, "sandbox.limit.output")
    assert outcome.exit_code is None
    assert 0 < len(outcome.stdout) <= 16 * 1024


def test_wall_limit_kills_the_whole_process_tree(project: Project):
    box = sandbox(project, limits={"wall_seconds": 1})
    outcome = sh(box, "(sleep 2; touch build/late) & sleep 30")
    assert_denied(outcome, "sandbox.limit.wall")
    assert outcome.duration_ms < 5000
    time.sleep(2.5)
    assert not (project.root / "build" / "late").exists()


def test_tool_runs_in_its_own_namespaces_as_an_unprivileged_uid(project: Project):
    names = ("pid", "net", "ipc", "uts", "mnt", "user")
    script = "; ".join(f"readlink /proc/self/ns/{name}" for name in names)
    script += "; id -u; hostname; grep CapEff /proc/self/status"
    outcome = sh(sandbox(project), script)
    lines = outcome.stdout.decode().split("\n")
    for name, inside in zip(names, lines, strict=False):
        assert inside != os.readlink(f"/proc/self/ns/{name}"), name
    assert lines[len(names)] == "65534"
    assert lines[len(names) + 1] == "callgate-sandbox"
    assert lines[len(names) + 2].split() == ["CapEff:", "0000000000000000"]


def test_tool_runs_in_a_session_of_its_own_sandbox(project: Project):
    # Without --new-session the session leader is outside the pid namespace (getsid gives 0).
    outcome = py(sandbox(project), "import os; print(os.getsid(0))")
    assert outcome.stdout == b"1\n"


def test_declared_working_directory_is_used(project: Project):
    (project.root / "src" / "pkg").mkdir()
    outcome = sh(sandbox(project, working_dir="src/pkg"), "pwd")
    assert outcome.stdout.decode().strip() == str((project.root / "src" / "pkg").resolve())


def test_stdin_reaches_the_tool(project: Project):
    outcome = sandbox(project).run(["/bin/cat"], stdin=b"piped input")
    assert outcome.stdout == b"piped input"


def test_sandbox_that_cannot_start_raises_and_runs_nothing(project: Project):
    # A working directory that is a visible file: bwrap cannot chdir into it.
    (project.root / "not-a-dir").write_text("")
    box = sandbox(project, working_dir="not-a-dir", filesystem={"read": ["./**"]})
    with pytest.raises(SandboxError, match="could not start"):
        sh(box, f"touch {project.root}/ran")
    assert not (project.root / "ran").exists()


def test_command_shows_the_wrapped_argv(project: Project):
    argv = sandbox(project).command(["make", "all"])
    assert "--unshare-net" in argv
    assert argv[-2:] == ["make", "all"]
    assert ["--bind", str(project.root / "build"), str(project.root / "build")] == argv[
        argv.index("--bind") : argv.index("--bind") + 3
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start the sandbox as another uid")
def test_non_root_caller_bounds_processes_with_rlimit_nproc():
    # What a non-root deployment gets: no cgroup, RLIMIT_NPROC inside the user namespace.
    # pytest's tmp_path is private to root, so the unprivileged caller gets its own directory.
    with tempfile.TemporaryDirectory(prefix="callgate-nonroot-") as top:
        os.chmod(top, 0o755)
        check_non_root_caller(Path(top) / "work")


def check_non_root_caller(work: Path) -> None:
    (work / "build").mkdir(parents=True)
    os.chown(work, 65534, 65534)
    os.chown(work / "build", 65534, 65534)
    tool = policy(filesystem={"write": ["./build/**"]}, limits={"processes": 6})
    box = Sandbox(
        tool,
        working_dir=str(work),
        backend="bwrap",
        executable=Sandbox.for_policy(tool, working_dir=str(work), backend="bwrap").executable,
        environ={},
        plan=plan_limits(tool.limits, euid=65534, cgroup_base=None, launcher_tasks=2),
    )
    as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    # The covers this (root) process made must be reachable, as a non-root caller's own are.
    os.chmod(os.path.dirname(bwrap.mask_sources()[0]), 0o755)
    fd = seccomp.filter_fd(seccomp.socket_filter())
    try:
        bomb = box.command(["/bin/sh", "-c", "echo x > build/ok; f(){ f | f & }; f; wait"],
                           seccomp_fd=fd)
        done = subprocess.run([*as_nobody, *bomb], capture_output=True, timeout=30, env={},
                              check=False, pass_fds=(fd,))
        assert b"Cannot fork" in done.stderr
        assert (work / "build" / "ok").read_text() == "x\n"
        fine = box.command(
            ["/bin/sh", "-c", "for i in 1 2 3; do sleep 0.2 & done; wait; echo ok"],
            seccomp_fd=fd)
        os.lseek(fd, 0, os.SEEK_SET)
        done = subprocess.run([*as_nobody, *fine], capture_output=True, timeout=30, env={},
                              check=False, pass_fds=(fd,))
        assert done.stdout == b"ok\n"
    finally:
        os.close(fd)

"""The firejail backend, forced, for real: the same protections hold where bwrap cannot start."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from callgate import SandboxError
from callgate.sandbox import Sandbox, SandboxOutcome, available_backends

from .conftest import BUILDER, Project, Server, assert_denied, connect_code, policy

pytestmark = pytest.mark.skipif(
    "firejail" not in available_backends(), reason="firejail cannot start on this host"
)


def sandbox(project: Project, **fields: Any) -> Sandbox:
    merged = {**BUILDER, **fields}
    return Sandbox.for_policy(
        policy(**merged),
        working_dir=str(project.root),
        backend="firejail",
        environ=project.environ,
    )


def sh(box: Sandbox, script: str) -> SandboxOutcome:
    return box.run(["/bin/sh", "-c", script])


def test_forced_firejail_backend_is_used(project: Project):
    box = sandbox(project)
    assert box.backend == "firejail"
    assert os.path.basename(box.command(["true"])[0]) == "firejail"


def test_legitimate_build_passes_under_firejail(project: Project):
    box = sandbox(project, limits={"cpu_seconds": 5, "processes": 32, "wall_seconds": 20})
    outcome = sh(box, "mkdir -p build/obj && tr a-z A-Z < src/main.txt > build/obj/out.txt")
    assert not outcome.confined, outcome
    assert outcome.exit_code == 0
    assert (project.root / "build" / "obj" / "out.txt").read_text() == "HELLO FROM THE SOURCES\n"


def test_write_outside_roots_and_into_tmp_are_denials_under_firejail(project: Project):
    box = sandbox(project)
    assert_denied(sh(box, "echo changed > src/main.txt"), "sandbox.write")
    assert (project.root / "src" / "main.txt").read_text() == "hello from the sources\n"
    probe = f"/tmp/callgate-fj-{os.getpid()}-{time.monotonic_ns()}"
    assert_denied(sh(box, f"echo x > {probe}"), "sandbox.write")
    assert not os.path.exists(probe)


def test_undeclared_directory_is_hidden_under_firejail(project: Project):
    outcome = sh(sandbox(project), f"cat {project.secret_dir}/data.txt")
    assert_denied(outcome, "sandbox.read")
    assert b"not for the tool" not in outcome.stdout


def test_ssh_directory_under_a_declared_home_is_hidden_under_firejail(project: Project):
    box = sandbox(project, filesystem={"read": [f"{project.home}/**"]})
    assert sh(box, "cat $HOME/notes.txt").stdout == b"ordinary notes\n"
    outcome = sh(box, "cat $HOME/.ssh/id_rsa")
    assert_denied(outcome, "sandbox.read")
    assert b"PRIVATE KEY" not in outcome.stdout


def test_network_is_denied_and_allowed_under_firejail(project: Project, server: Server):
    code = connect_code(server.port)
    denied = sandbox(project, network="deny").run(["python3", "-c", code])
    assert_denied(denied, "sandbox.network")
    assert server.hits == []
    allowed = sandbox(project, network="allow").run(["python3", "-c", code])
    assert not allowed.confined, allowed
    assert allowed.stdout == b"pong\n"


def test_environment_is_cleared_under_firejail(project: Project):
    box = sandbox(project)
    assert b"s3cret" not in box.run(["/usr/bin/env"]).stdout
    outcome = box.run(["python3", "-c", "import os; os.environ['SECRET_TOKEN']"])
    assert_denied(outcome, "sandbox.environment")


def test_limits_hold_under_firejail(project: Project):
    spinner = sandbox(project, limits={"cpu_seconds": 1, "wall_seconds": 10})
    assert_denied(spinner.run(["python3", "-c", "while True: pass"]), "sandbox.limit.cpu")
    bomb = sandbox(project, limits={"processes": 8, "wall_seconds": 10})
    assert_denied(sh(bomb, "f(){ f | f & }; f; wait"), "sandbox.limit.processes")


def test_wall_limit_kills_the_tree_under_firejail(project: Project):
    box = sandbox(project, limits={"wall_seconds": 1})
    outcome = sh(box, "(sleep 2; touch build/late) & sleep 30")
    assert_denied(outcome, "sandbox.limit.wall")
    time.sleep(2.5)
    assert not (project.root / "build" / "late").exists()


def test_scratch_that_would_hide_declared_roots_under_tmp_is_refused(project: Project):
    # firejail's private /tmp would cover a project that lives under /tmp.
    if not str(project.root.resolve()).startswith("/tmp/"):
        pytest.skip("pytest's temporary directory is not under /tmp on this host")
    box = sandbox(project, scratch=True)
    with pytest.raises(SandboxError, match="private /tmp"):
        box.run(["/bin/true"])


def test_process_limit_counts_exactly_the_tools_processes_under_firejail(project: Project):
    script = "sleep 0.1 & sleep 0.1 & wait; echo done"
    assert_denied(sh(sandbox(project, limits={"processes": 2}), script), "sandbox.limit.processes")
    assert sh(sandbox(project, limits={"processes": 3}), script).stdout == b"done\n"


#: Names a firejail profile line would not take literally: a glob class (matching the decoy
#: beside it instead), a comment mark, trailing blanks, a character firejail rejects.
ODD_NAMES = ("[u]", "u#x", "u ", "u\t", "u,", "u{x}")


@pytest.mark.parametrize("odd", ODD_NAMES)
def test_credentials_and_undeclared_paths_with_odd_names_stay_hidden_under_firejail(
    project: Project, odd: str
):
    (project.root / "src" / ".env.u").write_text("decoy\n")
    (project.root / "src" / f".env.{odd}").write_text("DB_PASSWORD=odd-credential\n")
    outside = project.root.parent / f"undeclared-{odd}"
    outside.mkdir()
    (outside / "data.txt").write_text("odd undeclared place\n")
    (project.root.parent / "undeclared-u").mkdir()
    box = sandbox(project)
    script = f'cat "src/.env.{odd}"; cat "{outside}/data.txt"; echo ran'
    outcome = box.run(["/bin/sh", "-c", script])
    assert outcome.stdout == b"ran\n", outcome


def test_write_root_with_a_blank_is_writable_and_never_widened_under_firejail(project: Project):
    box = sandbox(project, filesystem={"read": ["./src/**"], "write": ["./out  dir/**"]})
    assert sh(box, 'echo made > "out  dir/f"').exit_code == 0
    assert (project.root / "out  dir" / "f").read_text() == "made\n"
    (project.root / "out__dir").mkdir()  # what a glob for the blanks would also match
    with pytest.raises(SandboxError, match="also making"):
        sh(box, 'echo made > "out  dir/f"')

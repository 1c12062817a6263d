"""The denial signals: which exit statuses and stderr lines count as the sandbox stopping a call."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.sandbox._classify import classify
from callgate.sandbox._spec import SandboxSpec, build_spec

from .conftest import policy


def make_spec(tmp_path: Path, **fields: object) -> SandboxSpec:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "hidden").mkdir(exist_ok=True)
    (tmp_path / "hidden" / "data.txt").write_text("x")
    fields.setdefault("filesystem", {"read": ["./src/**"], "write": ["./build/**"]})
    return build_spec(
        policy(**fields), working_dir=str(tmp_path), environ={"PATH": "/bin", "TOKEN": "t"}
    )


def reason(spec: SandboxSpec, stderr: str, exit_code: int | None = 1, **kw: object):
    found = classify(
        exit_code=exit_code,
        stderr=stderr.encode(),
        killed_for=kw.get("killed_for"),  # type: ignore[arg-type]
        pids_limit_hit=bool(kw.get("pids_limit_hit", False)),
        spec=spec,
    )
    return None if found is None else found.reason_id


def test_kills_by_the_runner_are_wall_and_output_limits(tmp_path: Path):
    spec = make_spec(tmp_path, limits={"wall_seconds": 1, "output_kb": 1})
    assert reason(spec, "", None, killed_for="wall") == "sandbox.limit.wall"
    assert reason(spec, "", None, killed_for="output") == "sandbox.limit.output"


def test_sigxcpu_is_the_cpu_signal_only_when_a_cpu_limit_is_declared(tmp_path: Path):
    limited = make_spec(tmp_path, limits={"cpu_seconds": 1})
    assert reason(limited, "", 128 + signal.SIGXCPU) == "sandbox.limit.cpu"
    assert reason(limited, "", -signal.SIGXCPU) == "sandbox.limit.cpu"
    assert reason(limited, "", 1) is None
    assert reason(make_spec(tmp_path), "", 128 + signal.SIGXCPU) is None


def test_refused_fork_is_the_process_signal(tmp_path: Path):
    spec = make_spec(tmp_path, limits={"processes": 4})
    assert reason(spec, "/bin/sh: 1: Cannot fork") == "sandbox.limit.processes"
    assert reason(spec, "bash: fork: Resource temporarily unavailable") == (
        "sandbox.limit.processes"
    )
    assert reason(spec, "", 0, pids_limit_hit=True) == "sandbox.limit.processes"
    assert reason(make_spec(tmp_path), "/bin/sh: 1: Cannot fork") is None


def test_refused_allocation_is_the_memory_signal(tmp_path: Path):
    spec = make_spec(tmp_path, limits={"memory_mb": 64})
    assert reason(spec, "MemoryError") == "sandbox.limit.memory"
    assert reason(spec, "x: Cannot allocate memory") == "sandbox.limit.memory"


def test_erofs_is_the_write_signal_with_the_path(tmp_path: Path):
    spec = make_spec(tmp_path)
    found = classify(
        exit_code=1,
        stderr=b"OSError: [Errno 30] Read-only file system: '/etc/passwd'",
        killed_for=None,
        pids_limit_hit=False,
        spec=spec,
    )
    assert found is not None
    assert found.reason_id == "sandbox.write"
    assert found.reason.endswith("(EROFS): /etc/passwd")
    assert reason(spec, "/bin/sh: 1: cannot create /tmp/x: Read-only file system") == (
        "sandbox.write"
    )


def test_enoent_counts_only_for_paths_that_exist_on_the_host_but_are_hidden(tmp_path: Path):
    spec = make_spec(tmp_path)
    hidden = tmp_path / "hidden" / "data.txt"
    assert reason(spec, f"cat: {hidden}: No such file or directory") == "sandbox.read"
    assert reason(spec, f"cat: {tmp_path}/src/nope: No such file or directory") is None
    assert reason(spec, "cat: /definitely/not/here: No such file or directory") is None


def test_eacces_on_a_masked_credential_is_the_read_signal(tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / ".env").write_text("A=1")
    spec = make_spec(tmp_path)
    assert reason(spec, "cat: src/.env: Permission denied") == "sandbox.read"
    assert reason(spec, "cat: src/other: Permission denied") is None


def test_network_errors_count_only_when_the_network_is_not_declared(tmp_path: Path):
    line = "OSError: [Errno 101] Network is unreachable"
    assert reason(make_spec(tmp_path), line) == "sandbox.network"
    assert reason(make_spec(tmp_path), "ConnectionRefusedError: Connection refused") == (
        "sandbox.network"
    )
    assert reason(make_spec(tmp_path, network="allow"), line) is None


def test_missing_variable_counts_only_when_it_was_withheld(tmp_path: Path):
    spec = make_spec(tmp_path)
    assert reason(spec, "KeyError: 'TOKEN'") == "sandbox.environment"
    assert reason(spec, "sh: 1: TOKEN: parameter not set") == "sandbox.environment"
    assert reason(spec, "KeyError: 'NEVER_SET'") is None


def test_an_ordinary_failure_is_not_a_denial(tmp_path: Path):
    spec = make_spec(tmp_path, limits={"cpu_seconds": 1, "processes": 4, "memory_mb": 64})
    assert reason(spec, "make: *** No rule to make target 'all'.  Stop.", 2) is None


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stderr=st.binary(max_size=400), code=st.one_of(st.none(), st.integers(-64, 255)))
def test_classify_never_raises_on_arbitrary_output(tmp_path: Path, stderr: bytes, code):
    spec = make_spec(tmp_path, limits={"cpu_seconds": 1, "processes": 4, "memory_mb": 64})
    found = classify(
        exit_code=code, stderr=stderr, killed_for=None, pids_limit_hit=False, spec=spec
    )
    assert found is None or found.reason_id.startswith("sandbox.")


def test_a_refused_socket_family_is_a_network_denial_only_when_the_network_is_denied(
    tmp_path: Path,
):
    denied = make_spec(tmp_path, network="deny")
    bwrap_line = "OSError: [Errno 97] Address family not supported by protocol"
    firejail_line = "connect: [Errno 95] Operation not supported"
    assert reason(denied, bwrap_line) == "sandbox.network"
    assert reason(denied, firejail_line) == "sandbox.network"
    assert reason(denied, "cp: setting attributes: Operation not supported") is None
    assert reason(make_spec(tmp_path, network="allow"), bwrap_line) is None


def test_death_by_sigsys_under_the_seccomp_filter_is_a_syscall_denial(tmp_path: Path):
    # The filter kills foreign-ABI system calls whatever the network (it also guards modes).
    for network in ("deny", "allow"):
        spec = make_spec(tmp_path, network=network)
        assert reason(spec, "", 128 + signal.SIGSYS) == "sandbox.syscall"
        assert reason(spec, "", -signal.SIGSYS) == "sandbox.syscall"


def test_permission_denied_on_a_hidden_shell_is_an_exec_denial(tmp_path: Path):
    spec = build_spec(policy(filesystem={"read": ["./**"]}), working_dir=str(tmp_path),
                      environ={"PATH": "/bin"}, command=["python3"])
    if not spec.hidden_shells:
        return  # a host without shells has nothing to hide
    line = "PermissionError: [Errno 13] Permission denied: '/bin/sh'"
    if os.path.realpath("/bin/sh") in spec.hidden_shells:
        assert reason(spec, line) == "sandbox.exec"
    shown = build_spec(policy(filesystem={"read": ["./**"]}), working_dir=str(tmp_path),
                       environ={"PATH": "/bin"}, command=["sh", "-c", "x"])
    assert reason(shown, line) != "sandbox.exec"

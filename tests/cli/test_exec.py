"""Subprocess tools through the kernel and the OS sandbox: ``run_subprocess`` and ``callgate exec``.

Confinement is a decision: a run the sandbox stopped is audited and counted as a denial.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from callgate import Denied
from callgate.audit import AuditStore
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import load_policy

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "examples" / "builder.yaml"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (make test installs it)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    return tmp_path


def test_a_build_like_command_runs_untouched(project: Path) -> None:
    with Kernel(load_policy(BUILDER), working_dir=project) as k:
        result = k.run_subprocess("builder", ["sh", "-c", "cp src/main.c build/main.c && echo ok"])
    assert result.status == "ok"
    assert result.output["stdout"] == "ok\n"
    assert (project / "build" / "main.c").exists()


def test_a_write_the_sandbox_stopped_is_an_audited_denial(project: Path) -> None:
    db = project / "audit.db"
    with Kernel(load_policy(BUILDER), working_dir=project, audit=db) as k:
        with pytest.raises(Denied) as info:
            k.run_subprocess("builder", ["sh", "-c", "echo x > src/injected.c"])
        assert k.run_state.counters.denied_actions == 1
        run = k.run_id
    assert info.value.decision.reasons[0].id == "sandbox.write"
    assert info.value.result is not None
    assert "Read-only file system" in info.value.result.output["stderr"]
    assert not (project / "src" / "injected.c").exists()
    with AuditStore.open(db) as store:
        records = store.records(run)
        assert store.verify().ok
    verdicts = [r.payload.get("decision", {}).get("verdict") for r in records
                if r.kind == "decision"]
    assert verdicts == ["allow", "deny"]


def test_an_undeclared_tool_never_runs(project: Path) -> None:
    k = Kernel(load_policy(BUILDER), working_dir=project)
    with pytest.raises(Denied) as info:
        k.run_subprocess("not-declared", ["touch", "pwned"])
    assert not (project / "pwned").exists()
    assert info.value.decision.verdict == "deny"


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs /usr/bin/python3")
def test_network_is_stopped_for_a_tool_that_declares_network_deny(project: Path) -> None:
    k = Kernel(load_policy(BUILDER), working_dir=project)
    with pytest.raises(Denied) as info:
        k.run_subprocess("builder", ["/usr/bin/python3", "-c",
                                     "import socket; socket.create_connection(('127.0.0.1', 9))"])
    assert info.value.decision.reasons[0].id == "sandbox.network"


def run_cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "callgate.cli", "exec", "--policy", str(BUILDER),
                           "--tool", "builder", "--audit", "a.db", "--", *args], cwd=project,
                          capture_output=True, text=True, timeout=120, check=False)


def test_callgate_exec_passes_output_and_exit_status_through(project: Path) -> None:
    ok = run_cli(project, "sh", "-c", "echo hello; exit 3")
    assert ok.stdout == "hello\n"
    assert ok.returncode == 3


def test_callgate_exec_exits_126_when_confined_and_names_the_reason(project: Path) -> None:
    proc = run_cli(project, "sh", "-c", "echo x > /etc/callgate-test")
    assert proc.returncode == 126
    assert "[sandbox.write]" in proc.stderr
    assert not Path("/etc/callgate-test").exists()


def test_callgate_exec_exits_126_when_the_kernel_denies(project: Path) -> None:
    proc = run_cli(project, "cat", "/root/.ssh/id_rsa")
    assert proc.returncode == 126
    assert "deny" in proc.stderr

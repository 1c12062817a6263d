"""The facade: exports, backend choice, and the outcome the kernel records."""

from __future__ import annotations

import dataclasses

import pytest

import callgate.sandbox as sandbox_module
from callgate import SandboxError
from callgate.sandbox import Sandbox, SandboxOutcome, available_backends

from .conftest import BUILDER, Project, policy


def test_all_lists_exactly_the_public_names():
    public = {name for name in dir(sandbox_module) if not name.startswith("_")}
    exported = set(sandbox_module.__all__)
    assert exported <= public
    assert {"Sandbox", "SandboxOutcome", "available_backends"} <= exported
    assert sorted(sandbox_module.__all__) == sandbox_module.__all__


def test_outcome_is_a_frozen_value_with_the_agreed_fields():
    fields = [f.name for f in dataclasses.fields(SandboxOutcome)]
    assert fields == [
        "argv", "backend", "exit_code", "stdout", "stderr", "confined", "reason", "reason_id",
        "duration_ms",
    ]
    outcome = SandboxOutcome(("x",), "bwrap", 0, b"", b"", False, None, None, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.confined = True  # type: ignore[misc]


def test_auto_prefers_bwrap_then_firejail(project: Project):
    backends = available_backends()
    if not backends:
        pytest.skip("no sandbox backend can start on this host")
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root))
    assert box.backend == backends[0]
    assert backends == [b for b in ("bwrap", "firejail") if b in backends]


def test_unenforceable_policy_is_refused_before_choosing_a_backend(project: Project):
    hosts = {"hosts": ["pypi.org"], "proxy": "http://127.0.0.1:3128"}
    with pytest.raises(SandboxError, match="egress proxy"):
        Sandbox.for_policy(policy(network=hosts), working_dir=str(project.root))


def test_empty_command_is_refused(project: Project):
    if not available_backends():
        pytest.skip("no sandbox backend can start on this host")
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root))
    with pytest.raises(SandboxError, match="empty command"):
        box.run([])


def test_denial_is_the_reason_the_kernel_records():
    stopped = SandboxOutcome(
        ("x",), "bwrap", 1, b"", b"", True, "write outside declared roots blocked (EROFS): /etc/x",
        "sandbox.write", 1.0,
    )
    reason = stopped.denial()
    assert reason is not None
    assert (reason.id, reason.check) == ("sandbox.write", "sandbox")
    assert reason.message.endswith("/etc/x")
    clean = SandboxOutcome(("x",), "bwrap", 0, b"", b"", False, None, None, 1.0)
    assert clean.denial() is None


def test_a_foreign_error_during_a_run_becomes_a_sandbox_error(project: Project):
    if not available_backends():
        pytest.skip("no sandbox backend can start on this host")
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root))
    with pytest.raises(SandboxError, match="sandbox failed"):
        box.run(["/bin/cat"], stdin="text, not bytes")  # type: ignore[arg-type]

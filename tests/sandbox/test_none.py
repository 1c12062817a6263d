"""The unconfined opt-out: never silent, never implicit, loud on every run."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from callgate import SandboxError
from callgate.sandbox import Sandbox

from .conftest import BUILDER, Project, policy


def unconfined(project: Project, empty: Path, **fields: object) -> Sandbox:
    return Sandbox.for_policy(
        policy(**{**BUILDER, **fields}),
        working_dir=str(project.root),
        allow_unconfined=True,
        environ=project.environ,
        search_path=str(empty),
    )


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    """A PATH with no sandbox executable in it."""
    path = tmp_path / "empty-bin"
    path.mkdir()
    return path


def test_no_usable_backend_refuses_to_build_a_sandbox(project: Project, empty: Path):
    with pytest.raises(SandboxError, match="no usable sandbox backend"):
        Sandbox.for_policy(
            policy(**BUILDER), working_dir=str(project.root), search_path=str(empty)
        )


def test_forcing_a_missing_backend_refuses_even_with_the_opt_out(project: Project, empty: Path):
    with pytest.raises(SandboxError, match="bwrap is not installed"):
        Sandbox.for_policy(
            policy(**BUILDER),
            working_dir=str(project.root),
            backend="bwrap",
            allow_unconfined=True,
            search_path=str(empty),
        )


def test_backend_none_needs_the_explicit_opt_out(project: Project):
    with pytest.raises(SandboxError, match="allow_unconfined"):
        Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root), backend="none")


def test_opt_out_warns_through_logging_and_stderr_on_every_run(
    project: Project,
    empty: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
):
    box = unconfined(project, empty)
    assert box.backend == "none"
    with caplog.at_level(logging.WARNING, logger="callgate.sandbox"):
        for _ in range(2):
            assert box.run(["/bin/true"]).exit_code == 0
    warnings = [r for r in caplog.records if "UNCONFINED" in r.getMessage()]
    assert len(warnings) == 2
    assert capsys.readouterr().err.count("UNCONFINED") == 2


def test_unconfined_run_still_clears_the_environment_and_applies_limits(
    project: Project, empty: Path
):
    box = unconfined(project, empty, limits={"cpu_seconds": 1, "wall_seconds": 10})
    listing = box.run(["/usr/bin/env"])
    assert b"s3cret" not in listing.stdout
    spinner = box.run(["python3", "-c", "while True: pass"])
    assert spinner.confined
    assert spinner.reason_id == "sandbox.limit.cpu"

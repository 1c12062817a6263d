"""What each shipped preset allows and denies, through a real kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate.kernel._kernel import Kernel
from callgate.policy.presets import load_preset
from callgate.testing import call


def kernel_for(name: str, workdir: Path) -> Kernel:
    return Kernel(load_preset(name), working_dir=workdir)


@pytest.mark.parametrize(("c", "verdict"), [
    (call("http", "get", url="https://en.wikipedia.org/wiki/X"), "allow"),
    (call("file", "read", path="./data/notes.txt"), "allow"),
    (call("file", "read", path="/etc/passwd"), "deny"),
    (call("file", "read", path="./.env"), "deny"),
    (call("file", "read", path="./.ssh/id_rsa"), "deny"),
    (call("file", "write", path="./data/x"), "deny"),
    (call("http", "post", url="https://a.com"), "deny"),
    (call("shell", "exec", command="ls"), "deny"),
])
def test_safe_research(workdir: Path, c: dict[str, object], verdict: str) -> None:
    (workdir / ".env").write_text("K=1")
    assert kernel_for("safe-research", workdir).check(c).verdict == verdict


@pytest.mark.parametrize(("c", "verdict"), [
    (call("file", "read", path="./data/notes.txt"), "allow"),
    (call("file", "write", path="./out/r.md"), "require-approval"),
    (call("file", "write", path="/tmp/elsewhere"), "deny"),
    (call("shell", "exec", command="git status"), "allow"),
    (call("shell", "exec", command="git status; rm -rf /"), "deny"),
    (call("shell", "exec", command="curl https://x.io"), "deny"),
    (call("database", "query", database="app", sql="SELECT 1"), "allow"),
    (call("http", "post", url="https://a.com"), "deny"),
])
def test_workspace_assistant(workdir: Path, c: dict[str, object], verdict: str) -> None:
    assert kernel_for("workspace-assistant", workdir).check(c).verdict == verdict


def test_workspace_assistant_denies_shell_after_web_content(workdir: Path) -> None:
    k = kernel_for("workspace-assistant", workdir)
    assert k.check(call("http", "get", url="https://docs.python.org/")).verdict == "allow"
    assert k.check(call("shell", "exec", command="ls")).verdict == "deny"


@pytest.mark.parametrize(("c", "verdict"), [
    (call("file", "read", path="./data/notes.txt"), "allow"),
    (call("file", "read", path="./out/x"), "deny"),
    (call("http", "get", url="https://api.github.com/"), "deny"),
    (call("shell", "exec", command="ls"), "deny"),
])
def test_strict(workdir: Path, c: dict[str, object], verdict: str) -> None:
    assert kernel_for("strict", workdir).check(c).verdict == verdict


def test_strict_quarantines_after_two_denials(workdir: Path) -> None:
    k = kernel_for("strict", workdir)
    k.check(call("shell", "exec", command="ls"))
    k.check(call("shell", "exec", command="ls"))
    assert k.run_state.quarantined


@pytest.mark.parametrize("c", [
    call("file", "read", path="./data/notes.txt"),
    call("http", "get", url="https://api.github.com/"),
    call("shell", "exec", command="ls"),
])
def test_deny_all_denies_everything(workdir: Path, c: dict[str, object]) -> None:
    assert kernel_for("deny-all", workdir).check(c).verdict == "deny"


def test_workspace_assistant_grants_no_interpreter(workdir: Path) -> None:
    k = kernel_for("workspace-assistant", workdir)
    assert k.check(call("shell", "exec", command="python -c 'import os'")).verdict == "deny"

"""Which host shells a sandboxed tool sees: none unless its command is one or it declares one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from callgate.sandbox._shells import hidden_shells, host_shells, is_shell_command

ENV = {"PATH": "/usr/bin:/bin"}


def test_host_shells_are_real_files_found_by_list_and_by_name(tmp_path: Path):
    listed = tmp_path / "shells"
    fake = tmp_path / "myshell"
    fake.write_text("")
    listed.write_text(f"# comment\n{fake}\n/does/not/exist\n")
    shells = host_shells(str(listed))
    assert str(fake) in shells
    assert all(os.path.isfile(path) and os.path.realpath(path) == path for path in shells)
    if os.path.exists("/bin/sh"):
        assert os.path.realpath("/bin/sh") in shells


@pytest.mark.parametrize("argv", [["sh", "-c", "x"], ["/bin/bash", "x.sh"], ["busybox", "sh"],
                                  ["./tools/dash"]])
def test_a_command_named_like_a_shell_is_a_shell(argv: list[str]):
    assert is_shell_command(argv, frozenset(), ENV, "/")


def test_a_command_resolving_to_a_shell_under_another_name_is_a_shell(tmp_path: Path):
    real = tmp_path / "realshell"
    real.write_text("")
    (tmp_path / "innocent").symlink_to(real)
    assert is_shell_command([str(tmp_path / "innocent")], {str(real)}, ENV, "/")
    assert not is_shell_command(["python3", "-c", "x"], {str(real)}, ENV, "/")


def test_every_shell_is_hidden_from_a_command_that_is_not_one():
    if not os.path.exists("/bin/sh"):
        pytest.skip("no /bin/sh on this host")
    hidden = hidden_shells(["python3"], (), ENV, "/")
    assert os.path.realpath("/bin/sh") in hidden
    assert hidden_shells(["sh", "-c", "true"], (), ENV, "/") == ()


def test_a_shell_declared_by_name_stays_and_only_that_one():
    if not (os.path.exists("/bin/sh") and os.path.exists("/bin/bash")):
        pytest.skip("needs /bin/sh and /bin/bash")
    sh = os.path.realpath("/bin/sh")
    if sh == os.path.realpath("/bin/bash"):
        pytest.skip("/bin/sh is bash here")
    hidden = hidden_shells(["make"], (sh,), ENV, "/")
    assert sh not in hidden
    assert os.path.realpath("/bin/bash") in hidden

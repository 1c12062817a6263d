"""Command checks: shell syntax is refused, programs are matched by name or by the real file."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from callgate import CallgateError
from callgate.matchers._commands import CommandRejected, check_command, parse_command

ALLOWED = ["ls", "cat", "grep", "echo"]
BASH = shutil.which("bash")


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_a_plain_allowed_command_is_allowed() -> None:
    assert check_command("ls -la ./data", ALLOWED) is None
    assert parse_command("ls -la ./data") == ("ls", "-la", "./data")


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("ls; curl x", "compound shell commands are not allowed: ';' in 'ls; curl x'"),
        ("ls && rm -rf /", "compound shell commands are not allowed: '&&' in 'ls && rm -rf /'"),
        ("ls || rm -rf /", "compound shell commands are not allowed: '||' in 'ls || rm -rf /'"),
        ("ls\ncurl x", "compound shell commands are not allowed: '\\n' in 'ls\\ncurl x'"),
        ("ls\r\ncurl x", "compound shell commands are not allowed: '\\n' in 'ls\\r\\ncurl x'"),
        ("cat $(whoami)", "command substitutions are not allowed: '$(' in 'cat $(whoami)'"),
        ("cat `whoami`", "command substitutions are not allowed: '`' in 'cat `whoami`'"),
        ("ls | nc x 1", "pipelines are not allowed: '|' in 'ls | nc x 1'"),
        ("grep x > /etc/passwd", "redirections are not allowed: '>' in 'grep x > /etc/passwd'"),
        ("cat < /etc/shadow", "redirections are not allowed: '<' in 'cat < /etc/shadow'"),
        ("ls 2>&1", "redirections are not allowed: '>&' in 'ls 2>&1'"),
        ("ls &", "background jobs are not allowed: '&' in 'ls &'"),
        ("(ls)", "subshells are not allowed: '(' in '(ls)'"),
        ("echo {a,b}", "brace groups and expansions are not allowed: '{' in 'echo {a,b}'"),
        ("echo $HOME", "variable expansions are not allowed: '$' in 'echo $HOME'"),
        ('echo "$HOME"', "variable expansions are not allowed: '$' in 'echo \"$HOME\"'"),
        ('echo "$(id)"', "command substitutions are not allowed: '$(' in 'echo \"$(id)\"'"),
        ("cat ~/.ssh/id_rsa", "tilde expansions are not allowed: '~' in 'cat ~/.ssh/id_rsa'"),
        ("ls # hidden", "comments are not allowed: '#' in 'ls # hidden'"),
    ],
)
def test_shell_constructs_are_denied_naming_the_metacharacter(command: str, reason: str) -> None:
    assert check_command(command, ALLOWED) == reason
    with pytest.raises(CommandRejected) as info:
        parse_command(command)
    assert isinstance(info.value, CallgateError)


def test_shell_constructs_are_denied_even_without_a_command_list() -> None:
    assert check_command("ls; curl x", None) is not None
    assert check_command("anything --at all", None) is None


def test_quoted_and_escaped_metacharacters_are_literal_arguments() -> None:
    assert check_command("grep 'a|b;c' notes.txt", ALLOWED) is None
    assert parse_command("grep 'a|b;c' notes.txt") == ("grep", "a|b;c", "notes.txt")
    assert parse_command("echo \\; '$HOME' \"a b\" HEAD~1 a#b") == (
        "echo",
        ";",
        "$HOME",
        "a b",
        "HEAD~1",
        "a#b",
    )


def test_newlines_and_control_characters_are_denied_even_inside_quotes() -> None:
    assert check_command("echo 'a\nb'", ALLOWED) is not None
    assert (
        check_command("echo a\x00b", ALLOWED)
        == "NUL bytes are not allowed: '\\0' in 'echo a\\x00b'"
    )
    assert check_command("echo '\x1b[2Jhidden'", ALLOWED) == (
        "control characters are not allowed: '\\x1b' in \"echo '\\x1b[2Jhidden'\""
    )
    assert check_command("echo\ta", ALLOWED) is None


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("lsx", "command 'lsx' is not in the allowed commands (ls, cat, grep, echo)"),
        ("LS", "command 'LS' is not in the allowed commands"),
        ("l* -la", "globs are not allowed in the program position: 'l*'"),
        ("?s", "globs are not allowed in the program position"),
        ("PATH=/tmp ls", "environment assignments are not allowed: 'PATH=/tmp'"),
        ("./ls", "program path './ls' must be absolute"),
        ("ls 'unclosed", "cannot be parsed"),
        ("", "empty command"),
        ("  ''  ", "empty command"),
    ],
)
def test_programs_that_are_not_plainly_allowed_are_denied(command: str, fragment: str) -> None:
    reason = check_command(command, ALLOWED)
    assert reason is not None and fragment in reason


def test_a_lookalike_program_path_is_denied(tmp_path: Path) -> None:
    fake = _executable(tmp_path / "ls")
    reason = check_command(f"{fake} -la", ALLOWED)
    assert reason == f"program {fake} is not the allowed ls (which is {shutil.which('ls')})"
    assert check_command([str(fake)], ALLOWED) == reason


@pytest.mark.skipif(shutil.which("ls") is None, reason="needs an ls on PATH")
def test_the_real_program_by_path_or_through_a_symlink_is_allowed(tmp_path: Path) -> None:
    real = shutil.which("ls")
    assert real is not None
    assert check_command([real, "-la"], ALLOWED) is None
    link = tmp_path / "ls"
    link.symlink_to(os.path.realpath(real))
    assert check_command(f"{link} -la", ALLOWED) is None


def test_programs_are_found_on_the_given_search_path(tmp_path: Path) -> None:
    tool = _executable(tmp_path / "bin" / "tool")
    other = _executable(tmp_path / "other" / "tool")
    search = str(tmp_path / "bin")
    assert check_command([str(tool)], ["tool"], search_path=search) is None
    assert check_command([str(other)], ["tool"], search_path=search) is not None
    assert check_command([str(tool)], ["tool"], search_path=str(tmp_path / "empty")) is not None


def test_absolute_allow_list_entries_name_one_file(tmp_path: Path) -> None:
    tool = _executable(tmp_path / "bin" / "tool")
    other = _executable(tmp_path / "other" / "tool")
    search = str(tmp_path / "bin")
    assert check_command("tool --x", [str(tool)], search_path=search) is None
    assert check_command([str(tool)], [str(tool)]) is None
    assert check_command([str(other)], [str(tool)]) is not None
    assert check_command("tool", ["bin/tool"], search_path=search) is not None


def test_argv_lists_pass_metacharacters_literally_but_refuse_bad_items() -> None:
    assert check_command(["ls", "a;b", "$(x)", "*"], ALLOWED) is None
    assert check_command(["ls", "a\x00b"], ALLOWED) == "NUL bytes are not allowed in argv"
    assert check_command(["ls", 3], ALLOWED) == "argv items must all be strings"  # type: ignore[list-item]
    assert check_command([], ALLOWED) == "empty command"
    assert check_command(["nc", "x"], ALLOWED) is not None


def test_an_unencodable_program_path_is_denied_not_raised() -> None:
    reason = check_command(["/usr/bin/l\ud800s"], [*ALLOWED, "/usr/bin/ls"])
    assert reason is not None and "cannot be resolved" in reason


def test_an_empty_command_list_allows_nothing() -> None:
    assert check_command("ls", []) == "command 'ls' is not in the allowed commands (none)"


_RISKY = "~#=:'\"\\$`;|&<>(){}*?"
_TOKENS = st.one_of(
    st.text("ab.-/=:~#*?", min_size=1, max_size=4),  # bare words, incl. tilde and hash
    st.sampled_from([" ", "  ", "\t"]),
    st.text(_RISKY + "ab \t", max_size=4).filter(lambda t: "'" not in t).map(lambda t: f"'{t}'"),
    st.text(_RISKY + "ab \t", max_size=4).map(lambda t: '"' + t.replace('"', "") + '"'),
    st.sampled_from(_RISKY).map(lambda c: "\\" + c),
    st.sampled_from(_RISKY),
)


@pytest.mark.skipif(BASH is None, reason="needs bash for the differential check")
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(args=st.lists(_TOKENS, min_size=1, max_size=8).map("".join))
def test_accepted_commands_split_exactly_as_bash_splits_them(tmp_path: Path, args: str) -> None:
    command = f"printf '%s\\0' {args}"
    if check_command(command, None) is not None:
        event("refused")
        return  # refused: nothing runs, so there is nothing to compare
    assert BASH is not None
    # noglob: globs in arguments are documented to stay literal, which is what argv gives.
    shell = subprocess.run(
        [BASH, "--norc", "--noprofile", "-f", "-c", command],
        capture_output=True,
        cwd=tmp_path,
        env={"HOME": "/nonexistent-home", "PATH": os.defpath},
        check=True,
        timeout=10,
    )
    words = shell.stdout.decode().split("\0")[:-1]
    expected = list(parse_command(command)[2:]) or [""]
    assert words == expected, shlex.join(words)


# -- options that make an allowed program run another command -----------------------------------

KERNEL_POLICY = """
name: command-options
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: shell
      actions: [exec]
      constraints:
        allowed_commands: [git, sed, tar, find, rsync, ssh, less, vim, awk, xargs, env, zip,
                           timeout, ls, cat]
rules:
  - {id: allow-exec, priority: 100, match: {action: exec}, decision: allow, reason: ok}
"""

#: Each spelling from the review (and its neighbours), and the option or key the denial names.
COMMAND_RUNNING = [
    ("git -c alias.x='!touch pwned' x", "git -c alias.x"),
    ("git -c core.fsmonitor='touch pwned' status", "git -c core.fsmonitor runs a command"),
    ("git -c CORE.fsMonitor=x status", "git -c core.fsmonitor"),
    ("git -c core.sshCommand=x fetch", "git -c core.sshcommand"),
    ("git -c diff.x.textconv=x diff", "git -c diff.x.textconv"),
    ("git -c filter.f.smudge=x checkout .", "git -c filter.f.smudge"),
    ("git -c credential.helper='!x' fetch", "git -c credential.helper"),
    ("git --config-env=core.pager=EVIL log", "git --config-env"),
    ("git --exec-path=/tmp/x status", "git --exec-path"),
    ("git -C /tmp/other status", "git -C"),
    ("git rebase --exec='touch pwned' main", "git rebase --exec"),
    ("git rebase -x 'touch pwned' main", "git rebase -x"),
    ("git submodule foreach 'touch pwned'", "git submodule foreach"),
    ("git clone --upload-pack='touch pwned' ./repo", "git clone --upload-pack"),
    ("git config core.pager 'touch pwned'", "git config core.pager"),
    ("sed '1e touch pwned' a.txt", "sed script command 'e' runs a command"),
    ("sed -ne '1e touch pwned' a.txt", "sed -e script command 'e'"),
    ("sed --expression='1e touch pwned' a.txt", "sed --expression script command 'e'"),
    ("sed --expr='1e touch pwned' a.txt", "sed --expr (--expression) script command 'e'"),
    ("sed 's/a/touch pwned/e' a.txt", "sed script flag 'e' of 's' runs a command"),
    ("sed -n 'w /dev/stdout' a.txt", "sed script command 'w' writes a file"),
    ("sed -f script.sed a.txt", "sed -f"),
    ("tar --to-command='touch pwned' -xf a.tar", "tar --to-command runs a command"),
    ("tar --to-com='touch pwned' -xf a.tar", "tar --to-com (--to-command)"),
    ("tar --checkpoint=1 --checkpoint-action=exec='touch pwned' -cf a.tar a.txt",
     "tar --checkpoint-action"),
    ("tar --checkpoint-a=exec=x -cf a.tar a.txt", "tar --checkpoint-a (--checkpoint-action)"),
    ("tar -I 'touch pwned' -cf a.tar a.txt", "tar -I runs a command"),
    ("tar -cIx -f a.tar a.txt", "tar -I"),
    ("tar cIf x a.tar a.txt", "tar -I"),
    ("tar --use-compress-program=x -cf a.tar a.txt", "tar --use-compress-program"),
    ("find . -exec touch pwned \\;", "find -exec runs a command"),
    ("find . -execdir touch pwned +", "find -execdir"),
    ("find . -okdir touch pwned \\;", "find -okdir"),
    ("find . -fprintf out %p", "find -fprintf writes a file"),
    ("rsync -e 'touch pwned' a b:c", "rsync -e runs a command"),
    ("rsync --rsh=x a b:c", "rsync --rsh"),
    ("rsync --rsync-path=x a b:c", "rsync --rsync-path"),
    ("ssh -o ProxyCommand='touch pwned' host", "ssh -o ProxyCommand runs a command"),
    ("ssh -oProxyCommand=x host", "ssh -o ProxyCommand"),
    ("ssh -o 'proxycommand x' host", "ssh -o proxycommand"),
    ("ssh -v -o LocalCommand=x host", "ssh -o LocalCommand"),
    ("less '+!touch pwned' a.txt", "less +"),
    ("vim -c '!touch pwned' a.txt", "vim -c"),
    ("vim '+!touch pwned' a.txt", "vim +"),
    ("awk 'BEGIN{system(\"touch pwned\")}'", "awk program calls system()"),
    ("awk 'BEGIN{print | \"sh\"}'", "awk program pipes"),
    ("awk '{\"id\" | getline x}' a.txt", "awk program pipes"),
    ("xargs touch", "xargs"),
    ("env -S 'touch pwned'", "env -S"),
    ("env --split-string='touch pwned' ls", "env --split-string"),
    ("zip -T -TT 'touch pwned' a.zip a.txt", "zip -T"),
    ("zip --unzip-command='touch pwned' -T a.zip a.txt", "zip"),
]


@pytest.fixture
def options_kernel() -> Any:
    """A fresh kernel per test: a behavioral statement may quarantine a run."""
    from callgate.kernel._kernel import Kernel
    from callgate.policy._loader import parse_policy

    return Kernel(parse_policy(KERNEL_POLICY))


def _shell_call(command: str | list[str]) -> Any:
    from callgate._model import ToolCall

    key = "command" if isinstance(command, str) else "argv"
    return ToolCall(tool="sh", tool_class="shell", action="exec", parameters={key: command})


@pytest.mark.parametrize(("command", "names"), COMMAND_RUNNING)
def test_options_that_run_commands_are_denied_by_the_kernel_naming_the_option(
    options_kernel: Any, command: str, names: str
) -> None:
    reason = check_command(command, ["git", "sed", "tar", "find", "rsync", "ssh", "less", "vim",
                                     "awk", "xargs", "env", "zip"])
    assert reason is not None and names in reason, reason
    decision = options_kernel.check(_shell_call(command))
    assert decision.verdict == "deny"
    assert names in decision.reasons[0].message
    assert options_kernel.check(_shell_call(shlex.split(command))).verdict == "deny"


def test_a_wrapper_runs_only_programs_that_are_allowed_themselves(options_kernel: Any) -> None:
    assert "'touch'" in str(check_command("timeout 5 touch pwned", ["timeout", "ls"]))
    assert "'touch'" in str(check_command("env touch pwned", ["env", "ls"]))
    assert check_command("timeout 5 ls -la", ["timeout", "ls"]) is None
    assert options_kernel.check(_shell_call("env GIT_SSH_COMMAND=x git fetch")).verdict == "deny"
    assert options_kernel.check(_shell_call("timeout 5 ls")).verdict == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "git -c user.name=x commit -m msg",
        "git -c color.ui=false log --oneline",
        "git status",
        "git config user.email a@b.example",
        "git log -n 3",
        "sed -n 1p a.txt",
        "sed -e 's/a/b/g' -e '/x/d' a.txt",
        "sed -i.bak 's/e/E/' a.txt",
        "sed -ie 's/e/E/' a.txt",
        "sed --quiet --expression=2p a.txt",
        "tar -czf a.tgz a.txt",
        "tar xvf a.tar",
        "tar --checkpoint=10 --checkpoint-action=dot -cf a.tar a.txt",
        "find . -name '*.txt' -print",
        "rsync -avz src/ dst/",
        "ssh -o ConnectTimeout=5 host",
        "less a.txt",
        "awk -F: '{print $1}' a.txt",
        "awk '$1 == \"a\" || $2 > 3 {n++} END {print n}' a.txt",
        "zip -r a.zip dir",
        "env ls",
    ],
)
def test_benign_spellings_of_the_same_programs_stay_allowed(
    options_kernel: Any, command: str
) -> None:
    assert check_command(command, ["git", "sed", "tar", "find", "rsync", "ssh", "less", "awk",
                                   "zip", "env", "ls"]) is None
    assert options_kernel.check(_shell_call(command)).verdict == "allow"


def test_a_one_mebibyte_one_token_command_is_refused_up_front() -> None:
    reason = check_command("ls " + "a" * (1 << 20), ["ls"])
    assert reason is not None and "longer than" in reason
    with pytest.raises(CommandRejected):
        parse_command("a" * (1 << 20))


def test_a_long_quoted_token_under_the_limit_splits_as_shlex_does() -> None:
    token = "'" + "a b" * 30_000 + "'"
    assert parse_command("ls " + token) == ("ls", "a b" * 30_000)


def test_an_argv_longer_than_the_string_bound_is_refused_before_it_is_read() -> None:
    # 100,000 nested timeouts took 65 s to peel; a 1 MiB argv of options 5 s to walk
    reason = check_command(["timeout"] * 100_000 + ["ls"], ["timeout", "ls"])
    assert reason is not None and "longer than" in reason
    assert check_command(["ls", "a" * 1000], ["ls"]) is None

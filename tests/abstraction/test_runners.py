"""Options that run commands: every catalog entry, in every spelling, is refused naming it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.abstraction._catalog import OptionSpec, ProgramSpec, default_catalog
from callgate.abstraction._runners import (
    OptionRule,
    RunRules,
    default_runners,
    runs_command,
    runs_environment,
)
from callgate.abstraction._shell import ShellCommand, parse_commands, peel

RUNNERS = default_runners()
CATALOG = default_catalog()
#: A value each value check refuses.
TRIGGER = {
    None: "x",
    "git-config": "core.fsmonitor=touch pwned",
    "ssh-option": "ProxyCommand=touch pwned",
    "sed-script": "1e touch pwned",
    "awk-program": 'BEGIN { system("touch pwned") }',
    "client-script": "\\! touch pwned",
    "remote-archive": "host:a.tar",
    "with-value": "/tmp/x",
    "git-remote": "ext::touch pwned",
}


def _entries() -> Iterator[tuple[tuple[str, ...], OptionRule, ProgramSpec]]:
    """(program and subcommand words, rule, spec) for every option rule of the catalog."""

    def walk(path: tuple[str, ...], rules: RunRules,
             spec: ProgramSpec) -> Iterator[tuple[tuple[str, ...], OptionRule, ProgramSpec]]:
        for rule in rules.options.values():
            yield path, rule, spec
        for name, sub in rules.subcommands.items():
            inner = spec.subcommands.get(name) or ProgramSpec(name=spec.name, options=spec.options)
            yield from walk((*path, name), sub, inner)

    for program, rules in RUNNERS.programs.items():
        _, spec = CATALOG.program(program)
        yield from walk((program,), rules, spec or ProgramSpec(name=program))


ENTRIES = sorted(_entries(), key=lambda e: (e[0], e[1].name))


def _value(rule: OptionRule) -> str:
    if rule.check == "prefix":
        return rule.prefixes[0] + "=touch pwned"
    return TRIGGER[rule.check]


def _spellings(rule: OptionRule, spec: ProgramSpec, value: str, cut: int) -> list[list[str]]:
    """The ways a command line can give ``rule`` with ``value``."""
    name = rule.name
    if not rule.takes_value and rule.check != "with-value":
        forms = [[name]]
    elif rule.check == "with-value":
        forms = [[f"{name}={value}"]]
    else:
        forms = [[name, value]]
        if name.startswith("--") or (spec.single_dash_long and len(name) > 2):
            forms.append([f"{name}={value}"])
        elif len(name) == 2:
            forms.append([name + value])
    if name.startswith("--") and not spec.single_dash_long:
        short = name[: max(3, len(name) - cut)]
        if short not in spec.options:
            forms += [[short + form[0][len(name):], *form[1:]] for form in forms]
    flag = next((f for f, o in spec.options.items() if len(f) == 2 and f[0] == "-"
                 and f[1].isalpha() and not o.takes_value and not o.attached), None)
    if len(name) == 2 and flag is not None and not spec.single_dash_long:
        forms += [[flag + form[0][1:], *form[1:]] for form in forms if form[0].startswith(name)]
    return forms


@settings(max_examples=300, deadline=None)
@given(entry=st.sampled_from(ENTRIES), cut=st.integers(0, 20))
def test_every_catalog_entry_in_every_spelling_is_refused_naming_it(
    entry: tuple[tuple[str, ...], OptionRule, ProgramSpec], cut: int
) -> None:
    path, rule, spec = entry
    for form in _spellings(rule, spec, _value(rule), cut):
        words = [*path, *form, "operand"]
        reason = runs_command(words)
        assert reason is not None, words
        written = form[0].partition("=")[0]  # an abbreviation names what it abbreviates
        assert reason.startswith(path[0]), reason
        assert rule.name in reason or written in reason or rule.check in (
            "git-config", "ssh-option"), reason


def test_every_entry_is_generated() -> None:
    assert len(ENTRIES) > 80
    assert {p[0] for p, _, _ in ENTRIES} >= {"git", "sed", "tar", "find", "rsync", "ssh", "less",
                                             "vim", "awk", "env", "zip", "wget", "nc"}


_SUBSECTION = st.text("abcXYZ.-_", min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(pattern=st.sampled_from(sorted(RUNNERS.tables.git_keys)), sub=_SUBSECTION,
       upper=st.lists(st.booleans(), min_size=60, max_size=60),
       how=st.sampled_from(["-c", "clone", "config"]))
def test_every_git_key_that_runs_a_command_is_refused_in_any_case(
    pattern: str, sub: str, upper: list[bool], how: str
) -> None:
    key = pattern.replace("*", sub)
    flags = upper + [False] * len(key)
    key = "".join(c.upper() if flags[i] else c for i, c in enumerate(key))
    words = {
        "-c": ["git", "-c", f"{key}=touch pwned", "status"],
        "clone": ["git", "clone", "-c", f"{key}=touch pwned", "https://example.invalid/r"],
        "config": ["git", "config", key, "touch pwned"],
    }[how]
    reason = runs_command(words)
    assert reason is not None and key.lower() in reason


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(sorted(RUNNERS.tables.ssh_options)), upper=st.booleans(),
       form=st.integers(0, 3), program=st.sampled_from(["ssh", "scp", "sftp"]))
def test_every_ssh_option_that_runs_a_command_is_refused_in_every_form(
    key: str, upper: bool, form: int, program: str
) -> None:
    shown = key.upper() if upper else key
    option = [["-o", f"{shown}=x"], [f"-o{shown}=x"], ["-o", f"{shown} x"], ["-4o", f"{shown}=x"]]
    reason = runs_command([program, *option[form], "host"])
    assert reason is not None and shown in reason


@given(pattern=st.sampled_from(sorted(RUNNERS.environment)), tail=st.text("AB_1", max_size=4))
def test_every_environment_variable_that_runs_a_command_is_refused_through_env(
    pattern: str, tail: str
) -> None:
    name = pattern.replace("*", tail)
    assert runs_environment([name]) is not None
    (cmd,) = [c for c in peel(ShellCommand(words=("env", f"{name}=x", "ls"))) if c.words]
    assert cmd.runs_command is not None and name in cmd.runs_command


@pytest.mark.parametrize("words", [
    "git -c user.name=x commit -m msg", "git -c color.ui=false log", "git clone https://x/r d",
    "git config user.email a@b.example", "git rebase -i main", "git submodule update --init",
    "sed -n 1p a.txt", "sed -e s/a/b/g -e /x/d a.txt", "sed -i.bak -E s/a+/b/ a.txt",
    "sed -ie s/e/E/ a.txt", "sed --quiet --expr=2p a.txt", "sed 1a\\ text;e a.txt",
    "tar -czf a.tgz a.txt", "tar xvf a.tar", "tar --checkpoint=10 --checkpoint-action=dot -cf a b",
    "tar -cf ./dir:x/a.tar a", "find . -name *.txt -print0", "rsync -avz src/ dst/",
    "ssh -o ConnectTimeout=5 -p 22 host uptime", "less -N a.txt", "vim a.txt",
    "awk -F: {print} a.txt", "awk -v n=1 $1==n||$2>3 a.txt", "zip -r a.zip dir", "env ls",
    "env -u HOME ls", "wget -q -O out https://x/", "make -j4 all", "npm run build",
    "go build -o bin ./...", "gcc -O2 -Wall -o a a.c", "socat - TCP:host:80",
    "sqlite3 db.sqlite 'select 1'", "psql -c 'select 1'", "timeout 5 ls",
])
def test_benign_spellings_of_the_same_programs_are_not_refused(words: str) -> None:
    assert runs_command(words.split()) is None


_BENIGN_SED = st.lists(st.sampled_from(["p", "d", "=", "s/a/b/g", "s,x,y,2", "y/ab/cd/", "q",
                                        "/re/d", "1,3p", "$p", "2~3d", "/a/,/b/s/c/d/p", "x",
                                        "G", "N", "{p}", "l", "h"]), min_size=1, max_size=5)


@given(_BENIGN_SED)
def test_sed_scripts_without_e_w_or_r_are_accepted(commands: list[str]) -> None:
    assert runs_command(["sed", "-n", ";".join(commands), "a.txt"]) is None


@pytest.mark.skipif(shutil.which("sed") is None, reason="needs GNU sed")
@settings(max_examples=300, deadline=None)
@given(st.text("1$/;,!ewrRWspdxy{}\\ \naiIt:bq0", max_size=10))
def test_every_sed_script_the_scan_accepts_is_one_gnu_sed_sandbox_mode_accepts(
    script: str,
) -> None:
    # GNU sed --sandbox refuses exactly the commands that run, write or read files; anything
    # the scan lets through must not be one of them, as sed itself parses the script.
    if runs_command(["sed", "-n", "-e", script]) is not None:
        return
    done = subprocess.run(["sed", "--sandbox", "-n", "-e", script, "/dev/null"],
                          capture_output=True, text=True, timeout=10, check=False)
    assert "sandbox" not in done.stderr, (script, done.stderr)


@given(st.text("abcx |&;()\"'/{}$", max_size=30))
def test_awk_programs_with_system_or_a_pipe_are_refused(text: str) -> None:
    reason = runs_command(["awk", text])
    if "|" in text.replace("||", ""):
        assert reason is not None
    assert runs_command(["awk", text + ' system("id")']) is not None


def test_unknown_options_of_script_programs_are_refused() -> None:
    reason = runs_command(["sed", "--frobnicate", "1e id"])
    assert reason is not None and "--frobnicate" in reason
    assert runs_command(["git", "--weird", "status"]) is not None


def test_an_option_spec_that_takes_a_value_does_not_hide_the_next_rule() -> None:
    assert OptionSpec(role=None, takes_value=True).takes_value
    assert runs_command(["tar", "-C", "dir", "--to-command=x", "-xf", "a.tar"]) is not None
    assert runs_command(["git", "--namespace", "n", "rebase", "--exec", "x"]) is not None


@pytest.mark.parametrize("line", [
    'git -c "$(cat k)" status',                # the key arrives from a file at run time
    "tar $(cat opts) -xf a.tar",               # an unquoted substitution splits into options
    "tar -xf a.tar *",                         # a file named --to-command=... matches the glob
    "tar -xf a.tar -*",
    r"tar -xf a.tar \-*",
    "tar {--to-command=id,-xf,a.tar}",         # bash (also as sh) brace-expands this
    "tar -x{I,f} id a.tar",
    'git "$X" status',                         # the subcommand itself
    'X="-xf a.tar --to-command=id"; tar $X',   # resolved, but split on blanks
    'sed "$S" a.txt',                          # the script of sed
    'env "$X" ls',
])
def test_words_the_shell_expands_at_run_time_are_refused_where_an_option_may_stand(
        line: str) -> None:
    reasons = [c.runs_command for c in parse_commands(line) if c.runs_command]
    assert reasons and "expan" in reasons[-1], (line, reasons)


@pytest.mark.parametrize("line", [
    'git commit -m "$MSG"', "git add ./*", "git add -- *", 'git log "./$F"', "ls *",
    'X=-a; tar -c $X -f b.tar a.txt', "git log HEAD@{1}", 'cat "$F"', "tar -xf a.tar -- *",
])
def test_expansions_that_cannot_become_options_of_a_checked_program_are_accepted(
        line: str) -> None:
    assert [c.runs_command for c in parse_commands(line)] == [None] * len(parse_commands(line))


@pytest.mark.parametrize(("words", "named"), [
    # git runs these keys' values as commands (trailer.*: git commit --trailer, git
    # interpret-trailers; gpg.ssh.defaultKeyCommand: git commit -S with gpg.format=ssh)
    ("git -c trailer.x.command=id commit --trailer x=1", "trailer.x.command"),
    ("git -c trailer.x.cmd=id interpret-trailers", "trailer.x.cmd"),
    ("git -c gpg.ssh.defaultKeyCommand=id commit -S", "gpg.ssh.defaultkeycommand"),
    ("git -c imap.tunnel=id imap-send", "imap.tunnel"),
    ("git config trailer.sign.command id", "trailer.sign.command"),
    ("git archive --remote=ext::id HEAD", "ext::"),
    # ssh reads -o with quotes and backslashes: '"ProxyCommand" id' sets ProxyCommand
    ("ssh -o \"ProxyCommand\"%20id host", "ProxyCommand"),
    ("ssh -o Proxy\\Command=id host", "ProxyCommand"),
    ("ssh -o XAuthLocation=/tmp/x -X host", "XAuthLocation"),
    # gawk calls a built-in by a computed name: f = "sys" "tem"; @f("id")
    ('awk BEGIN{f="sys"%20"tem";@f("id")}', "@name()"),
    # awk writes and reads files the call does not show, like sed's w and r
    ('awk BEGIN{print%20"x"%20>%20"/tmp/f"}', "'>'"),
    ("awk {print>$1} a.txt", "'>'"),
    ('awk BEGIN{getline%20l%20<%20"/etc/shadow"}', "getline"),
    ("git init --template=/tmp/t", "--template"),
    ("vim -E a.txt", "-E"),
    ("vim --remote-send :!id<CR>", "--remote-send"),
    ("nvim -l x.lua", "-l"),
    ("strace -E LD_PRELOAD=/tmp/x.so ls", "-E"),
])
def test_command_running_spellings_found_after_the_first_catalog_are_refused(
        words: str, named: str) -> None:
    argv = [w.replace("%20", " ") for w in words.split()]
    reason = runs_command(argv)
    assert reason is not None and named in reason, (argv, reason)


@pytest.mark.parametrize("program", [
    "$1 > 5 {print $2}", "{print $1; if ($2 > 3) n++} END {print n}", "NR>1{print}",
    "{ while ((getline l) > 0) n++ }", "/a@b.example/",
])
def test_awk_comparisons_and_plain_getline_are_not_refused(program: str) -> None:
    assert runs_command(["awk", program, "a.txt"]) is None


@pytest.mark.parametrize("argv", [
    ["env", "-iu", "ls", "sh", "-c", "id"],     # -u in a cluster takes the next word
    ["env", "--uns", "ls", "sh", "-c", "id"],   # GNU abbreviation of --unset
    ["env", "-a", "ls", "sh", "-c", "id"],      # coreutils 9.5 env --argv0
    ["time", "--out", "ls", "sh", "-c", "id"],
    ["sudo", "--role", "ls", "sh", "-c", "id"],
    ["doas", "-a", "ls", "sh", "-c", "id"],
    ["strace", "-P", "ls", "sh", "-c", "id"],
])
def test_a_wrapper_option_value_is_never_taken_for_the_wrapped_program(argv: list[str]) -> None:
    inner = peel(ShellCommand(words=tuple(argv)))[-1]
    assert inner.words == ("id",) and inner.wrappers[-1] == "sh -c", inner


def test_sudo_environment_assignments_are_judged_like_env_ones() -> None:
    inner = peel(ShellCommand(words=("sudo", "LD_PRELOAD=/tmp/x.so", "ls")))[-1]
    assert inner.runs_command is not None and "LD_PRELOAD" in inner.runs_command


def test_wrappers_nested_past_the_bound_are_a_parse_error_read_in_linear_time() -> None:
    # 12,000 nested env (48 KB) were re-read once per level: 37 s for one decision
    (cmd,) = parse_commands("env " * 12_000 + "ls")
    assert cmd.parse_error is not None and "wrappers" in cmd.parse_error
    assert peel(ShellCommand(words=("env",) * 64 + ("ls",)))[-1].words == ("ls",)


@pytest.mark.parametrize("wrapper", ["env", "sudo"])
def test_any_assignment_env_or_sudo_take_is_judged_not_only_shell_names(wrapper: str) -> None:
    # env and sudo take every word holding "=" as an assignment; bash imports BASH_FUNC_*
    inner = peel(ShellCommand(words=(wrapper, "BASH_FUNC_ls%%=() { id; }", "bash", "-c", "ls")))
    assert all(c.runs_command is not None and "BASH_FUNC_ls%%" in c.runs_command for c in inner)


@pytest.mark.parametrize("line", [
    r"tar $'\x2d-to-command=id' -xf a.tar",     # bash decodes \x2d to '-'
    r"tar $'\055-to-command=id' -xf a.tar",     # octal
    r"tar $'\u002d-to-command=id' -xf a.tar",   # \u
    r"git -c $'core.fsmonito\x72=id' status",
    r"bash -c $'tar --to-command=id\x20-xf a.tar'",
])
def test_ansi_c_strings_are_read_with_every_escape_bash_decodes(line: str) -> None:
    reasons = [c.runs_command for c in parse_commands(line) if c.runs_command]
    assert reasons, line


def test_ansi_c_values_match_bash() -> None:
    (cmd,) = parse_commands(r"printf %s $'\x2d\055\u002d\cA\a\E\?\q' $'ab\0cd' $'\x4g'")
    assert cmd.words[2:] == ("---\x01\x07\x1b?\\q", "ab", "\x04g")


@pytest.mark.parametrize("line", [
    'X=core.fsmon; X+=itor=id; git -c "$X" status',                       # += appends
    'if true; then X=core.fsmonitor=id; else X=a; fi; git -c "$X" status',  # last one written
    'X=a; for X in core.fsmonitor=id; do git -c "$X" status; done',         # for assigns
    'X=a; X=${X/a/core.fsmonitor=id}; git -c "$X" status',                  # stale after ${/}
    'for i in 1 2; do git -c "$X" status; X=core.fsmonitor=id; done',       # later in a loop
    "IFS=.; X=-xf.a.tar.--to-command=id; tar $X",                           # IFS splits on '.'
])
def test_a_variable_is_resolved_only_where_one_literal_assignment_decides_it(line: str) -> None:
    reasons = [c.runs_command for c in parse_commands(line) if c.runs_command]
    assert reasons and "expan" in reasons[-1], (line, reasons)


def test_a_variable_assigned_once_is_still_resolved() -> None:
    (_, cmd) = parse_commands('X=core.fsmonitor=id; git -c "$X" status')
    assert cmd.runs_command is not None and "core.fsmonitor" in cmd.runs_command
    assert [c.runs_command for c in parse_commands("X=-n; git log $X 5")] == [None, None]

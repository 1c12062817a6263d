"""``callgate mcp wrap``: client configurations rewritten behind the proxy, and back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import StdioServerParameters
from tests.integrations.mcp.conftest import CALLGATE, SCRIPTED, Gw, connect, text_of

from callgate._errors import CallgateError
from callgate.integrations.mcp import wrap_config

DESKTOP: dict[str, Any] = {
    "globalShortcut": "",
    "mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
               "env": {"K": "V"}},
        "git": {"command": "uvx", "args": ["mcp-server-git"], "type": "stdio", "disabled": False},
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp"},
    },
}


@pytest.fixture
def config(tmp_path: Path) -> tuple[Path, Path]:
    path, policy = tmp_path / "claude_desktop_config.json", tmp_path / "policy.yaml"
    path.write_text(json.dumps(DESKTOP, indent=2))
    policy.write_text("name: p\nversion: 1\n")
    return path, policy


def test_stdio_servers_are_wrapped_with_their_keys_kept_and_remote_ones_skipped(
        config: tuple[Path, Path]) -> None:
    path, policy = config
    report = wrap_config(path, policy=policy, callgate_path="/opt/cg/bin/callgate")
    assert report.wrapped == ("fs", "git") and report.changed
    assert report.skipped == (("remote", "remote server: put `callgate mcp serve` in front of "
                                         "it"),)
    data = json.loads(path.read_text())
    fs = data["mcpServers"]["fs"]
    assert fs["command"] == "/opt/cg/bin/callgate"
    assert fs["args"] == ["mcp", "proxy", "--policy", str(policy), "--pass-env", "K", "--name",
                          "fs", "--", "npx", "-y", "@modelcontextprotocol/server-filesystem",
                          "/tmp"]
    assert fs["env"] == {"K": "V"} and data["mcpServers"]["git"]["disabled"] is False
    assert data["mcpServers"]["remote"] == DESKTOP["mcpServers"]["remote"]
    assert data["globalShortcut"] == ""


def test_wrapping_twice_writes_nothing_and_undo_restores_the_original(
        config: tuple[Path, Path]) -> None:
    path, policy = config
    wrap_config(path, policy=policy)
    wrapped = path.read_bytes()
    again = wrap_config(path, policy=policy)
    assert not again.changed and again.already == ("fs", "git")
    assert path.read_bytes() == wrapped
    undone = wrap_config(path, undo=True)
    assert undone.wrapped == ("fs", "git")
    assert json.loads(path.read_text()) == DESKTOP
    assert json.loads((path.parent / (path.name + ".callgate-backup")).read_text()) == DESKTOP


def test_an_entry_wrapped_under_another_policy_is_left_as_it_is(
        config: tuple[Path, Path], tmp_path: Path) -> None:
    path, policy = config
    wrap_config(path, policy=policy)
    other = tmp_path / "other.yaml"
    other.write_text("name: o\nversion: 1\n")
    report = wrap_config(path, policy=other)
    assert not report.changed and str(other) not in path.read_text()


def test_claude_json_project_servers_are_wrapped_too(tmp_path: Path) -> None:
    path, policy = tmp_path / ".claude.json", tmp_path / "p.yaml"
    policy.write_text("name: p\nversion: 1\n")
    path.write_text(json.dumps({"projects": {"/work/x": {"mcpServers": {
        "git": {"command": "mcp-server-git"}}}}}))
    report = wrap_config(path, policy=policy)
    assert report.wrapped == ("/work/x:git",)
    entry = json.loads(path.read_text())["projects"]["/work/x"]["mcpServers"]["git"]
    assert entry["args"][-2:] == ["--", "mcp-server-git"]
    wrap_config(path, undo=True)
    restored = json.loads(path.read_text())["projects"]["/work/x"]["mcpServers"]["git"]
    assert restored == {"command": "mcp-server-git"}


@pytest.mark.parametrize(("content", "place"), [
    (b'{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n', ":3:26:"),
    (b'{"mcpServers": {"a": {"command": "\xff"}}}', ":1:35:"),
])
def test_a_file_that_is_not_utf8_json_is_refused_at_its_place_and_left_untouched(
        tmp_path: Path, content: bytes, place: str) -> None:
    path, policy = tmp_path / "c.json", tmp_path / "p.yaml"
    policy.write_text("name: p\nversion: 1\n")
    path.write_bytes(content)
    with pytest.raises(CallgateError, match=place):
        wrap_config(path, policy=policy)
    assert path.read_bytes() == content


@pytest.mark.parametrize(("servers", "message"), [
    ([], "mcpServers must be an object"),
    ({"a": {"command": "x", "args": "-y"}}, "mcpServers.a.args must be a list of strings"),
    ({"a": {"command": ""}}, "mcpServers.a.command must be a non-empty string"),
    ({"a": 3}, "mcpServers.a must be an object"),
])
def test_wrong_shapes_are_refused_with_their_key(tmp_path: Path, servers: Any,
                                                 message: str) -> None:
    path, policy = tmp_path / "c.json", tmp_path / "p.yaml"
    policy.write_text("name: p\nversion: 1\n")
    path.write_text(json.dumps({"mcpServers": servers}))
    before = path.read_bytes()
    with pytest.raises(CallgateError, match=message):
        wrap_config(path, policy=policy)
    assert path.read_bytes() == before


def test_a_symlinked_config_and_a_missing_policy_are_refused(config: tuple[Path, Path],
                                                             tmp_path: Path) -> None:
    path, policy = config
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(CallgateError, match="symlink"):
        wrap_config(link, policy=policy)
    with pytest.raises(CallgateError, match="does not exist"):
        wrap_config(path, policy=tmp_path / "missing.yaml")


def test_the_file_mode_is_kept(config: tuple[Path, Path]) -> None:
    path, policy = config
    os.chmod(path, 0o600)
    wrap_config(path, policy=policy)
    assert path.stat().st_mode & 0o777 == 0o600


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=20)


_variable = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(command=_text, args=st.lists(st.one_of(_text, st.just("--"), st.just("--name")),
                                    min_size=1, max_size=6), name=_text,
       env=st.dictionaries(_variable, _text, max_size=3))
def test_undo_of_wrap_is_the_identity(tmp_path_factory: pytest.TempPathFactory, command: str,
                                      args: list[str], name: str, env: dict[str, str]) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    path, policy = tmp / "c.json", tmp / "p.yaml"
    policy.write_text("name: p\nversion: 1\n")
    original = {"mcpServers": {name: {"command": command, "args": args, "env": env}}}
    path.write_text(json.dumps(original))
    wrap_config(path, policy=policy)
    wrap_config(path, undo=True)
    assert json.loads(path.read_text()) == original


def test_the_cli_wraps_and_undoes(config: tuple[Path, Path]) -> None:
    path, policy = config
    done = subprocess.run([str(CALLGATE), "mcp", "wrap", str(path), "--policy", str(policy)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "wrapped: fs" in done.stdout and "skipped: remote" in done.stdout
    undone = subprocess.run([str(CALLGATE), "mcp", "wrap", str(path), "--undo"],
                            capture_output=True, text=True, check=False)
    assert undone.returncode == 0 and json.loads(path.read_text()) == DESKTOP


def test_an_entry_named_outside_server_names_runs_under_a_name_made_from_it(
        tmp_path: Path) -> None:
    path, policy = tmp_path / "c.json", tmp_path / "p.yaml"
    policy.write_text("name: p\nversion: 1\n")
    path.write_text(json.dumps({"mcpServers": {
        "Google Drive": {"command": "gdrive"}, "Google/Drive": {"command": "gdrive2"},
        "github_": {"command": "gh"}}}))
    report = wrap_config(path, policy=policy)
    assert report.renamed == {"Google Drive": "Google-Drive", "Google/Drive": "Google-Drive-2",
                              "github_": "github"}
    servers = json.loads(path.read_text())["mcpServers"]
    names = [e["args"][e["args"].index("--name") + 1] for e in servers.values()]
    assert names == ["Google-Drive", "Google-Drive-2", "github"]
    shown = subprocess.run([str(CALLGATE), "mcp", "wrap", str(path), "--undo"],
                           capture_output=True, text=True, check=False)
    assert shown.returncode == 0
    assert {e["command"] for e in json.loads(path.read_text())["mcpServers"].values()} == {
        "gdrive", "gdrive2", "gh"}


def test_an_env_key_that_reads_as_an_option_is_refused(tmp_path: Path) -> None:
    path, policy = tmp_path / "c.json", tmp_path / "p.yaml"
    policy.write_text("name: p\nversion: 1\n")
    path.write_text(json.dumps({"mcpServers": {"x": {"command": "x", "env": {"--name": "y"}}}}))
    with pytest.raises(CallgateError, match=r"mcpServers\.x\.env"):
        wrap_config(path, policy=policy)


@pytest.mark.slow
def test_a_wrapped_entry_starts_and_its_env_reaches_the_server_and_nothing_else(gw: Gw) -> None:
    gw.write_policy()
    path = gw.tmp / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"my tools": {
        "command": sys.executable, "args": [str(SCRIPTED)], "env": {"API_TOKEN": "tok-1"}}}}))
    wrap_config(path, policy=gw.policy, audit=gw.audit, callgate_path=str(CALLGATE))
    entry = json.loads(path.read_text())["mcpServers"]["my tools"]
    # what a client does with the entry: its command, its args, its env over the client's own
    params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                   env={**gw.env(OTHER_SECRET="not-for-servers"), **entry["env"]})

    async def main() -> dict[str, str]:
        async with connect(params, "auto") as client:
            return dict(json.loads(text_of(await client.call_tool("env", {}))))

    env = anyio.run(main)
    assert env["API_TOKEN"] == "tok-1" and "OTHER_SECRET" not in env
    assert [d["call"]["tool"] for d in gw.decisions()] == ["mcp__my-tools__env"]

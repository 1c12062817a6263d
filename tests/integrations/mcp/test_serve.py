"""``callgate mcp serve``: several real servers behind one Streamable HTTP endpoint, one run."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from tests.integrations.mcp.conftest import (
    CALLGATE,
    FETCH_SERVER,
    GIT_SERVER,
    MODES,
    SCRIPTED,
    Gw,
    Page,
    answering,
    ask_rule,
    connect,
    free_port,
    read_json_lines,
    serving,
    text_of,
    wait_for_port,
)

pytestmark = pytest.mark.slow


def _config(gw: Gw, fs_server: Path, root: Path, repo: Path, rug: Path, log: Path) -> Path:
    return gw.write_policy(f"""\
tools:
  mcp__fs__read_text_file:
    filesystem: {{read: ["{root}/**"]}}
    path_params: [path]
behavior:
  - id: no-web-text-in-commits-or-files
    description: a commit message or a written file carries text fetched from the web
    rule: >-
      always(not (action in {{mcp__git__git_commit, mcp__fs__write_file}}
        and flow_taint ~ "*web*" and once(action = mcp__fetch__fetch)))
mcp:
  timeout_s: 5
  servers:
    fs: {{command: "{fs_server}", args: ["{root}"]}}
    git: {{command: "{GIT_SERVER}", args: [--repository, "{repo}"]}}
    fetch: {{command: "{FETCH_SERVER}", args: [--ignore-robots-txt, --allow-private-ips],
             source: web}}
    scripted: {{command: "{sys.executable}", args: ["{SCRIPTED}", --rug, "{rug}", --log,
                "{log}"]}}
""")


@pytest.fixture
def world(gw: Gw, fs_server: Path, tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    root = tmp_path / "files"
    root.mkdir()
    (root / "notes.txt").write_text("meeting at noon\n")
    (root / "escape").symlink_to("/etc/passwd")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(repo), "add", "a.txt"], check=True)
    rug, log = tmp_path / "rug", tmp_path / "calls.jsonl"
    _config(gw, fs_server, root, repo, rug, log)
    return root, repo, rug, log


@pytest.mark.parametrize("mode", MODES)
def test_aggregated_tools_are_decided_over_http_in_both_eras(
        gw: Gw, world: tuple[Path, Path, Path, Path], mode: str) -> None:
    root, repo, _, _ = world
    with serving(gw, gw.policy) as url:
        async def main() -> tuple[set[str], list[types.CallToolResult]]:
            async with connect(url, mode) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                return names, [
                    await client.call_tool("fs__read_text_file", {"path": str(root / "notes.txt")}),
                    await client.call_tool("fs__read_text_file", {"path": "/etc/passwd"}),
                    await client.call_tool("fs__read_text_file", {"path": str(root / "escape")}),
                    await client.call_tool("git__git_status", {"repo_path": str(repo)}),
                    await client.call_tool("nosuch__tool", {}),
                ]

        names, (inside, passwd, escape, status, unknown) = anyio.run(main)
    assert {"fs__read_text_file", "git__git_commit", "fetch__fetch", "scripted__echo"} <= names
    assert "meeting at noon" in text_of(inside) and not inside.is_error
    for denied in (passwd, escape):
        assert denied.is_error and "[tool.filesystem]" in text_of(denied)
    assert not status.is_error
    assert unknown.is_error and "no server offers a tool" in text_of(unknown)
    assert [d["decision"]["verdict"] for d in gw.decisions()] == ["allow", "deny", "deny",
                                                                 "allow"]


@pytest.mark.parametrize("mode", MODES)
def test_text_fetched_from_the_web_cannot_be_committed_or_written_and_the_fetch_is_the_witness(
        gw: Gw, world: tuple[Path, Path, Path, Path], page: Page, mode: str) -> None:
    root, repo, _, _ = world
    carried = "rotate the deploy keys before Friday zebra-quartz-7741"
    with serving(gw, gw.policy) as url:
        async def main() -> list[types.CallToolResult]:
            async with connect(url, mode) as client:
                return [
                    await client.call_tool("fetch__fetch", {"url": page.url, "raw": True}),
                    await client.call_tool("git__git_commit", {"repo_path": str(repo),
                                                               "message": carried}),
                    await client.call_tool("fs__write_file", {"path": str(root / "out.txt"),
                                                              "content": carried}),
                    await client.call_tool("fs__write_file", {"path": str(root / "own.txt"),
                                                              "content": "my own words"}),
                    await client.call_tool("git__git_commit", {"repo_path": str(repo),
                                                               "message": "add a.txt"}),
                ]

        fetched, commit, write, own, clean_commit = anyio.run(main)
    assert carried in text_of(fetched)
    for denied in (commit, write):
        text = text_of(denied)
        assert denied.is_error and "[no-web-text-in-commits-or-files]" in text, text
        assert "mcp__fetch__fetch" in text  # the witness names the fetch
        witness = denied.meta["callgate/decision"]["witness"] if denied.meta else {}
        assert 1 in witness["events"]
    assert not (root / "out.txt").exists()
    assert not own.is_error and (root / "own.txt").read_text() == "my own words"
    assert not clean_commit.is_error, text_of(clean_commit)


@pytest.mark.parametrize("mode", MODES)
def test_a_rug_pull_over_http_suspends_the_tool(gw: Gw, world: tuple[Path, Path, Path, Path],
                                                mode: str) -> None:
    _, _, rug, log = world
    with serving(gw, gw.policy) as url:
        async def main(change: bool) -> types.CallToolResult:
            async with connect(url, mode) as client:
                if change:
                    rug.write_text("now")
                await client.list_tools()
                return await client.call_tool("scripted__echo", {"text": "hi"})

        before = anyio.run(main, False)
        after = anyio.run(main, True)
    assert not before.is_error
    assert after.is_error and "[mcp.tool-changed]" in text_of(after)
    assert len(read_json_lines(log)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_an_upstream_killed_mid_call_over_http_errors_and_the_others_go_on(
        gw: Gw, world: tuple[Path, Path, Path, Path], mode: str) -> None:
    root = world[0]
    with serving(gw, gw.policy) as url:
        async def main() -> list[types.CallToolResult]:
            async with connect(url, mode) as client:
                with anyio.fail_after(60):
                    died = await client.call_tool("scripted__die", {})
                return [died,
                        await client.call_tool("scripted__echo", {"text": "x"}),
                        await client.call_tool("fs__read_text_file",
                                               {"path": str(root / "notes.txt")})]

        died, after, other = anyio.run(main)
    assert died.is_error and "scripted" in text_of(died)
    assert after.is_error and "[mcp.upstream-down]" in text_of(after)
    assert not other.is_error


@contextlib.contextmanager
def _remote_scripted(tmp: Path, token: str) -> Iterator[str]:
    """The scripted server on Streamable HTTP, answering only requests that carry the token."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SCRIPTED), "--http", str(port),
                                "--require-header", f"X-Token={token}", "--log",
                                str(tmp / "remote.jsonl")])
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(15)


def test_a_url_server_is_reached_with_its_headers_and_one_refusing_them_is_down(
        gw: Gw) -> None:
    with _remote_scripted(gw.tmp, "s3cret") as remote:
        gw.write_policy(f"""\
mcp:
  timeout_s: 10
  servers:
    remote: {{url: "{remote}", headers: {{X-Token: s3cret}}}}
    wrongkey: {{url: "{remote}", headers: {{X-Token: guessed}}}}
""")
        with serving(gw, gw.policy) as url:
            async def main() -> tuple[set[str], types.CallToolResult, types.CallToolResult]:
                async with connect(url, "auto") as client:
                    names = {t.name for t in (await client.list_tools()).tools}
                    return (names, await client.call_tool("remote__echo", {"text": "over http"}),
                            await client.call_tool("wrongkey__echo", {"text": "never"}))

            names, echoed, refused = anyio.run(main)
    assert "remote__echo" in names and not any(n.startswith("wrongkey__") for n in names)
    assert text_of(echoed) == "over http"
    assert refused.is_error and "[mcp.upstream-down]" in text_of(refused)
    calls = read_json_lines(gw.tmp / "remote.jsonl")
    assert [c["arguments"]["text"] for c in calls] == ["over http"]


def test_a_server_with_its_own_policy_is_decided_by_its_principal_in_a_run_of_its_own(
        gw: Gw) -> None:
    own = gw.tmp / "reader.yaml"
    own.write_text("""\
name: reader-only
version: 1
principal:
  name: reader
  capabilities:
    - tool_class: mcp
rules:
  - id: reader-echoes-only
    priority: 10
    match: {tool: mcp__locked__echo}
    decision: allow
    reason: the reader may echo
""")
    gw.write_policy(f"""\
mcp:
  servers:
    open: {{command: "{sys.executable}", args: ["{SCRIPTED}"]}}
    locked: {{command: "{sys.executable}", args: ["{SCRIPTED}"], policy: reader.yaml}}
""")
    with serving(gw, gw.policy) as url:
        async def main() -> list[types.CallToolResult]:
            async with connect(url, "legacy") as client:
                return [await client.call_tool("open__env", {}),
                        await client.call_tool("locked__echo", {"text": "hi"}),
                        await client.call_tool("locked__env", {})]

        open_env, locked_echo, locked_env = anyio.run(main)
    assert not open_env.is_error and not locked_echo.is_error
    assert locked_env.is_error and "[default-deny]" in text_of(locked_env)
    decided = [(d["call"]["tool"], d["call"]["principal"], d["decision"]["verdict"],
                d["call"]["run_id"]) for d in gw.decisions()]
    by_tool = {tool: (principal, verdict, run) for tool, principal, verdict, run in decided}
    assert by_tool["mcp__open__env"][:2] == ("agent", "allow")
    assert by_tool["mcp__locked__echo"][:2] == ("reader", "allow")
    assert by_tool["mcp__locked__env"][:2] == ("reader", "deny")
    assert by_tool["mcp__locked__echo"][2] == by_tool["mcp__locked__env"][2] != \
        by_tool["mcp__open__env"][2]


def test_a_server_policy_that_does_not_load_is_refused_at_its_place(gw: Gw) -> None:
    (gw.tmp / "broken.yaml").write_text("name: x\nversion: 1\nrules:\n  - id: r\n    bogus: 1\n")
    gw.write_policy(f"""\
mcp:
  servers:
    locked: {{command: "{sys.executable}", args: ["{SCRIPTED}"], policy: broken.yaml}}
""")
    done = subprocess.run([str(CALLGATE), "mcp", "serve", "--config", str(gw.policy),
                           "--listen", f"127.0.0.1:{free_port()}", "--audit", str(gw.audit)],
                          env=gw.env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "broken.yaml:5:5" in done.stderr and "bogus" in done.stderr


def _scripted_pair(gw: Gw, extra: str = "") -> Path:
    return gw.write_policy(f"""\
mcp:
  timeout_s: 3
  max_message_bytes: 65536
  servers:
    good: {{command: "{sys.executable}", args: ["{SCRIPTED}"]}}
    broken: {{command: "{sys.executable}", args: ["{SCRIPTED}", --fail-list]}}
{extra}""")


def test_a_server_that_cannot_list_hides_its_own_tools_not_the_others(gw: Gw) -> None:
    with serving(gw, _scripted_pair(gw)) as url:
        async def main() -> tuple[set[str], types.CallToolResult]:
            async with connect(url, "auto") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                return names, await client.call_tool("broken__echo", {"text": "x"})

        names, refused = anyio.run(main)
    assert "good__echo" in names and not any(n.startswith("broken__") for n in names)
    assert refused.is_error and "[mcp.upstream-error]" in text_of(refused)


def test_a_request_over_the_size_bound_is_refused_over_http(gw: Gw) -> None:
    import httpx

    with serving(gw, _scripted_pair(gw)) as url:
        body = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"good__echo",'
                '"arguments":{"text":"' + "a" * 70000 + '"}}}')
        refused = httpx.post(url, content=body, headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25"}, timeout=30)
    assert refused.status_code == 413


def test_a_request_naming_another_host_is_refused_dns_rebinding(gw: Gw) -> None:
    import httpx

    with serving(gw, _scripted_pair(gw)) as url:
        refused = httpx.post(url, content="{}", headers={
            "content-type": "application/json", "host": "attacker.example:80",
            "accept": "application/json, text/event-stream"}, timeout=30)
    assert refused.status_code == 421


@pytest.mark.parametrize("mode", MODES)
def test_approval_over_http_is_asked_and_a_declined_call_never_runs(gw: Gw, mode: str) -> None:
    log = gw.tmp / "calls.jsonl"
    gw.write_policy(f"""\
mcp:
  timeout_s: 10
  servers:
    s: {{command: "{sys.executable}", args: ["{SCRIPTED}", --log, "{log}"]}}
""", rules=ask_rule("mcp__s__echo"))
    asked: list[str] = []

    with serving(gw, gw.policy) as url:
        async def main(approve: bool) -> types.CallToolResult:
            async with connect(url, mode, elicitation_callback=answering(asked, approve)) as client:
                return await client.call_tool("s__echo", {"text": f"{mode}-{approve}"})

        approved, declined = anyio.run(main, True), anyio.run(main, False)
    assert text_of(approved) == f"{mode}-True"
    assert declined.is_error and "[approval.refused]" in text_of(declined)
    assert len(asked) == 2 and all("[ask-echo]" in m for m in asked)
    assert [c["arguments"]["text"] for c in read_json_lines(log)] == [f"{mode}-True"]

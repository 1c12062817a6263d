"""What passes the gateway besides tool calls, in both eras: pings, progress, cancellation,
change notifications, prompts and completions; resource reads as kernel decisions; tools hidden
from a principal that can never call them."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from tests.integrations.mcp.conftest import MODES, SCRIPTED, Gw, connect, read_json_lines, text_of

from callgate.audit import AuditStore

pytestmark = pytest.mark.slow


def _scripted(gw: Gw) -> Any:
    return gw.proxy("scripted", sys.executable, str(SCRIPTED), "--rug", str(gw.tmp / "rug"),
                    "--log", str(gw.tmp / "calls.jsonl"))


@pytest.mark.parametrize("mode", MODES)
def test_ping_progress_prompts_and_completions_pass_through(gw: Gw, mode: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def main() -> tuple[types.CallToolResult, list[str], str, list[str]]:
        async with connect(_scripted(gw), mode) as client:
            if mode == "legacy":  # ping is gone from the 2026-07-28 revision
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    pong = await client.send_ping()
                assert isinstance(pong, types.EmptyResult)
            slow = await client.call_tool("slow", {"text": "done"}, progress_callback=on_progress)
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            prompt = await client.get_prompt("greet", {"name": "alice"})
            completed = await client.complete(types.PromptReference(type="ref/prompt",
                                                                    name="greet"),
                                              {"name": "name", "value": "al"})
            said = prompt.messages[0].content
            return slow, prompts, getattr(said, "text", ""), completed.completion.values

    slow, prompts, said, completed = anyio.run(main)
    assert not slow.is_error and text_of(slow) == "done"
    assert [p[0] for p in progress] == [1, 2, 3] and progress[-1][2] == "step 3"
    assert prompts == ["greet"] and said == "Say hello to alice."
    assert completed == ["alice", "albert"]
    # the prompt's text went before the model: the run's log has it as an event
    store = AuditStore.open(gw.audit)
    try:
        events = [r.payload["data"] for run in store.run_ids() for r in store.records(run)
                  if r.kind == "system" and r.payload.get("kind") == "event"
                  and r.payload["data"].get("action") == "mcp_prompt"]
    finally:
        store.close()
    assert [e["args"]["prompt"] for e in events] == ["greet"]
    assert "Say hello to alice." in events[0]["output"]


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_call_is_cancelled_upstream_and_its_end_recorded(gw: Gw, mode: str) -> None:
    async def main() -> types.CallToolResult:
        async with connect(_scripted(gw), mode) as client:
            with anyio.move_on_after(1.5):
                await client.call_tool("wait", {})
            return await client.call_tool("echo", {"text": "after"})

    after = anyio.run(main)
    assert text_of(after) == "after"
    log = read_json_lines(gw.tmp / "calls.jsonl")
    assert {"cancelled": "wait"} in log
    (wait, echo) = gw.results()
    assert wait["status"] == "error" and wait["error"] == "cancelled by the client"
    assert echo["status"] == "ok"


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_list_change_reaches_the_client_and_the_changed_tool_is_suspended(
        gw: Gw, mode: str) -> None:
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.set()

    async def main() -> tuple[list[str], types.CallToolResult]:
        async with connect(_scripted(gw), mode, cache=None, message_handler=on_message
                           ) as client:
            await client.list_tools()
            if mode == "legacy":
                await client.call_tool("change", {})
                with anyio.fail_after(20):
                    await heard.wait()
            else:
                async with client.listen(tools_list_changed=True) as events:
                    await client.call_tool("change", {})
                    with anyio.fail_after(20):
                        event = await events.__anext__()
                    assert type(event).__name__ == "ToolsListChanged"
            names = [t.name for t in (await client.list_tools()).tools]
            return names, await client.call_tool("echo", {"text": "x"})

    names, echo = anyio.run(main)
    assert "echo" not in names and "change" in names
    assert echo.is_error and "[mcp.tool-changed]" in text_of(echo)


@pytest.mark.parametrize("mode", MODES)
def test_resource_reads_are_decided_audited_and_observed(gw: Gw, mode: str) -> None:
    gw.write_policy(rules="""\
  - id: no-secret-notes
    priority: 10
    match: {tool: mcp__scripted__read_resource, parameters: {uri: {pattern: "secret"}}}
    decision: deny
    reason: the secret notes stay on the server
""")

    async def main() -> tuple[list[str], str, str]:
        async with connect(_scripted(gw), mode) as client:
            uris = [str(r.uri) for r in (await client.list_resources()).resources]
            public = await client.read_resource("notes://public")
            try:
                await client.read_resource("notes://secret")
            except MCPError as exc:
                refused = str(exc)
            else:
                refused = ""
            return uris, getattr(public.contents[0], "text", ""), refused

    uris, public, refused = anyio.run(main)
    assert uris == ["notes://public", "notes://secret"]
    assert public == "the public notes"
    assert "[no-secret-notes]" in refused and "stay on the server" in refused
    reads = [e["read"] for e in read_json_lines(gw.tmp / "calls.jsonl") if "read" in e]
    assert reads == ["notes://public"]  # the denied read never reached the server
    decisions = [(d["call"]["tool"], d["call"]["action"], d["decision"]["verdict"])
                 for d in gw.decisions()]
    assert decisions == [("mcp__scripted__read_resource", "read", "allow"),
                         ("mcp__scripted__read_resource", "read", "deny")]
    (result,) = gw.results()
    assert result["output"] == "the public notes"


def test_hide_denied_drops_the_tools_the_principal_can_never_call(gw: Gw) -> None:
    gw.write_policy("mcp:\n  hide_denied: true\n", rules="""\
  - id: never-env
    priority: 10
    match: {tool: mcp__scripted__env}
    decision: deny
    reason: the environment is private
  - id: no-echo-of-secrets
    priority: 20
    match: {tool: mcp__scripted__echo, parameters: {text: {pattern: "secret"}}}
    decision: deny
    reason: depends on the arguments, so the tool stays listed
""")

    async def main() -> tuple[list[str], types.CallToolResult]:
        async with connect(_scripted(gw), "auto") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, await client.call_tool("env", {})

    names, env = anyio.run(main)
    assert "env" not in names and "echo" in names and "slow" in names
    assert env.is_error and "[never-env]" in text_of(env)  # hidden is not callable either

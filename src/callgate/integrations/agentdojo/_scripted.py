"""A scripted model: the LLM's part of an AgentDojo pipeline played from a list of calls.

AgentDojo's ``GroundTruthPipeline`` runs a task's ground-truth calls itself, so no other element
(a defense in the tool loop) ever sees them. ``ScriptedModel`` stands where the LLM stands
instead: each time it is asked it answers with the next scripted call as an assistant message
(one call per message, each seeing the result of the one before, as the ground-truth pipeline
orders them), and once the script is spent, with its final text answer. Whatever ran the calls
(``ToolsExecutor``, ``KernelGate``) put their results between its turns.

The script is a list of ``FunctionCall`` or a function of the task environment returning one,
evaluated when a run starts (no assistant message yet), on the environment the run starts from:
what ``GroundTruthPipeline`` hands to ``ground_truth``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentdojo.agent_pipeline.base_pipeline_element import (  # type: ignore[import-untyped]  # no py.typed
    BasePipelineElement,
)
from agentdojo.functions_runtime import (  # type: ignore[import-untyped]  # no py.typed
    EmptyEnv,
    FunctionCall,
    FunctionsRuntime,
    TaskEnvironment,
)
from agentdojo.types import (  # type: ignore[import-untyped]  # no py.typed
    ChatAssistantMessage,
    ChatMessage,
    text_content_block_from_string,
)

__all__ = ["Script", "ScriptedModel"]

#: The calls a scripted model makes: a list, or a function of the environment a run starts from.
Script = Sequence[FunctionCall] | Callable[[TaskEnvironment], Sequence[FunctionCall]]
_NO_ENV = EmptyEnv()


class ScriptedModel(BasePipelineElement):  # type: ignore[misc]  # AgentDojo's base is untyped
    """Plays the model: one assistant message per scripted call, then the text ``answer``.

    Each call is a copy of the scripted one (the task's own objects stay as they were), given
    the id ``scripted-N`` when it has none. ``calls`` are the calls of the latest run.
    """

    name = "scripted-model"

    def __init__(self, script: Script, answer: str = "") -> None:
        self._script = script
        self.answer = answer
        self.calls: list[FunctionCall] = []

    def start(self, env: TaskEnvironment) -> list[FunctionCall]:
        """The run's calls, from the script and the environment the run starts from."""
        planned = self._script(env) if callable(self._script) else self._script
        calls = []
        for index, call in enumerate(planned):
            copy = call.model_copy(deep=True)
            if copy.id is None:
                copy.id = f"scripted-{index}"
            calls.append(copy)
        return calls

    def query(self, query: str, runtime: FunctionsRuntime, env: TaskEnvironment = _NO_ENV,
              messages: Sequence[ChatMessage] = (), extra_args: dict[str, Any] | None = None,
              ) -> tuple[str, FunctionsRuntime, TaskEnvironment, Sequence[ChatMessage],
                         dict[str, Any]]:
        """AgentDojo's element interface: ``messages`` with the model's next message added."""
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn == 0:
            self.calls = self.start(env)
        if turn < len(self.calls):
            reply = ChatAssistantMessage(role="assistant",
                                         content=[text_content_block_from_string("")],
                                         tool_calls=[self.calls[turn]])
        else:
            reply = ChatAssistantMessage(role="assistant",
                                         content=[text_content_block_from_string(self.answer)],
                                         tool_calls=None)
        return query, runtime, env, [*messages, reply], {} if extra_args is None else extra_args

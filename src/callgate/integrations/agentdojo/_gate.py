"""AgentDojo tool calls through the kernel: the element that stands where ``ToolsExecutor`` does.

A tool call ``F(args)`` of the model's last assistant message is the kernel call ``F`` of class
``agentdojo``, action ``call``, with ``args`` as its parameters. An allowed call runs with
AgentDojo's own ``FunctionsRuntime`` against the task environment, its result formatted as
``ToolsExecutor`` formats it (YAML by default) and reported to the kernel, so taint, guards and
behavioural statements see the text the model reads. A denied call (and one that requires
approval: nobody can approve here) does not run; the model reads the decision's reasons and
witness as the tool's error. The gate decides nothing itself: anything that goes wrong inside it
is a refusal, recorded by the kernel as far as it still can be (fail closed).

One kernel per task run: ``KernelGate.begin`` builds it from the factory and records the system
and user prompts (``Kernel.note``) before the first call; ``KernelGate.finish`` records the final
answer, ends the run and closes the kernel. ``FinishRun`` calls it after the tool loop;
``defended_pipeline`` puts both in AgentDojo's usual pipeline.
"""

from __future__ import annotations

import contextlib
import time
from ast import literal_eval
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentdojo.agent_pipeline.agent_pipeline import (  # type: ignore[import-untyped]  # no py.typed
    AgentPipeline,
    load_system_message,
)
from agentdojo.agent_pipeline.base_pipeline_element import (  # type: ignore[import-untyped]  # no py.typed
    BasePipelineElement,
)
from agentdojo.agent_pipeline.basic_elements import (  # type: ignore[import-untyped]  # no py.typed
    InitQuery,
    SystemMessage,
)
from agentdojo.agent_pipeline.tool_execution import (  # type: ignore[import-untyped]  # no py.typed
    ToolsExecutionLoop,
    is_string_list,
    tool_result_to_str,
)
from agentdojo.functions_runtime import (  # type: ignore[import-untyped]  # no py.typed
    EmptyEnv,
    FunctionCall,
    FunctionsRuntime,
    TaskEnvironment,
)
from agentdojo.types import (  # type: ignore[import-untyped]  # no py.typed
    ChatMessage,
    ChatToolResultMessage,
    get_text_content_as_str,
    text_content_block_from_string,
)

from callgate._model import Decision, Reason, ToolResult
from callgate.integrations._refusal import refusal_text
from callgate.kernel import Kernel
from callgate.temporal import Violation

__all__ = ["TOOL_CLASS", "FinishRun", "GatedCall", "KernelGate", "call_of", "defended_pipeline"]

#: The tool class of every AgentDojo tool call in policies, the audit log and the trace.
TOOL_CLASS = "agentdojo"
#: The element's own check name on the reasons it hands the kernel (``Kernel.refuse``).
_CHECK = "agentdojo-gate"
_NO_ENV = EmptyEnv()
_UNKNOWN = "<unknown tool>"


def call_of(function_call: FunctionCall) -> dict[str, Any]:
    """The kernel call for an AgentDojo tool call (arguments as the tool will get them)."""
    return {"tool": function_call.function, "tool_class": TOOL_CLASS, "action": "call",
            "parameters": dict(function_call.args)}


@dataclass(frozen=True)
class GatedCall:
    """One tool call of a run as the gate handled it: the kernel's decision, and what the tool
    returned when it ran (``result`` is None when it did not run)."""

    function: str
    arguments: Mapping[str, Any]
    decision: Decision
    result: ToolResult | None

    @property
    def ran(self) -> bool:
        """Whether the tool was run against the environment."""
        return self.result is not None


def _text(message: ChatMessage) -> str:
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else str(get_text_content_as_str(content))


def _first(messages: Sequence[ChatMessage], role: str) -> str | None:
    return next((_text(m) for m in messages if m.get("role") == role), None)


def _tool_message(call: FunctionCall, output: str, error: str | None) -> ChatToolResultMessage:
    return ChatToolResultMessage(role="tool", content=[text_content_block_from_string(output)],
                                 tool_call_id=getattr(call, "id", None), tool_call=call,
                                 error=error)


def _lists_as_lists(call: FunctionCall) -> None:
    # What ToolsExecutor does before it runs a call (in place, so AgentDojo's checkers read the
    # same trace): an argument that spells a list literal is the list. Done before the kernel
    # sees the call, so what is checked is what runs.
    for name, value in list(call.args.items()):
        if isinstance(value, str) and is_string_list(value):
            call.args[name] = literal_eval(value)


class KernelGate(BasePipelineElement):  # type: ignore[misc]  # AgentDojo's base is untyped (Any)
    """Executes the tool calls of the last assistant message, each one only if the kernel allows.

    ``kernels`` builds the kernel of one task run (called by ``begin``); ``formatter`` turns a
    tool's return value into the text the model reads (AgentDojo's ``tool_result_to_str`` by
    default, as for ``ToolsExecutor``). ``calls`` and ``violations`` describe the latest run.
    """

    name = "callgate"

    def __init__(self, kernels: Callable[[], Kernel], *,
                 formatter: Callable[[Any], str] = tool_result_to_str) -> None:
        self._kernels = kernels
        self._formatter = formatter
        self._kernel: Kernel | None = None
        self._open = False  # a run has begun and not finished
        self._broken: str | None = None
        self._names: dict[int, str] = {}
        self.calls: list[GatedCall] = []
        self.violations: list[Violation] = []

    @property
    def kernel(self) -> Kernel | None:
        """The kernel of the run in progress, if one is."""
        return self._kernel

    # -- the run ----------------------------------------------------------------------------

    def begin(self, messages: Sequence[ChatMessage]) -> None:
        """Start a task run: a kernel from the factory, with the system and user prompts of
        ``messages`` recorded. A run still open (a pipeline that broke off) is ended first."""
        if self._open:
            self._end()
        self._broken, self._names, self.calls, self.violations = None, {}, [], []
        self._open = True
        try:
            self._kernel = self._kernels()
        except Exception as exc:  # no kernel: every call of this run is refused
            self._broken = f"{type(exc).__name__}: {exc}"
            return
        for action, role, taint in (("system_prompt", "system", ("system",)),
                                    ("user_prompt", "user", ("user-provided",))):
            text = _first(messages, role)
            if text is not None:
                self._note(action, {"text": text}, output=text, taint=taint)

    def finish(self, messages: Sequence[ChatMessage]) -> list[Violation]:
        """End the run: record the model's final text answer (when the last message is one),
        end the kernel's run and close it. Returns the violations ``end_run`` reported."""
        if not self._open:
            self.begin(messages)  # a run without tool calls still records its prompts
        last = messages[-1] if messages else None
        answered = last is not None and last.get("role") == "assistant" and \
            not last.get("tool_calls")
        if answered and self._kernel is not None:
            self._note("answer", {"text": _text(last), "final": True})
        return self._end()

    def _end(self) -> list[Violation]:
        kernel, self._kernel, self._open = self._kernel, None, False
        if kernel is not None:
            self.violations = kernel.end_run()
            kernel.close()
        return self.violations

    def _note(self, action: str, args: Mapping[str, Any], *, output: str | None = None,
              taint: Sequence[str] = ()) -> None:
        assert self._kernel is not None
        before = self._kernel.trace_length
        self._kernel.note(action, args, output=output, taint=taint)
        self._name_events(before, action)

    def _name_events(self, before: int, name: str) -> None:
        assert self._kernel is not None
        for seq in range(before + 1, self._kernel.trace_length + 1):
            self._names[seq] = name

    # -- the pipeline element ---------------------------------------------------------------

    def query(self, query: str, runtime: FunctionsRuntime, env: TaskEnvironment = _NO_ENV,
              messages: Sequence[ChatMessage] = (), extra_args: dict[str, Any] | None = None,
              ) -> tuple[str, FunctionsRuntime, TaskEnvironment, Sequence[ChatMessage],
                         dict[str, Any]]:
        """AgentDojo's element interface: ``messages`` with one tool result per tool call of
        the last assistant message appended (nothing to do when there is none)."""
        extra = {} if extra_args is None else extra_args
        last = messages[-1] if messages else None
        if last is None or last.get("role") != "assistant" or not last.get("tool_calls"):
            return query, runtime, env, messages, extra
        first_turn = not any(m.get("role") == "tool" for m in messages)
        if first_turn or not self._open:
            self.begin(messages)  # the first tool turn of a run
        results = [self._handle(call, runtime, env) for call in last["tool_calls"]]
        return query, runtime, env, [*messages, *results], extra

    def _handle(self, call: FunctionCall, runtime: FunctionsRuntime,
                env: TaskEnvironment) -> ChatToolResultMessage:
        """One call: decided, then run and reported, or refused with the reasons."""
        try:
            decision = self._decide(call)
        except Exception as exc:
            decision = self._internal_error(call, exc)
        if not decision.allowed:
            if decision.verdict == "require-approval":
                self._not_approved(decision)
            self.calls.append(GatedCall(_name(call), _arguments(call), decision, None))
            return _tool_message(call, "", self.explain(decision, _name(call)))
        return self._run(call, decision, runtime, env)

    def _not_approved(self, decision: Decision) -> None:
        """Tell the kernel that a call waiting for approval did not run: ``check`` took it as
        run, and nobody can approve it here."""
        if self._kernel is not None:
            with contextlib.suppress(Exception):  # the call stays unrun whatever the record
                self._kernel.report(decision.call_id, status="denied",
                                    error="approval.denied: no one can approve calls in this "
                                          "run; the call was not run")

    def _decide(self, call: FunctionCall) -> Decision:
        kernel = self._kernel
        if kernel is None:  # the factory failed: nothing can decide, so nothing runs
            return Decision(verdict="deny", reasons=(Reason(
                id="internal.error", check=_CHECK,
                message=f"callgate could not start this run: {self._broken}"),))
        _lists_as_lists(call)
        request = call_of(call)
        nested = sorted(k for k, v in call.args.items() if isinstance(v, FunctionCall))
        before = kernel.trace_length
        if nested:
            # FunctionsRuntime would run a call given as an argument before the tool, unseen by
            # the kernel: such a call is refused, never run.
            request["parameters"] = _arguments(call)
            decision = kernel.refuse(request, Reason(
                id="agentdojo.nested-call", check=_CHECK, message=f"argument(s) "
                f"{', '.join(nested)} are tool calls, which would run without a decision"))
        else:
            decision = kernel.check(request)
        self._name_events(before, call.function)
        return decision

    def _internal_error(self, call: FunctionCall, exc: Exception) -> Decision:
        """A deny for an error of the gate itself, audited through ``Kernel.refuse`` when the
        kernel still answers."""
        reason = Reason(id="internal.error", check=_CHECK,
                        message=f"the callgate gate failed: {type(exc).__name__}: {exc}")
        kernel = self._kernel
        if kernel is not None:
            # ``refuse`` never raises; should it, the deny below stands without its record
            with contextlib.suppress(Exception):
                return kernel.refuse({"tool": _name(call), "tool_class": TOOL_CLASS,
                                      "action": "call", "parameters": {}}, reason)
        return Decision(verdict="deny", reasons=(reason,))

    def _run(self, call: FunctionCall, decision: Decision, runtime: FunctionsRuntime,
             env: TaskEnvironment) -> ChatToolResultMessage:
        """Run an allowed call with AgentDojo's runtime and report its result to the kernel;
        the model reads what the kernel recorded (an output it withheld is not shown)."""
        assert self._kernel is not None
        started = time.perf_counter()
        try:
            value, error = runtime.run_function(env, call.function, call.args)
            output = self._formatter(value)
        except Exception as exc:  # the tool or the formatter failed: an error result
            output, error = "", f"{type(exc).__name__}: {exc}"
        elapsed = (time.perf_counter() - started) * 1000
        try:
            result = self._kernel.report(decision.call_id, status="error" if error else "ok",
                                         output=output, error=error, duration_ms=elapsed)
        except Exception as exc:
            result = ToolResult(call_id=decision.call_id, status="error",
                                error=f"internal.error: the result could not be recorded "
                                      f"({type(exc).__name__}: {exc}); its output is withheld")
        self.calls.append(GatedCall(call.function, dict(call.args), decision, result))
        shown = result.output if isinstance(result.output, str) else ""
        return _tool_message(call, shown, result.error)

    def explain(self, decision: Decision, tool: str) -> str:
        """What the model reads when a call is refused: the ids, the reasons, the witness."""
        notes = ["No one can approve calls in this run, so it counts as denied."] \
            if decision.verdict == "require-approval" else []
        return refusal_text(decision, tool, self._names, ran="; it was not run", notes=notes)


def _name(call: Any) -> str:
    name = getattr(call, "function", None)
    return name if isinstance(name, str) and name else _UNKNOWN


def _arguments(call: Any) -> dict[str, Any]:
    args = getattr(call, "args", None)
    if not isinstance(args, Mapping):
        return {}
    return {k: v.model_dump() if isinstance(v, FunctionCall) else v for k, v in args.items()}


class FinishRun(BasePipelineElement):  # type: ignore[misc]  # AgentDojo's base is untyped (Any)
    """Placed after the tool loop: records the final answer and ends the gate's run."""

    def __init__(self, gate: KernelGate) -> None:
        self.gate = gate

    def query(self, query: str, runtime: FunctionsRuntime, env: TaskEnvironment = _NO_ENV,
              messages: Sequence[ChatMessage] = (), extra_args: dict[str, Any] | None = None,
              ) -> tuple[str, FunctionsRuntime, TaskEnvironment, Sequence[ChatMessage],
                         dict[str, Any]]:
        """AgentDojo's element interface; the messages pass unchanged."""
        self.gate.finish(messages)
        return query, runtime, env, messages, {} if extra_args is None else extra_args


def defended_pipeline(model: BasePipelineElement, gate: KernelGate, *,
                      system_message: str | None = None, max_iters: int = 15) -> AgentPipeline:
    """AgentDojo's usual pipeline with the gate where ``ToolsExecutor`` stands: the system
    message (AgentDojo's default unless given), the user's query, ``model``, the tool loop
    ``[gate, model]`` (at most ``max_iters`` turns, AgentDojo's default 15), ``FinishRun``."""
    system = load_system_message(None) if system_message is None else system_message
    return AgentPipeline([SystemMessage(system), InitQuery(), model,
                          ToolsExecutionLoop([gate, model], max_iters=max_iters),
                          FinishRun(gate)])

"""AgentDojo runs as the monitor lives them: prompts, decisions at each call, results after.

A run's ``messages`` hold the system and user prompts, assistant turns (text and/or
``tool_calls`` of ``function``, ``args``, ``id``) and tool turns (``content``, ``tool_call_id``,
``error``). Both published variants are read: ``content`` a string (or null), or a list of blocks
``{"type": "text", "content": …}`` (thinking blocks are the model's own reasoning, not content).

``steps`` gives the run in the order a reference monitor sees it:

* the system prompt, the user prompt and every text the assistant writes are events
  (``system_prompt`` and ``user_prompt`` with ``text``, their content indexed as written by
  ``system`` and ``user-provided``; ``answer`` with ``text`` and ``final``, true for the run's
  last answer);
* each tool call is an event when the assistant makes it (all calls of one turn are decided
  before any of them runs), with the status its result had;
* each result arrives afterwards: its content is indexed, labelled by the tool's declared output
  (``DeclaredOutput``; a tool that declares nothing is ``tool-output``), so later arguments
  carry its provenance. Results are not part of the call's event: the call was decided first.

Ids may repeat within a run, so a result belongs to the latest call with its id that has no
result yet. The run's ``injections``, ``security``, ``utility`` and task ids are ground truth for
scoring only; nothing here reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from callgate._errors import Problem, TraceError
from callgate._model import DeclaredOutput, Event
from callgate.abstraction._abstractor import Abstractor

__all__ = ["UNDECLARED_SOURCE", "AgentDojoStep", "abstract_agentdojo_run", "agentdojo_steps",
           "message_text"]

#: The output label of a tool the policy declares nothing about: untrusted (fail closed).
UNDECLARED_SOURCE = "tool-output"
_SYSTEM, _USER = "system", "user-provided"


@dataclass(frozen=True, slots=True)
class AgentDojoStep:
    """One step: a line to decide (``raw``), or the result of call ``result_of`` arriving.

    ``line`` is the 1-based index of the message it came from.
    """

    line: int
    raw: Mapping[str, Any] | None = None
    result_of: int | None = None
    output: str = ""
    tool: str = ""


def message_text(content: Any) -> str:
    """The text of a message's ``content`` in either variant (a string, null, or blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(block.get("content") or "") for block in content
                         if isinstance(block, Mapping) and block.get("type") == "text")
    return str(content)


def _problem(run: Mapping[str, Any], message: str) -> TraceError:
    return TraceError([Problem(message, source=str(run.get("path", "<agentdojo run>")))])


def agentdojo_steps(run: Mapping[str, Any], outputs: Mapping[str, DeclaredOutput]
                    ) -> Iterator[AgentDojoStep]:
    """The run's steps in the order the monitor lives them (see the module doc); a call's
    line names the labels its output will carry (``output_source``).

    Raises ``TraceError`` when a tool result matches no unanswered call.
    """
    messages: Sequence[Mapping[str, Any]] = run.get("messages") or []
    results = _results_by_call(run, messages)
    last_answer = max((i for i, m in enumerate(messages)
                       if m.get("role") == "assistant" and message_text(m.get("content"))),
                      default=-1)
    calls = 0
    pending: list[tuple[str, int]] = []
    for index, message in enumerate(messages):
        role, line = message.get("role"), index + 1
        text = message_text(message.get("content"))
        if role in ("system", "user"):
            action = "system_prompt" if role == "system" else "user_prompt"
            yield AgentDojoStep(line, {"action": action, "args": {"text": text}, "output": text,
                                       "output_source": [_SYSTEM if role == "system" else _USER]})
        elif role == "assistant":
            if text:
                yield AgentDojoStep(line, {"action": "answer", "args": {
                    "text": text, "final": index == last_answer}})
            for call in message.get("tool_calls") or []:
                result = results.get(calls)
                status = "error" if result is None or result.get("error") else "ok"
                name = str(call.get("function") or "")
                yield AgentDojoStep(line, {"tool": name, "parameters": call.get("args") or {},
                                           "status": status,
                                           "output_source": sorted(source_of(name, outputs))},
                                    tool=name)
                pending.append((str(call.get("id")), calls))
                calls += 1
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            match = next((k for k in range(len(pending) - 1, -1, -1)
                          if pending[k][0] == call_id), None)
            if match is None:  # _results_by_call has already refused this
                raise _problem(run, f"message {line}: tool result {call_id} matches no call")
            _, number = pending.pop(match)
            call = message.get("tool_call") or {}
            output = text or str(message.get("error") or "")
            yield AgentDojoStep(line, result_of=number, output=output,
                                tool=str(call.get("function") or ""))


def _results_by_call(run: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
                     ) -> dict[int, Mapping[str, Any]]:
    """Call number -> its result message (a call never answered has none)."""
    pending: list[tuple[str, int]] = []
    found: dict[int, Mapping[str, Any]] = {}
    calls = 0
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                pending.append((str(call.get("id")), calls))
                calls += 1
        elif message.get("role") == "tool":
            call_id = str(message.get("tool_call_id"))
            match = next((k for k in range(len(pending) - 1, -1, -1)
                          if pending[k][0] == call_id), None)
            if match is None:
                raise _problem(run, f"message {index + 1}: tool result {call_id} matches no "
                                    f"call")
            found[pending.pop(match)[1]] = message
    return found


def source_of(tool: str, outputs: Mapping[str, DeclaredOutput]) -> frozenset[str]:
    """The labels of a tool's output: its declared source, ``tool-output`` when undeclared."""
    declared = outputs.get(tool)
    return frozenset({UNDECLARED_SOURCE}) if declared is None else declared.source


def abstract_agentdojo_run(
    run: Mapping[str, Any], *, outputs: Mapping[str, DeclaredOutput] | None = None,
    abstractor: Abstractor | None = None,
) -> list[Event]:
    """The events of one AgentDojo run in the order of ``agentdojo_steps``, with provenance
    computed from ``outputs`` (the tools' declared outputs)."""
    declared = dict(outputs or {})
    tool = abstractor or Abstractor(resolve_scripts=False, outputs=declared, provenance=True)
    events: list[Event] = []
    seq_of: dict[int, int] = {}
    calls = 0
    for step in agentdojo_steps(run, declared):
        if step.raw is not None:
            made = tool.abstract(step.raw, line=step.line)
            events.extend(made)
            if "tool" in step.raw and made:
                seq_of[calls] = made[-1].seq
                calls += 1
        elif step.result_of is not None and step.result_of in seq_of:
            source = source_of(step.tool, declared)
            tool.index_output(seq_of[step.result_of], step.output, source, source=source,
                              tool=step.tool)
    return events

"""What every framework adapter shares: the gate it talks to, and one call's way through it.

An adapter depends on a ``Gate``, the four names an embedded ``callgate.Kernel`` and the
sidecar's client both have: ``check`` a call, ``report`` what an allowed call returned,
``end_run``, and the ``run_id``. ``Mediation`` holds one gate with the adapter's mapping of
tool names to kernel classes and turns every failure into a refusal: a gate that raises, or
returns something that is not a decision, denies the call (fail closed); a result it could not
record withholds the output. Nothing here decides: the verdict is always the gate's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic_core import to_jsonable_python

from callgate._model import Decision, Reason, Status, ToolResult
from callgate.integrations._refusal import refusal_text
from callgate.temporal import Violation

log = logging.getLogger("callgate.adapters")

__all__ = ["ADAPTER_ERROR", "DEFAULT_CLASS", "Gate", "Mediation", "ToolClass", "adapter_denial",
           "observation", "quarantined", "refusal", "withheld"]

#: The class and action of a framework tool the adapter is not told about.
DEFAULT_CLASS = ("function", "call")
#: The reason id of a refusal the adapter makes because the gate could not answer.
ADAPTER_ERROR = "adapter.error"
#: The reason id of a quarantined run (the kernel's run-state step).
QUARANTINED = "run.quarantined"

#: A tool's kernel class and action, e.g. ``("http", "get")``.
ToolClass = tuple[str, str]


@runtime_checkable
class Gate(Protocol):
    """The decision point an adapter asks: an embedded ``Kernel`` or the sidecar's client."""

    @property
    def run_id(self) -> str:
        """The run every call belongs to."""
        ...

    def check(self, call: Mapping[str, Any]) -> Decision:
        """Decide ``call`` (tool, tool_class, action, parameters); never raises by contract."""
        ...

    def report(self, call_id: str, *, status: Status = "ok", output: Any = None,
               error: str | None = None, taint: Sequence[str] = ()) -> ToolResult:
        """Record the result of a call ``check`` allowed (``taint``: labels the host knows of
        beyond the call's class); gives the result as recorded."""
        ...

    def end_run(self) -> list[Violation]:
        """End the run: the obligations still open are the violations returned."""
        ...


def observation(value: Any) -> str:
    """A tool's return value as the text a model reads (JSON for anything but a string)."""
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)


def adapter_denial(why: str) -> Decision:
    """A deny the adapter makes because the gate could not answer (or was not asked)."""
    return Decision(verdict="deny", reasons=(Reason(id=ADAPTER_ERROR, check="adapter",
                                                    message=why),))


@dataclass
class Mediation:
    """One gate, and how the framework's tool names become kernel calls.

    ``classes`` maps a tool name to its ``(tool_class, action)``; any other tool is
    ``DEFAULT_CLASS`` (class ``function``, action ``call``), so the policy's grants and rules
    name it by ``tool``.
    """

    gate: Gate
    classes: Mapping[str, ToolClass] = field(default_factory=dict)

    def call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The kernel call for ``tool`` invoked with ``arguments``."""
        tool_class, action = self.classes.get(tool, DEFAULT_CLASS)
        return {"tool": tool, "tool_class": tool_class, "action": action,
                "parameters": dict(arguments)}

    def decide(self, tool: str, arguments: Any) -> Decision:
        """The gate's decision on a call; a deny when anything goes wrong on the way."""
        if not isinstance(arguments, Mapping):
            return adapter_denial(f"the arguments of {tool} are not a mapping "
                                   f"({type(arguments).__name__})")
        return self.decide_call(tool, self.call(tool, arguments))

    def decide_call(self, tool: str, call: Mapping[str, Any]) -> Decision:
        """The gate's decision on a call already in the kernel's form (fail closed)."""
        try:
            decision = self.gate.check(call)
        except Exception as exc:
            log.exception("the gate could not decide a call to %s", tool)
            return adapter_denial(f"the gate could not decide: {type(exc).__name__}: {exc}")
        if not isinstance(decision, Decision):
            return adapter_denial(f"the gate answered {type(decision).__name__}, "
                                   f"not a decision")
        return decision

    def report(self, decision: Decision, *, output: Any = None, error: str | None = None,
               status: Status | None = None, taint: Sequence[str] = ()) -> ToolResult:
        """Record what an allowed call gave (``error`` set: it failed). The result as recorded;
        an error result without the output when the gate could not record it."""
        if status is None:
            status = "ok" if error is None else "error"
        text = None if output is None else observation(output)
        try:
            result = self.gate.report(decision.call_id, status=status, output=text, error=error,
                                      taint=tuple(taint))
        except Exception as exc:
            log.exception("the gate could not record the result of %s", decision.call_id)
            return ToolResult(call_id=decision.call_id, status="error",
                              error=f"{ADAPTER_ERROR}: the result could not be recorded "
                                    f"({type(exc).__name__}: {exc}); its output is withheld")
        if not isinstance(result, ToolResult):
            return ToolResult(call_id=decision.call_id, status="error",
                              error=f"{ADAPTER_ERROR}: the gate recorded no result; "
                                    f"its output is withheld")
        return result

    def end_run(self) -> list[Violation]:
        """End the gate's run; an undecided violation when the gate cannot (fail closed)."""
        try:
            return list(self.gate.end_run())
        except Exception as exc:
            log.exception("the gate could not end its run")
            return [Violation(statement=ADAPTER_ERROR, enforce="block", events=(),
                              message=f"{type(exc).__name__}: {exc}", kind="unknown")]


def refusal(decision: Decision, tool: str) -> str:
    """What the model reads when ``decision`` refuses a call to ``tool``."""
    return refusal_text(decision, tool, {}, ran=", it was not run")


def withheld(result: ToolResult, tool: str) -> str:
    """What the model reads when a call ran but its recorded result withholds the output."""
    why = result.error or "it could not be recorded"
    return (f"callgate withheld the output of {tool}: {why}. "
            f"Do not retry the same call; change the approach or ask the user.")


def quarantined(decision: Decision) -> bool:
    """Whether ``decision`` refuses a call because the run is quarantined."""
    return any(r.id == QUARANTINED for r in decision.reasons)

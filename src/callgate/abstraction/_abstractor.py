"""The ``Abstractor``: one per run; raw trace lines in, numbered typed events out.

A raw line is either a typed event (``action``, ``args``, ``status``, ``output``, ``taint``) or
a tool call (``tool`` and ``parameters``, or the OpenAI ``function`` / ``name`` + ``arguments``
shapes) with its recorded ``status`` and ``output``. The abstractor drafts the events of the
line, attaches the call's status and bounded output, finds value flows from earlier outputs,
numbers the events, and indexes the output for later lines.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from callgate._errors import Problem, TraceError
from callgate._jsonlimits import loads_bounded
from callgate._model import Event, Flow, Status
from callgate.abstraction._drafts import Draft, ScriptContext, tool_drafts
from callgate.abstraction._flow import FlowIndex

_STATUSES: frozenset[str] = frozenset({"ok", "error", "denied"})
#: Arguments that restate other arguments; value flow is not searched in them.
_NO_FLOW_ARGS = frozenset({"argv", "argv_list", "flags", "wrappers", "tool_class", "tool_action",
                           "piped_from", "dynamic", "parse_error", "positionals"})


class MalformedLineError(ValueError):
    """Internal: a raw line has the wrong shape (turned into a TraceError by callers)."""


def _taint_names(value: Any) -> set[str]:
    """Taint given as a list of source names or of ``{"source": …}`` labels."""
    if value is None:
        return set()
    if isinstance(value, str):
        return {value}
    if not isinstance(value, list | tuple | set | frozenset):
        raise MalformedLineError("taint must be a list of source names or labels")
    names: set[str] = set()
    for item in value:
        if isinstance(item, str) and item:
            names.add(item)
        elif isinstance(item, Mapping) and isinstance(item.get("source"), str):
            names.add(item["source"])
        elif hasattr(item, "source") and isinstance(item.source, str):
            names.add(item.source)
        else:
            raise MalformedLineError(f"taint entry {item!r} has no source")
    return names


def _status(raw: Mapping[str, Any]) -> Status:
    status = raw.get("status")
    if status is None:
        return "error" if raw.get("error") not in (None, "", False) else "ok"
    if status not in _STATUSES:
        raise MalformedLineError(f"status must be one of ok, error, denied, not {status!r}")
    result: Status = status
    return result


def _output_text(raw: Mapping[str, Any]) -> str:
    output = raw.get("output", raw.get("result"))
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(output)


def _call_shape(raw: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The (tool name, parameters) of a tool-call line, or None for a typed event."""
    function = raw.get("function")
    if isinstance(function, Mapping):
        name, params = function.get("name"), function.get("arguments", {})
    elif "tool" in raw:
        name, params = raw.get("tool"), raw.get("parameters", raw.get("args", {}))
    elif isinstance(function, str):
        name, params = function, raw.get("args", raw.get("arguments", {}))
    elif "name" in raw and "action" not in raw:
        name, params = raw.get("name"), raw.get("arguments", raw.get("parameters", {}))
    else:
        return None
    if not isinstance(name, str) or not name:
        raise MalformedLineError("a tool call needs a non-empty tool name")
    if isinstance(params, str):
        try:
            params = loads_bounded(params) if params.strip() else {}
        except ValueError as exc:
            raise MalformedLineError(f"arguments of {name} are not valid JSON: {exc}") from exc
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise MalformedLineError(f"parameters of {name} must be an object")
    return name, params


class Abstractor:
    """Maps raw calls of one run to typed events; stateful for numbering and value flow.

    ``output_bound`` is the number of characters of each output kept as the event's
    observation (the head of the output); value flow indexes up to 256 KiB of each output.
    """

    def __init__(
        self, *, output_bound: int = 4096, resolve_scripts: bool = True,
        working_dir: str | None = None,
    ) -> None:
        if output_bound < 0:
            raise ValueError("output_bound must not be negative")
        self.output_bound = output_bound
        self._ctx = ScriptContext(resolve=resolve_scripts, working_dir=working_dir)
        self._index = FlowIndex()
        self._seq = 0

    @property
    def next_seq(self) -> int:
        """The number the next event will get."""
        return self._seq + 1

    def abstract(self, raw: Mapping[str, Any], *, line: int | None = None) -> list[Event]:
        """The events of one raw line, numbered; the line's output is indexed for later flows.

        Raises ``TraceError`` when the line has the wrong shape; any other failure becomes a
        ``parse_error`` event, so a call is never dropped.
        """
        events, output, taint = self._events(raw, line)
        self._seq += len(events)
        if events:
            self._index.add(events[-1].seq, output, taint)
        return events

    def accept(self, events: list[Event], *, output: str = "") -> None:
        """Take events made by ``preview`` (just before, with no call in between) as abstracted.

        Saves abstracting the same call twice when nothing about it changed after the preview.
        """
        if events and events[0].seq != self._seq + 1:
            raise ValueError("events do not follow the abstracted prefix")
        self._seq += len(events)
        if events:
            taint = frozenset().union(*(e.taint for e in events))
            self._index.add(events[-1].seq, output[: self.output_bound], taint)

    def index_output(self, seq: int, output: str, taint: frozenset[str]) -> None:
        """Index the output of event ``seq`` for later flows, when it arrives after the event
        (a host that reports a call's result once it has run)."""
        if 0 < seq <= self._seq and output:
            self._index.add(seq, output, taint)

    def preview(self, raw: Mapping[str, Any]) -> list[Event]:
        """The events ``raw`` would produce, numbered from ``next_seq``, without changing state."""
        return self._events(raw, None)[0]

    def _events(
        self, raw: Mapping[str, Any], line: int | None
    ) -> tuple[list[Event], str, frozenset[str]]:
        if not isinstance(raw, Mapping):
            raise _trace_error("a trace line must be a JSON object", line)
        try:
            status = _status(raw)
            output = _output_text(raw)
            declared = _taint_names(raw.get("taint")) | _taint_names(raw.get("output_taint"))
            drafts = self._drafts(raw)
        except MalformedLineError as exc:
            raise _trace_error(str(exc), line) from exc
        except Exception as exc:
            status, output, declared = "error", _safe_output(raw), set()
            drafts = [Draft("parse_error", {"parse_error": f"internal error: {exc!r}"[:500]})]
        events = self._finish(drafts, status, output, declared, line)
        taint = frozenset().union(*(e.taint for e in events)) if events else frozenset()
        return events, output, taint

    def _drafts(self, raw: Mapping[str, Any]) -> list[Draft]:
        shape = _call_shape(raw)
        if shape is None:
            action = raw.get("action")
            if not isinstance(action, str) or not action:
                raise MalformedLineError("a line needs a tool (a call) or an action (an event)")
            args = raw.get("args", {})
            if not isinstance(args, Mapping):
                raise MalformedLineError("args must be an object")
            return [Draft(action, dict(args), bool(raw.get("derived", False)))]
        tool, params = shape
        drafts = tool_drafts(tool, params, raw, self._ctx)
        return drafts or [Draft("parse_error", {"parse_error": "the call produced no event"})]

    def _finish(
        self, drafts: list[Draft], status: Status, output: str, declared: set[str],
        line: int | None,
    ) -> list[Event]:
        observation = output[: self.output_bound]
        events: list[Event] = []
        for offset, draft in enumerate(drafts):
            flows = self._flows(draft.args)
            taint = frozenset(draft.taint | declared).union(*(f.taint for f in flows))
            events.append(Event(
                action=draft.action, args=draft.args, status=status, output=observation,
                taint=taint, seq=self._seq + 1 + offset, line=line, derived=draft.derived,
                flows=flows,
            ))
        return events

    def _flows(self, args: Mapping[str, Any]) -> tuple[Flow, ...]:
        flows: dict[tuple[str, int], Flow] = {}
        for name, value in args.items():
            if name in _NO_FLOW_ARGS:
                continue
            for text in _strings(value):
                for seq, taint in self._index.sources(text):
                    flows.setdefault((name, seq), Flow(name, seq, taint))
        return tuple(flows[k] for k in sorted(flows, key=lambda k: (k[1], k[0])))


def _strings(value: Any, depth: int = 0) -> list[str]:
    """The string leaves of an argument value (numbers as text), bounded in depth and count."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [str(value)]
    if depth > 3:
        return []
    items = value.values() if isinstance(value, Mapping) else value
    if not isinstance(items, list | tuple) and not isinstance(value, Mapping):
        return []
    out: list[str] = []
    for item in list(items)[:256]:
        out.extend(_strings(item, depth + 1))
    return out


def _safe_output(raw: Mapping[str, Any]) -> str:
    try:
        return _output_text(raw)
    except Exception:
        return ""


def _trace_error(message: str, line: int | None) -> TraceError:
    return TraceError([Problem(message, source="<trace>", line=line)])

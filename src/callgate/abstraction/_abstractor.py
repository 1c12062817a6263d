"""The ``Abstractor``: one per run; raw trace lines in, numbered typed events out.

A raw line is either a typed event (``action``, ``args``, ``status``, ``output``, ``taint``) or
a tool call (``tool`` and ``parameters``, or the OpenAI ``function`` / ``name`` + ``arguments``
shapes) with its recorded ``status`` and ``output``. The abstractor drafts the events of the
line, attaches the call's status and bounded output, finds value flows from earlier outputs
(and, when asked, each argument's provenance: where its values first appeared), numbers the
events, and indexes the output for later lines.

What an output *is* (its ``source``: who wrote it) is kept apart from what a call's inputs
carry (its ``taint``). A line's ``output_source`` names it; tools declared to the abstractor
(``DeclaredOutput``) give it by name, with the fields of a structured output the system itself
fills in.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from callgate._errors import Problem, TraceError
from callgate._identifiers import normal_identifier
from callgate._jsonlimits import loads_bounded
from callgate._model import DeclaredOutput, Event, Flow, Status
from callgate.abstraction._drafts import Draft, ScriptContext, tool_drafts
from callgate.abstraction._flow import (
    DIRECTING,
    NEUTRAL,
    USER_DIRECTED,
    VIA,
    FlowIndex,
    Pieces,
)
from callgate.abstraction._structured import field_segments

#: Characters of an output kept as an event's observation (what ``output`` patterns see).
OBSERVATION_CHARS = 65_536
#: Events whose arguments' provenance is remembered, for outputs reported after them.
_MAX_CARRIED = 4096

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
    ``outputs`` declares what named tools' outputs are; ``provenance`` computes, for every
    argument of every event, the labels of where its values first appeared (off by default: it
    costs a lookup per value).
    """

    def __init__(
        self, *, output_bound: int = OBSERVATION_CHARS, resolve_scripts: bool = True,
        working_dir: str | None = None, outputs: Mapping[str, DeclaredOutput] | None = None,
        provenance: bool = False,
    ) -> None:
        if output_bound < 0:
            raise ValueError("output_bound must not be negative")
        self.output_bound = output_bound
        self._ctx = ScriptContext(resolve=resolve_scripts, working_dir=working_dir)
        self._index = FlowIndex(provenance=provenance)
        self._seq = 0
        self._outputs = dict(outputs or {})
        self._provenance = provenance
        # what the arguments of recent events bring to their outputs: ``user-directed`` when
        # the user directed the call, the untrusted labels of the values it was called with
        self._carried: OrderedDict[int, frozenset[str]] = OrderedDict()

    @property
    def next_seq(self) -> int:
        """The number the next event will get."""
        return self._seq + 1

    def abstract(self, raw: Mapping[str, Any], *, line: int | None = None) -> list[Event]:
        """The events of one raw line, numbered; the line's output is indexed for later flows.

        Raises ``TraceError`` when the line has the wrong shape; any other failure becomes a
        ``parse_error`` event, so a call is never dropped.
        """
        events, output, source = self._events(raw, line)
        for event in events:
            self._note_carried(event)
        self._seq += len(events)
        if events:
            self._add(events, output, source, _name_of(raw))
        return events

    def accept(self, events: list[Event], *, output: str = "") -> None:
        """Take events made by ``preview`` (just before, with no call in between) as abstracted.

        Saves abstracting the same call twice when nothing about it changed after the preview.
        """
        if events and events[0].seq != self._seq + 1:
            raise ValueError("events do not follow the abstracted prefix")
        for event in events:
            self._note_carried(event)
        self._seq += len(events)
        if events:
            source = frozenset().union(*(e.source for e in events))
            self._add(events, output[: self.output_bound], source, events[0].action)

    def index_output(self, seq: int, output: str, taint: frozenset[str], *,
                     source: frozenset[str] | None = None, tool: str | None = None) -> None:
        """Index the output of event ``seq`` for later flows and provenance, when it arrives
        after the event (a host that reports a call's result once it has run): ``taint`` is
        what a value copied from it carries, ``source`` who wrote it (default ``taint``)."""
        if 0 < seq <= self._seq and output:
            written = (taint if source is None else source) | self._carried.get(seq, frozenset())
            self._index.add(seq, output, taint, source=written,
                            segments=self._segments(output, written, tool))

    def _add(self, events: list[Event], output: str, source: frozenset[str],
             tool: str | None) -> None:
        # a value copied from this output carries the events' taint (the propagation of what
        # the call read) and who wrote it; provenance sees who wrote it and what made the call
        source = source.union(*(self._carried.get(e.seq, frozenset()) for e in events))
        taint = frozenset().union(*(e.taint for e in events)) | source
        self._index.add(events[-1].seq, output, taint, source=source,
                        segments=self._segments(output, source, tool))

    def _note_carried(self, event: Event) -> None:
        """What ``event``'s arguments bring to its output (see ``_carried``)."""
        traced = [labels for pieces in event.provenance.values() for labels in pieces]
        if not traced:
            return
        carried = frozenset(f"{VIA}{label}" for label in frozenset().union(*traced) - NEUTRAL
                            if not label.startswith(VIA))
        carried |= frozenset(label for labels in traced for label in labels
                             if label.startswith(VIA))
        if _directed(event):
            carried |= {USER_DIRECTED}
        if carried:
            self._carried[event.seq] = carried
            while len(self._carried) > _MAX_CARRIED:
                self._carried.popitem(last=False)

    def _segments(self, output: str, source: frozenset[str], tool: str | None
                  ) -> list[tuple[str, frozenset[str]]] | None:
        declared = self._outputs.get(tool) if tool is not None else None
        if declared is None or not declared.trusted_fields:
            return None
        return field_segments(output, source, declared.trusted_fields)

    def preview(self, raw: Mapping[str, Any], *, line: int | None = None) -> list[Event]:
        """The events ``raw`` would produce, numbered from ``next_seq``, without changing state."""
        return self._events(raw, line)[0]

    def _events(
        self, raw: Mapping[str, Any], line: int | None
    ) -> tuple[list[Event], str, frozenset[str]]:
        if not isinstance(raw, Mapping):
            raise _trace_error("a trace line must be a JSON object", line)
        try:
            status = _status(raw)
            output = _output_text(raw)
            legacy = _taint_names(raw.get("output_taint"))
            declared = _taint_names(raw.get("taint")) | legacy
            shape = _call_shape(raw)
            source = legacy | _taint_names(raw.get("output_source")) | self._declared(
                shape[0] if shape is not None else raw.get("action"))
            drafts = self._drafts(raw, shape)
        except MalformedLineError as exc:
            raise _trace_error(str(exc), line) from exc
        except Exception as exc:
            status, output, declared, source = "error", _safe_output(raw), set(), set()
            drafts = [Draft("parse_error", {"parse_error": f"internal error: {exc!r}"[:500]})]
        events = self._finish(drafts, status, output, declared, source=frozenset(source),
                              line=line)
        produced = frozenset().union(*(e.source for e in events)) if events else frozenset()
        return events, output, produced

    def _declared(self, name: object) -> set[str]:
        declared = self._outputs.get(name) if isinstance(name, str) and self._outputs else None
        return set(declared.source) if declared is not None else set()

    def _drafts(self, raw: Mapping[str, Any],
                shape: tuple[str, Mapping[str, Any]] | None) -> list[Draft]:
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
        self, drafts: list[Draft], status: Status, output: str, declared: set[str], *,
        source: frozenset[str], line: int | None,
    ) -> list[Event]:
        observation = output[: self.output_bound]
        events: list[Event] = []
        for offset, draft in enumerate(drafts):
            flows = self._flows(draft.args)
            taint = frozenset(draft.taint | declared).union(*(f.taint for f in flows))
            # (positional, in the field order: a keyword call costs half as much again)
            events.append(Event(
                draft.action, draft.args, status, observation, taint, self._seq + 1 + offset,
                line, draft.derived, flows,
                self._origins(draft.args) if self._provenance else {}, source | draft.taint))
        return events

    def _origins(self, args: Mapping[str, Any]) -> dict[str, Pieces]:
        """For each argument, where each piece of its values first appeared (the labels of
        that content); for an argument holding identifiers, also ``links(ARG)``: where each of
        those identifiers first appeared."""
        origins: dict[str, Pieces] = {}
        for name, value in args.items():
            if name in _NO_FLOW_ARGS:
                continue
            pieces: Pieces = ()
            links: Pieces = ()
            for text in _strings(value):
                whole, inside = self._index.origins(text)
                pieces += whole
                links += inside
            origins[name] = pieces
            if links:
                origins[f"links({name})"] = links
        return origins

    def _flows(self, args: Mapping[str, Any]) -> tuple[Flow, ...]:
        flows: dict[tuple[str, int], Flow] = {}
        for name, value in args.items():
            if name in _NO_FLOW_ARGS:
                continue
            for text in _strings(value):
                for seq, taint in self._index.sources(text):
                    flows.setdefault((name, seq), Flow(name, seq, taint))
        return tuple(flows[k] for k in sorted(flows, key=lambda k: (k[1], k[0])))


def _directed(event: Event) -> bool:
    """Whether the user directed the call: it names a specific thing (an address, a file, a
    URL: an identifier) that came from the user or from what the user pointed at, and every
    other value it was called with came from there too. A search query or a date the user gave
    directs nothing in particular: what it finds is not what the user pointed at."""
    def pointed(labels: frozenset[str]) -> bool:
        return bool(labels) and (labels <= DIRECTING or USER_DIRECTED in labels)

    named = False
    for name, pieces in event.provenance.items():
        if not pieces or name.startswith("links("):
            continue
        if not all(pointed(labels) for labels in pieces):
            return False
        named = named or any(normal_identifier(text) is not None
                             for text in _strings(event.args.get(name)))
    return named


def _name_of(raw: Mapping[str, Any]) -> str | None:
    """The tool (or, for a typed event, the action) a raw line names, or None."""
    try:
        shape = _call_shape(raw)
    except MalformedLineError:
        return None
    name = shape[0] if shape is not None else raw.get("action")
    return name if isinstance(name, str) else None


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

"""The signature Σ = (A, K, V) a compiled statement may speak of.

Σ collects the actions, the argument names of each action, and the values the arguments take,
either as a run exhibits them (a sample trace in the format ``callgate check`` reads: raw tool
calls are abstracted, shell lines parsed, as the kernel sees them) or as the tools declare them
(their input schemas: an argument is a property, its values are its ``enum`` or ``const``
when it has one). A statement is kept only when every action, argument and value it names is in
Σ: a term with no counterpart would denote nothing, and a statement over nothing holds
vacuously — the quiet failure a compiler must not produce.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate.compile._tools import read_tools

__all__ = ["Signature", "signature_of_events", "signature_of_tools", "signature_of_trace"]

#: Values kept per argument (a sample trace can hold many; the prompt shows a few).
MAX_VALUES = 64
#: Characters of one value kept (longer values are content, not vocabulary).
MAX_VALUE_CHARS = 200
#: The event fields statements name that are not arguments.
EVENT_FIELDS = frozenset({"action", "status", "output", "taint"})
#: Arguments the kernel adds to every call event (always there when a policy runs online).
KERNEL_ARGS = frozenset({"tool_class", "tool_action", "risk"})


@dataclass(frozen=True)
class Signature:
    """Actions, each action's argument names, and the values seen per argument.

    ``values`` holds each value as its JSON text (``"6"`` the string, ``6`` the number).
    ``closed_values`` holds the arguments whose every value is known (an ``enum``, or an
    argument of a sample trace): a literal compared with one of them must be among its values.
    ``exhaustive`` holds those whose values are all there can be (a schema's ``enum`` or
    ``const``): no event has another, so a pattern needing another matches nothing. A sample
    trace's values are only those it showed: a run may show others (``fps > 1000`` may match).
    """

    actions: frozenset[str]
    args: Mapping[str, frozenset[str]]
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)
    closed_values: frozenset[str] = frozenset()
    descriptions: Mapping[str, str] = field(default_factory=dict)
    source: str = "<signature>"
    exhaustive: frozenset[str] = frozenset()

    @property
    def arg_names(self) -> frozenset[str]:
        """Every argument name of every action (K)."""
        return frozenset().union(*self.args.values()) if self.args else frozenset()

    def sha256(self) -> str:
        """A digest of Σ (part of a model response's cache key)."""
        data = {"actions": sorted(self.actions),
                "args": {a: sorted(k) for a, k in sorted(self.args.items())},
                "values": {k: sorted(v) for k, v in sorted(self.values.items())}}
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def describe(self, limit: int = 12) -> str:
        """Σ as text for a prompt: each action with its arguments (and a few known values)."""
        lines = []
        for action in sorted(self.actions):
            args = []
            for name in sorted(self.args.get(action, ())):
                seen = sorted(self.values.get(name, ()))[:limit]
                args.append(f"{name} in [{', '.join(seen)}]" if seen else name)
            what = self.descriptions.get(action, "")
            lines.append(f"- {action}({', '.join(args)})" + (f": {what}" if what else ""))
        return "\n".join(lines)


def signature_of_events(events: Iterable[Any], source: str = "<trace>") -> Signature:
    """Σ of a run's events (``callgate._model.Event``): an argument's values are the ones the
    run showed (each element of a list on its own), all of them, unless there were more than
    ``MAX_VALUES`` or one longer than ``MAX_VALUE_CHARS`` (then it takes any value)."""
    actions: set[str] = set()
    args: dict[str, set[str]] = {}
    values: dict[str, set[str]] = {}
    open_args: set[str] = set()
    for event in events:
        actions.add(event.action)
        names = args.setdefault(event.action, set())
        for key, value in event.args.items():
            if key in KERNEL_ARGS:
                continue
            names.add(key)
            bucket = values.setdefault(key, set())
            for item in value if isinstance(value, list) else [value]:
                text = _text(item)
                if len(text) > MAX_VALUE_CHARS or len(bucket) >= MAX_VALUES:
                    open_args.add(key)
                else:
                    bucket.add(text)
    return Signature(frozenset(actions), {a: frozenset(k) for a, k in args.items()},
                     {k: frozenset(v) for k, v in values.items()},
                     frozenset(values) - open_args, {}, source)


def signature_of_trace(path: str | os.PathLike[str]) -> Signature:
    """Σ of a sample trace in the format ``callgate check`` reads (raw tool calls abstracted as
    the kernel would; typed events as they are). ``TraceError`` names a bad line."""
    try:
        from callgate.abstraction import load_raw_trace
    except ImportError:  # pragma: no cover - without the abstraction extra: typed events only
        from callgate.temporal import load_trace

        return signature_of_events(load_trace(os.fspath(path)), os.fspath(path))
    return signature_of_events(load_raw_trace(path), os.fspath(path))


def signature_of_tools(path: str | os.PathLike[str]) -> Signature:
    """Σ of the tools a file declares (``_tools.read_tools``: MCP ``tools/list``, a list of
    tools, or OpenAI function definitions, in JSON or YAML); an argument whose schema lists its
    values (``enum``, ``const``) takes only those."""
    tools = read_tools(path)
    args: dict[str, frozenset[str]] = {}
    values: dict[str, set[str]] = {}
    open_args: set[str] = set()
    for tool in tools:
        args[tool.name] = frozenset(tool.values)
        for name, allowed in tool.values.items():
            if allowed is None:
                open_args.add(name)
            else:
                values.setdefault(name, set()).update(_text(v) for v in allowed)
    # an argument is closed when every tool that has it lists its values
    closed = frozenset(values) - open_args
    return Signature(frozenset(args), args, {k: frozenset(v) for k, v in values.items()},
                     closed, {t.name: t.description for t in tools if t.description},
                     os.fspath(path), exhaustive=closed)


def _text(value: Any) -> str:
    """A value as Σ keeps it: its JSON text (``"6"`` and ``6`` stay apart)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)

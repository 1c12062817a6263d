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
from pathlib import Path
from typing import Any

from callgate._errors import CallgateError
from callgate._jsonlimits import loads_bounded

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

    ``closed_values`` holds the arguments whose every value is known (an ``enum``, or any
    argument of a sample trace): a literal compared with one of them must be among its values.
    """

    actions: frozenset[str]
    args: Mapping[str, frozenset[str]]
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)
    closed_values: frozenset[str] = frozenset()
    descriptions: Mapping[str, str] = field(default_factory=dict)
    source: str = "<signature>"

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
                args.append(f"{name} in {json.dumps(seen)}" if seen else name)
            what = self.descriptions.get(action, "")
            lines.append(f"- {action}({', '.join(args)})" + (f": {what}" if what else ""))
        return "\n".join(lines)


def signature_of_events(events: Iterable[Any], source: str = "<trace>") -> Signature:
    """Σ of a run's events (``callgate._model.Event``)."""
    actions: set[str] = set()
    args: dict[str, set[str]] = {}
    values: dict[str, set[str]] = {}
    for event in events:
        actions.add(event.action)
        names = args.setdefault(event.action, set())
        for key, value in event.args.items():
            if key in KERNEL_ARGS:
                continue
            names.add(key)
            for item in value if isinstance(value, list) else [value]:
                text = item if isinstance(item, str) else json.dumps(item, sort_keys=True)
                bucket = values.setdefault(key, set())
                if len(text) <= MAX_VALUE_CHARS and len(bucket) < MAX_VALUES:
                    bucket.add(text)
    return Signature(frozenset(actions), {a: frozenset(k) for a, k in args.items()},
                     {k: frozenset(v) for k, v in values.items()}, frozenset(values), {}, source)


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
    """Σ of the tools a file declares: MCP ``tools/list`` (``{"tools": [{name, inputSchema}]}``),
    a list of such tools, OpenAI function definitions (``{"type": "function", "function":
    {name, parameters}}``), in JSON or YAML."""
    where = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CallgateError(f"cannot read the tools file {where}: {exc}") from exc
    try:
        data: Any = loads_bounded(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CallgateError(f"{where}: neither JSON nor YAML: {exc}") from exc
    tools = data.get("tools") if isinstance(data, Mapping) else data
    if not isinstance(tools, list):
        raise CallgateError(f"{where}: expected a list of tools (or an object with 'tools')")
    actions: set[str] = set()
    args: dict[str, set[str]] = {}
    values: dict[str, set[str]] = {}
    closed: set[str] = set()
    descriptions: dict[str, str] = {}
    for index, tool in enumerate(tools):
        name, schema, description = _tool_parts(tool, f"{where}: tools[{index}]")
        actions.add(name)
        descriptions[name] = description
        names = args.setdefault(name, set())
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        for key, prop in (properties or {}).items():
            names.add(str(key))
            known = _known_values(prop)
            if known is not None:
                values.setdefault(str(key), set()).update(known)
                closed.add(str(key))
    return Signature(frozenset(actions), {a: frozenset(k) for a, k in args.items()},
                     {k: frozenset(v) for k, v in values.items()}, frozenset(closed),
                     descriptions, where)


def _tool_parts(tool: Any, where: str) -> tuple[str, Any, str]:
    """A tool's name, input schema and description, whichever shape it is written in."""
    if not isinstance(tool, Mapping):
        raise CallgateError(f"{where}: a tool must be an object")
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        tool = tool["function"]
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise CallgateError(f"{where}: a tool needs a name")
    schema = tool.get("inputSchema", tool.get("input_schema", tool.get("parameters", {})))
    description = tool.get("description")
    return name, schema, description.strip().splitlines()[0] if isinstance(
        description, str) and description.strip() else ""


def _known_values(prop: Any) -> set[str] | None:
    """The values a property can take when its schema says (``enum``, ``const``), else None."""
    if not isinstance(prop, Mapping):
        return None
    if "const" in prop:
        return {_text(prop["const"])}
    if isinstance(prop.get("enum"), list):
        return {_text(v) for v in prop["enum"]}
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

"""Whole traces: loading a JSONL trace of raw lines, and the signature Σ a trace exhibits."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from callgate._errors import Problem, TraceError
from callgate._jsonlimits import loads_bounded
from callgate._model import Event
from callgate._text import NotUtf8Error, decode_utf8, lines_of
from callgate.abstraction._abstractor import Abstractor

_F = TypeVar("_F", bound=Callable[..., Any])

#: Values shown per argument name by ``format_signature``.
SHOWN_VALUES = 8
#: Characters shown of a value by ``format_signature``.
SHOWN_CHARS = 60


def load_raw_trace(
    path: str | os.PathLike[str], *, abstractor: Abstractor | None = None
) -> list[Event]:
    """Read a JSONL trace of typed events and/or raw tool calls into numbered events.

    Blank lines are skipped. Every malformed line is reported (file and line) in one
    ``TraceError``.
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            lines = lines_of(decode_utf8(handle.read()))
    except NotUtf8Error as exc:
        raise TraceError([Problem("not valid UTF-8", source, exc.line, exc.column)]) from exc
    except OSError as exc:
        raise TraceError([Problem(f"cannot read the trace: {exc}", source=source)]) from exc
    tool = abstractor or Abstractor()
    events: list[Event] = []
    problems: list[Problem] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            raw = loads_bounded(text)
        except ValueError as exc:
            problems.append(Problem(f"not valid JSON: {exc}", source=source, line=number))
            continue
        try:
            events.extend(tool.abstract(raw, line=number))
        except TraceError as exc:
            problems.extend(
                Problem(p.message, source=source, line=number, field=p.field) for p in exc.problems
            )
    if problems:
        raise TraceError(problems)
    return events


def _values(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [v for item in value for v in _values(item)]
    if isinstance(value, str):
        return [value]
    return [json.dumps(value, sort_keys=True, default=str)]


def signature(events: Sequence[Event]) -> dict[str, Any]:
    """The vocabulary a trace exhibits, Vigil's Σ = (A, K, V).

    ``actions`` (A), ``arg_names`` (K), ``values`` (V: for each argument name its distinct
    values, list elements counted one by one), ``outputs`` (the distinct output observations),
    ``args_by_action`` and ``taint`` (the taint sources seen).
    """
    actions: set[str] = set()
    by_action: dict[str, set[str]] = {}
    values: dict[str, set[str]] = {}
    outputs: set[str] = set()
    taint: set[str] = set()
    for event in events:
        actions.add(event.action)
        names = by_action.setdefault(event.action, set())
        for name, value in event.args.items():
            names.add(name)
            values.setdefault(name, set()).update(_values(value))
        if event.output:
            outputs.add(event.output)
        taint |= event.taint
    return {
        "actions": sorted(actions),
        "arg_names": sorted(values),
        "values": {name: sorted(found) for name, found in sorted(values.items())},
        "args_by_action": {a: sorted(n) for a, n in sorted(by_action.items())},
        "outputs": sorted(outputs),
        "taint": sorted(taint),
    }


def _short(value: str) -> str:
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 4] + '…"'


def format_signature(sig: Mapping[str, Any]) -> str:
    """A readable listing of a signature, for ``callgate check --signature``."""
    lines = [f"actions ({len(sig.get('actions', []))}):"]
    for action in sig.get("actions", []):
        names = sig.get("args_by_action", {}).get(action, [])
        lines.append(f"  {action}({', '.join(names)})")
    values = sig.get("values", {})
    lines.append(f"argument names ({len(values)}):")
    for name, found in values.items():
        shown = ", ".join(_short(v) for v in found[:SHOWN_VALUES])
        more = f", … {len(found) - SHOWN_VALUES} more" if len(found) > SHOWN_VALUES else ""
        lines.append(f"  {name}: {shown}{more}")
    lines.append(f"outputs: {len(sig.get('outputs', []))} distinct")
    lines.append(f"taint: {', '.join(sig.get('taint', [])) or 'none'}")
    return "\n".join(lines)


def signature_option(command: _F) -> _F:
    """The ``--signature`` flag for ``callgate check``: print the trace's Σ and exit."""
    import click  # only a CLI that asks for the flag pays for click

    option = click.option(
        "--signature",
        "show_signature",
        is_flag=True,
        default=False,
        help="Print the trace's vocabulary (actions, argument names, values) and exit.",
    )
    return option(command)

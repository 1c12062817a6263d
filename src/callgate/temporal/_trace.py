"""Reading recorded traces: one typed event per JSON line.

Each non-blank line is an object with ``action`` (a non-empty string) and optionally ``args``
(an object), ``status`` (``ok``, ``error`` or ``denied``; ``ok`` when absent), ``output`` (a
string; any other JSON value is kept as its canonical JSON text) and ``taint`` (a list of source
names, or of objects with a ``source``). Any other field is an error. Events are numbered from
1 in file order (``seq``) and remember their line (``line``). Outputs are cut to
``OBSERVATION_LIMIT`` characters: patterns never look further.

Every malformed line is reported (up to ``MAX_TRACE_PROBLEMS``) in one ``TraceError``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from callgate._errors import Problem, TraceError
from callgate._jsonlimits import loads_bounded
from callgate._model import Event
from callgate._text import NotUtf8Error, decode_utf8, lines_of
from callgate.temporal._patterns import OBSERVATION_LIMIT, text_of

#: Problems reported for one trace before the rest are summarised.
MAX_TRACE_PROBLEMS = 50
_FIELDS = frozenset({"action", "args", "status", "output", "taint"})
_STATUSES = ("ok", "error", "denied")


def load_trace(path: str | Path) -> list[Event]:
    """Read a JSONL trace; raise ``TraceError`` naming each bad line."""
    source = os.fspath(path)
    try:
        text = decode_utf8(Path(path).read_bytes())
    except NotUtf8Error as exc:
        raise TraceError([Problem("not valid UTF-8", source, exc.line, exc.column)]) from exc
    except OSError as exc:
        raise TraceError([Problem(f"cannot read trace: {exc}", source)]) from exc
    events: list[Event] = []
    problems: list[Problem] = []
    for number, line in enumerate(lines_of(text), start=1):
        if not line.strip():
            continue
        try:
            events.append(_event(line, len(events) + 1, number))
        except ValueError as exc:
            problems.append(Problem(str(exc), source, number))
    if len(problems) > MAX_TRACE_PROBLEMS:
        extra = len(problems) - MAX_TRACE_PROBLEMS
        problems = [*problems[:MAX_TRACE_PROBLEMS], Problem(f"… and {extra} more", source)]
    if problems:
        raise TraceError(problems)
    return events


def _event(line: str, seq: int, number: int) -> Event:
    try:
        data = loads_bounded(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} (column {exc.colno})") from exc
    except ValueError as exc:  # nested too deep, or a number the decoder refuses
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("an event must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise ValueError(
            f"unknown event field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(expected {', '.join(sorted(_FIELDS))})"
        )
    action = data.get("action")
    if not isinstance(action, str) or not action:
        raise ValueError("'action' must be a non-empty string")
    args = data.get("args", {})
    if not isinstance(args, dict):
        raise ValueError("'args' must be an object")
    status = data.get("status", "ok")
    if status not in _STATUSES:
        raise ValueError(f"'status' must be one of {', '.join(_STATUSES)}, got {status!r}")
    output = data.get("output", "")
    output = text_of(output) if output is not None else ""
    return Event(
        action=action,
        args=args,
        status=status,
        output=output[:OBSERVATION_LIMIT],
        taint=_taint(data.get("taint", [])),
        seq=seq,
        line=number,
    )


def _taint(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        raise ValueError("'taint' must be a list of source names")
    sources: set[str] = set()
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("source"), str):
            sources.add(item["source"])
        elif isinstance(item, str) and item:
            sources.add(item)
        else:
            raise ValueError("'taint' items must be source names or objects with a 'source'")
    return frozenset(sources)

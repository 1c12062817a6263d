"""Reading untrusted JSON with a bound on nesting, in time linear in its length.

``json.loads`` recurses once per level of nesting, so a line of 100,000 ``[`` would otherwise end
in a ``RecursionError`` wherever it is read (the command line, traces, audit logs). The decoder
stops at the interpreter's recursion limit long before it has read much, and what it built is
then measured without recursion; either way a value nested deeper than the limit is refused with
``JSONTooDeepError`` (a ``ValueError``, like every other reason JSON text is not read).
"""

from __future__ import annotations

import json
from typing import Any

#: Deepest nesting of arrays and objects read from an input line.
MAX_JSON_DEPTH = 64


class JSONTooDeepError(ValueError):
    """The text nests arrays and objects deeper than the limit."""


def nesting_depth(value: Any, limit: int) -> int:
    """The nesting depth of a JSON value (a scalar is 0), or ``limit + 1`` once it exceeds it."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH, **options: Any) -> Any:
    """``json.loads`` that raises ``JSONTooDeepError`` for nesting deeper than ``max_depth``.

    ``options`` are passed to ``json.loads`` (``parse_constant`` and the like).
    """
    try:
        value = json.loads(text, **options)
    except RecursionError as exc:
        raise JSONTooDeepError(f"nests deeper than {max_depth} levels") from exc
    if nesting_depth(value, max_depth) > max_depth:
        raise JSONTooDeepError(f"nests deeper than {max_depth} levels")
    return value

"""A structured output split by field, each field with the labels of whoever wrote it.

A tool may declare the fields of its output that the system itself fills in (a transaction's
``recipient`` and ``amount``, an e-mail's ``sender`` and ``timestamp``): those are trusted; every
other field carries the tool's declared source (a transaction's ``subject`` is whatever the sender
typed). An output is structured when it parses as JSON, or as YAML (the form many tool runtimes
print), into mappings and lists. A leaf takes the field name of the nearest mapping key above it,
so the items of a list under ``recipients`` are ``recipients`` fields.

Parsing is bounded: the text must fit ``MAX_STRUCTURED_CHARS``, and the walk stops after
``MAX_LEAVES`` leaves (a YAML alias cannot make it walk a shared node more than that). Anything
that does not parse, or parses to a lone scalar, is unstructured: ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from callgate._jsonlimits import loads_bounded

__all__ = ["MAX_LEAVES", "field_segments"]

#: Longest output parsed for fields.
MAX_STRUCTURED_CHARS = 262_144
#: Leaves taken from one output.
MAX_LEAVES = 10_000

Segment = tuple[str, frozenset[str]]


def field_segments(output: str, source: frozenset[str], trusted_fields: Iterable[str]
                   ) -> list[Segment] | None:
    """The output's leaves as (text, labels): no labels under a trusted field, ``source``
    elsewhere. None when the output is not structured."""
    data = _parse(output)
    if not isinstance(data, Mapping | list):
        return None
    trusted = frozenset(trusted_fields)
    out: list[Segment] = []
    stack: list[tuple[Any, str | None]] = [(data, None)]
    while stack and len(out) < MAX_LEAVES:
        value, field = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((v, str(k)) for k, v in reversed(list(value.items())))
        elif isinstance(value, list | tuple):
            stack.extend((v, field) for v in reversed(value))
        elif value is not None:
            text = value if isinstance(value, str) else str(value)
            out.append((text, frozenset() if field in trusted else source))
    return out


def _parse(output: str) -> Any:
    text = output.strip()
    if not text or len(text) > MAX_STRUCTURED_CHARS:
        return None
    if text[0] in "[{":
        try:
            return loads_bounded(text)
        except (json.JSONDecodeError, ValueError):
            pass  # a Python-style mapping ({'a': 'b'}) is YAML flow syntax
    import yaml  # only for an output that is not JSON: PyYAML costs 10 ms to import

    try:  # a safe loader: no object construction
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:  # not YAML, or nested beyond what the parser takes: unstructured
        return None

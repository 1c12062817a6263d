"""Value flow: did an argument's value appear verbatim in an earlier event's output?

Earlier outputs are indexed by word token (an inverted index from token to the outputs that
contain it), so a lookup touches only the outputs sharing the value's rarest token and then
confirms with an exact substring test. Short values are matched whole; long values (a message
body quoting a web page) are matched by windows of consecutive tokens, so a substantial quoted
passage is found even when the rest of the value is new.

Bounds: each output is indexed up to ``index_chars`` characters, and the index keeps at most
``budget_chars`` characters of output in total, dropping the oldest outputs first.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

#: Shortest value (in characters) whose appearance in an earlier output counts as a flow.
MIN_VALUE_CHARS = 6
#: Values longer than this are matched by token windows rather than whole.
WHOLE_VALUE_CHARS = 256
#: Tokens per window when matching long values, and the least characters a window spans.
WINDOW_TOKENS = 8
MIN_WINDOW_CHARS = 32
#: Most windows tried per value; most source events reported per value.
MAX_WINDOWS = 64
MAX_SOURCES = 8

_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class _Entry:
    seq: int
    text: str
    taint: frozenset[str]


class FlowIndex:
    """An index of earlier outputs, answering "which earlier outputs contain this value"."""

    def __init__(self, *, index_chars: int = 262_144, budget_chars: int = 64_000_000) -> None:
        self._index_chars = index_chars
        self._budget = budget_chars
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._postings: dict[str, list[int]] = {}
        self._size = 0
        self._next = 0

    def add(self, seq: int, text: str, taint: frozenset[str]) -> None:
        """Index the output of event ``seq`` (with the taint that output carries)."""
        if len(text) < MIN_VALUE_CHARS:
            return
        text = text[: self._index_chars]
        key = self._next
        self._next += 1
        self._entries[key] = _Entry(seq, text, taint)
        self._size += len(text)
        for token in set(_TOKEN.findall(text)):
            self._postings.setdefault(token, []).append(key)
        while self._size > self._budget and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            self._size -= len(old.text)

    def sources(self, value: str) -> list[tuple[int, frozenset[str]]]:
        """Earlier events (seq, taint) whose output contains ``value`` or a long passage of it."""
        value = value.strip()
        if len(value) < MIN_VALUE_CHARS or not self._entries:
            return []
        if len(value) <= WHOLE_VALUE_CHARS:
            return self._containing(value, _TOKEN.findall(value))
        found: dict[int, frozenset[str]] = {}
        spans = [m.span() for m in _TOKEN.finditer(value)]
        step = max(1, WINDOW_TOKENS // 2)
        tried = 0
        for start in range(0, max(1, len(spans) - WINDOW_TOKENS + 1), step):
            window = spans[start : start + WINDOW_TOKENS]
            if not window or tried >= MAX_WINDOWS:
                break
            piece = value[window[0][0] : window[-1][1]]
            if len(piece) < MIN_WINDOW_CHARS:
                continue
            tried += 1
            tokens = [value[a:b] for a, b in window]
            for seq, taint in self._containing(piece, tokens):
                found.setdefault(seq, taint)
            if len(found) >= MAX_SOURCES:
                break
        return sorted(found.items())[:MAX_SOURCES]

    def _containing(self, piece: str, tokens: list[str]) -> list[tuple[int, frozenset[str]]]:
        if tokens:
            lists = [self._postings.get(t, []) for t in set(tokens)]
            candidates = min(lists, key=len)
        else:
            candidates = list(self._entries)
        out: list[tuple[int, frozenset[str]]] = []
        for key in reversed(candidates):
            entry = self._entries.get(key)
            if entry is not None and piece in entry.text:
                out.append((entry.seq, entry.taint))
                if len(out) >= MAX_SOURCES:
                    break
        return sorted(out)

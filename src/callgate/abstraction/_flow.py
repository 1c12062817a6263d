"""Value flow and provenance: did an argument's value appear in an earlier event's content?

Earlier content is indexed by segment: an output is one segment, or, for a tool that declares
which fields of its structured output the system fills in, one segment per field, each with its
own labels (a transaction's ``recipient`` is the bank's record, its ``subject`` whatever the
sender typed). Segments are indexed three ways:

* by word token (an inverted index from token to the segments that contain it), so a lookup
  touches only the segments sharing the value's rarest token and then confirms with an exact
  substring test. Short values are matched whole; long values (a message body quoting a web page)
  by windows of consecutive tokens, so a substantial quoted passage is found even when the rest
  of the value is new;
* by identifier (e-mail addresses, URLs and host names, IBANs, phone numbers, in their normal
  form; see ``callgate._identifiers``), so an address inside free text is traced as a value and
  ``HTTPS://Example.com/`` is ``example.com``;
* by exact value, for values shorter than ``MIN_VALUE_CHARS``: a short number (a file id
  ``13``) counts only where a whole segment (a field of a structured output, or a whole output)
  is that value, never as a fragment of other text (a date holds many); a short word of letters
  (a name, ``Fred``) also where it stands as a word.

``sources`` answers "which earlier content contains this value" (value flow, newest first, at
most ``MAX_SOURCES``); ``provenance`` answers "where did this value first appear": the labels of
the earliest segment holding it, ``TRUSTED`` for content that carried no taint, ``UNSEEN`` for a
value that appeared nowhere before.

Bounds: each output is indexed up to ``index_chars`` characters, and the index keeps at most
``budget_chars`` characters of content in total, dropping the oldest first from the text index
(the identifier and exact-value indexes keep first appearances, bounded by count).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from callgate._identifiers import identifiers, normal_identifier

#: Shortest value (in characters) whose appearance in an earlier output counts as a flow.
MIN_VALUE_CHARS = 6
#: Values longer than this are matched by token windows rather than whole.
WHOLE_VALUE_CHARS = 256
#: Tokens per window when matching long values, and the least characters a window spans.
WINDOW_TOKENS = 10
MIN_WINDOW_CHARS = 32
#: Most windows tried per value; most source events reported per value.
MAX_WINDOWS = 64
MAX_SOURCES = 8

_TOKEN = re.compile(r"\w+")
#: A word of letters shorter than MIN_VALUE_CHARS: a short value of this shape (a first name)
#: is traced where it stands as a word, not only as a whole field.
_SHORT_NAME = re.compile(r"(?<![\w@.-])[^\W\d_]{2,5}(?![\w@-])")
#: The provenance of content that carried no taint (a trusted tool's output).
TRUSTED = "trusted"
#: The provenance of a value that appeared in no earlier content.
UNSEEN = "unseen"
#: Added to the labels of what a call returns when the user directed the call: every value of
#: its arguments came from the user (or the system prompt), so the content is what the user
#: pointed at (the page at the address they gave, the file they named).
USER_DIRECTED = "user-directed"
#: The labels whose content directs a call.
DIRECTING = frozenset({"user-provided", "system"})
#: Labels that say nothing against a value; any other label ``X`` of an argument's value
#: (``web``, ``email``, …) is carried over to what the call returns as ``via-X``: a hotel list
#: fetched for a city named only in a review is the review's doing (``via-retrieved-doc``),
#: though the list itself is the catalogue's. ``via-`` labels carry over unchanged.
NEUTRAL = frozenset({"user-provided", "system", TRUSTED, UNSEEN, USER_DIRECTED})
VIA = "via-"
#: First appearances remembered by identifier and by exact value.
MAX_FIRSTS = 200_000
#: Longest segment indexed by exact value.
MAX_EXACT_CHARS = 256

Segment = tuple[str, frozenset[str]]
#: The provenance of each piece of a value (each identifier, the value or each passage).
Pieces = tuple[frozenset[str], ...]


@dataclass(frozen=True, slots=True)
class _Entry:
    seq: int
    text: str
    #: what a value copied from here carries (value flow): the event's taint and the labels
    taint: frozenset[str]
    #: who wrote this content (provenance)
    labels: frozenset[str] = frozenset()
    #: the whole of a structured output, kept for passages that span its fields
    whole: bool = False
    #: its words, case folded, one space apart and around (formatting between words ignored)
    words: str = ""


class FlowIndex:
    """An index of earlier content: "which earlier outputs contain this value" (flow) and
    "where did this value first appear" (provenance)."""

    def __init__(self, *, index_chars: int = 262_144, budget_chars: int = 64_000_000,
                 provenance: bool = True) -> None:
        # First appearances serve provenance alone (``origins``): without it, an output's
        # identifiers are not looked for at all.
        self._remembers = provenance
        self._index_chars = index_chars
        self._budget = budget_chars
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._postings: dict[str, list[int]] = {}
        self._size = 0
        self._next = 0
        self._firsts: dict[str, tuple[int, frozenset[str]]] = {}

    def state(self) -> dict[str, Any]:
        """The index as plain values (what a run snapshot keeps; ``from_state`` reads it)."""
        return {"remembers": self._remembers, "index_chars": self._index_chars,
                "budget": self._budget, "size": self._size, "next": self._next,
                "entries": [(key, e.seq, e.text, e.taint, e.labels, e.whole, e.words)
                            for key, e in self._entries.items()],
                "postings": self._postings, "firsts": self._firsts}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> FlowIndex:
        """The index ``state`` describes."""
        index = cls(index_chars=int(state["index_chars"]), budget_chars=int(state["budget"]),
                    provenance=bool(state["remembers"]))
        index._size, index._next = int(state["size"]), int(state["next"])
        for key, seq, text, taint, labels, whole, words in state["entries"]:
            index._entries[key] = _Entry(seq, text, frozenset(taint), frozenset(labels),
                                         bool(whole), words)
        index._postings = {str(k): list(v) for k, v in state["postings"].items()}
        index._firsts = {str(k): (int(v[0]), frozenset(v[1]))
                         for k, v in state["firsts"].items()}
        return index

    def add(self, seq: int, text: str, taint: frozenset[str], *,
            source: frozenset[str] | None = None,
            segments: Sequence[Segment] | None = None) -> None:
        """Index the content of event ``seq``. ``taint`` is what a value copied from it carries
        (value flow); ``source`` the labels of whoever wrote it (provenance; default
        ``taint``); ``segments``, when given, the content split by field, each piece with the
        labels of whoever wrote that field."""
        if not text:  # nothing to find a value in, nothing appeared first here
            return
        written = taint if source is None else source
        pieces = [(text, written)] if segments is None else list(segments)
        if segments is not None and len(text) >= MIN_VALUE_CHARS:
            union = frozenset().union(*(labels for _, labels in pieces))
            self._add_entry(seq, text[: self._index_chars], taint | union, union, whole=True)
        left = self._index_chars
        for whole, labels in pieces:
            if left <= 0:
                break
            piece = whole[:left]
            left -= len(piece)
            if self._remembers:
                self._remember(seq, piece, labels)
            if len(piece) >= MIN_VALUE_CHARS:
                self._add_entry(seq, piece, taint | labels, labels)

    def _add_entry(self, seq: int, text: str, taint: frozenset[str], labels: frozenset[str],
                   *, whole: bool = False) -> None:
        key = self._next
        self._next += 1
        tokens = _folded_tokens(text)
        self._entries[key] = _Entry(seq, text, taint, labels, whole, _spaced(tokens))
        self._size += len(text)
        for token in set(tokens):
            self._postings.setdefault(token, []).append(key)
        while self._size > self._budget and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            self._size -= len(old.text)

    def _remember(self, seq: int, text: str, labels: frozenset[str]) -> None:
        """First appearances of the identifiers in ``text`` and of ``text`` as an exact value."""
        keys = [f"id:{ident}" for ident in identifiers(text)]
        stripped = text.strip()
        if stripped and len(stripped) <= MAX_EXACT_CHARS:
            keys.append(f"eq:{stripped}")
        # short names ("Fred", "Dora") count where they stand as a word; short numbers do not
        keys.extend(f"w:{word}" for word in dict.fromkeys(_SHORT_NAME.findall(text)))
        for key in keys:
            first = self._firsts.get(key)
            if first is None:
                if len(self._firsts) < MAX_FIRSTS:
                    self._firsts[key] = (seq, labels)
            elif seq < first[0]:  # an earlier event's output, reported late
                self._firsts[key] = (seq, labels)
            elif first[0] == seq and not labels <= first[1]:
                self._firsts[key] = (seq, first[1] | labels)  # two fields of one output

    def provenance(self, value: str) -> frozenset[str]:
        """The labels of the earliest content ``value`` appeared in (the union over its
        pieces: see ``origins``). ``UNSEEN`` for what appeared nowhere; ``TRUSTED`` stands for
        content that carried no taint."""
        return frozenset().union(*self.origins(value)[0])

    def origins(self, value: str) -> tuple[Pieces, Pieces]:
        """Where each piece of ``value`` first appeared: each identifier in it, then the value
        itself (or, for a long value, each quoted passage of it); and the identifiers' alone.
        Raises ``ValueError`` on an index made without provenance: it remembers none."""
        if not self._remembers:
            raise ValueError("this index was made without provenance: it remembers no first "
                             "appearance")
        links = tuple(_labels(self._firsts.get(f"id:{ident}")) for ident in identifiers(value))
        stripped = value.strip()
        if not stripped or normal_identifier(stripped) is not None:
            return links, links
        if len(stripped) < MIN_VALUE_CHARS:
            hits = [f for f in (self._firsts.get(f"eq:{stripped}"),
                                self._firsts.get(f"w:{stripped}")) if f is not None]
            rest: Pieces = (_labels(min(hits, key=lambda f: f[0]) if hits else None),)
        else:
            pieces = [(stripped, _TOKEN.findall(stripped))] \
                if len(stripped) <= WHOLE_VALUE_CHARS else _windows(stripped)
            hits = [hit for piece, tokens in pieces if (hit := self._first(piece, tokens))]
            rest = tuple(_labels(h) for h in hits) or (frozenset({UNSEEN}),)
        return links + rest, links

    def _first(self, piece: str, tokens: list[str]) -> tuple[int, frozenset[str]] | None:
        """Where ``piece`` first appeared: in one segment where it did, else across the
        fields of a structured output."""
        return self._earliest(piece, tokens, False) or self._earliest(piece, tokens, True)

    def _candidates(self, tokens: list[str]) -> list[int]:
        if not tokens:
            return list(self._entries)
        lists = [self._postings.get(t.casefold(), []) for t in set(tokens)]
        return min(lists, key=len)

    def _earliest(self, piece: str, tokens: list[str], whole: bool
                  ) -> tuple[int, frozenset[str]] | None:
        """The earliest segment (or whole structured output) containing ``piece`` (or its
        words in order, whatever the case and the formatting between them), with the union of
        labels of that event's segments that do; or None."""
        words = _spaced([t.casefold() for t in tokens])
        first: tuple[int, frozenset[str]] | None = None
        for key in self._candidates(tokens):  # a late report may index an earlier event
            entry = self._entries.get(key)
            if entry is None or entry.whole != whole or (
                    first is not None and entry.seq > first[0]) or not _holds(entry, piece,
                                                                                words):
                continue
            if first is None or entry.seq < first[0]:
                first = (entry.seq, entry.labels)
            else:
                first = (first[0], first[1] | entry.labels)
        return first

    def sources(self, value: str) -> list[tuple[int, frozenset[str]]]:
        """Earlier events (seq, taint) whose output contains ``value`` or a long passage of it."""
        value = value.strip()
        if len(value) < MIN_VALUE_CHARS or not self._entries:
            return []
        if len(value) <= WHOLE_VALUE_CHARS:
            return self._containing(value, _TOKEN.findall(value))
        found: dict[int, frozenset[str]] = {}
        for piece, tokens in _windows(value):
            for seq, taint in self._containing(piece, tokens):
                found.setdefault(seq, taint)
            if len(found) >= MAX_SOURCES:
                break
        return sorted(found.items())[:MAX_SOURCES]

    def _containing(self, piece: str, tokens: list[str]) -> list[tuple[int, frozenset[str]]]:
        # The same words in order count only when the words themselves are long enough to be
        # a value: "0::::!" is six characters, but its one word "0" is in every listing.
        spelled = sum(len(t) for t in tokens) >= MIN_VALUE_CHARS
        words = _spaced([t.casefold() for t in tokens]) if spelled else ""
        out: dict[int, frozenset[str]] = {}
        for key in reversed(self._candidates(tokens)):
            entry = self._entries.get(key)
            if entry is not None and _holds(entry, piece, words):
                # one source per event: a field and its whole structured output are one
                out[entry.seq] = out.get(entry.seq, frozenset()) | entry.taint
                if len(out) >= MAX_SOURCES:
                    break
        return sorted(out.items())


def _windows(value: str) -> list[tuple[str, list[str]]]:
    """Passages of a long value to look for: windows of consecutive tokens (at most
    ``MAX_WINDOWS``, each spanning at least ``MIN_WINDOW_CHARS``), with their tokens."""
    spans = [m.span() for m in _TOKEN.finditer(value)]
    step = max(1, WINDOW_TOKENS // 2)
    out: list[tuple[str, list[str]]] = []
    for start in range(0, max(1, len(spans) - WINDOW_TOKENS + 1), step):
        window = spans[start : start + WINDOW_TOKENS]
        if not window or len(out) >= MAX_WINDOWS:
            break
        piece = value[window[0][0] : window[-1][1]]
        if len(piece) >= MIN_WINDOW_CHARS:
            out.append((piece, [value[a:b] for a, b in window]))
    return out


def _labels(first: tuple[int, frozenset[str]] | None) -> frozenset[str]:
    if first is None:
        return frozenset({UNSEEN})
    return first[1] or frozenset({TRUSTED})


def _folded_tokens(text: str) -> list[str]:
    """The words of ``text``, each case folded. ASCII text is folded whole first (the same
    words: folding ASCII changes no character's class nor any length); elsewhere word by word,
    since folding can split a word (``İ`` folds to ``i`` and a combining dot)."""
    if text.isascii():
        return _TOKEN.findall(text.lower())
    return [t.casefold() for t in _TOKEN.findall(text)]


def _spaced(tokens: list[str]) -> str:
    return f" {' '.join(tokens)} " if tokens else ""


def _holds(entry: _Entry, piece: str, words: str) -> bool:
    """Whether the entry's text holds ``piece``: verbatim, or as the same words in order."""
    return piece in entry.text or (bool(words) and words in entry.words)

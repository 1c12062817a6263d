"""Tokens of the behavioral language, each with its offset, and offsets mapped to file places.

A statement's text may come from a YAML scalar that was folded (a plain multi-line scalar loses
its line breaks and indentation), so the text the parser sees can differ from the text in the
file. ``Placer`` maps an offset in the parsed text back to a line and column in the file by
walking both texts in step over their non-blank characters, which YAML folding preserves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from callgate._errors import Problem, TemporalError
from callgate.temporal._nodes import Pos

TokenKind = Literal["ident", "string", "number", "var", "punct", "end"]

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<var>\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.\-]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<punct>!~\*|~\*|!=|!~|>=|<=|[()\[\]{},=~<>])
    """,
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind, its text (strings unquoted and unescaped) and where it starts."""

    kind: TokenKind
    text: str
    offset: int


class Placer:
    """Maps offsets in a statement's text to places in the source it came from."""

    def __init__(
        self, text: str, source: str, line: int, column: int, raw: str | None = None
    ) -> None:
        self.source = source
        self._line = line
        self._column = column
        self._raw = raw if raw is not None and raw != text else None
        self._text = text
        self._map: list[int] | None = None

    def pos(self, offset: int) -> Pos:
        """The place of ``offset`` (an index into the parsed text)."""
        raw_offset = offset if self._raw is None else self._raw_offset(offset)
        base = self._raw if self._raw is not None else self._text
        before = base[:raw_offset]
        newlines = before.count("\n")
        if newlines == 0:
            return Pos(self.source, self._line, self._column + raw_offset)
        return Pos(self.source, self._line + newlines, raw_offset - before.rfind("\n"))

    def _raw_offset(self, offset: int) -> int:
        # The k-th non-blank character of the parsed text is the k-th of the raw text.
        if self._map is None:
            assert self._raw is not None
            self._map = [i for i, ch in enumerate(self._raw) if not ch.isspace()]
        count = sum(1 for ch in self._text[:offset] if not ch.isspace())
        if count < len(self._map):
            return self._map[count]
        return len(self._raw or "")


def tokenize(text: str, placer: Placer) -> list[Token]:
    """Split ``text`` into tokens; raise ``TemporalError`` at the first character that fits none."""
    tokens: list[Token] = []
    offset = 0
    while offset < len(text):
        match = _TOKEN.match(text, offset)
        if match is None:
            pos = placer.pos(offset)
            raise TemporalError(
                [
                    Problem(
                        f"unexpected character {text[offset]!r}",
                        pos.source,
                        pos.line,
                        pos.column,
                    )
                ]
            )
        kind = match.lastgroup
        if kind != "space":
            value = match.group()
            if kind == "string":
                value = _ESCAPE.sub(r"\1", value[1:-1])
            tokens.append(Token(kind, value, offset))  # type: ignore[arg-type]  # kind comes from the token table's names
        offset = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens

"""Fixed expressions behind a literal screen: RE2 runs only where a match is possible.

callgate's own fixed expressions (sensitive paths, secret resources, credential shapes) search
every string of every call. RE2 keeps each search linear in the text, but a call into it costs
microseconds however short the text, and nearly every text holds none of what the expression
looks for. Each expression here is paired with literals one of which every match contains
(``credential`` for ``…|credential|…``, ``AKIA`` or ``ASIA`` for an AWS access key). A text
that holds none of them cannot match, and RE2 is not called; any other text is searched by RE2
as before, so the answer is always RE2's.

For an expression that ignores case the screen is applied to ASCII text only (lower-cased):
Unicode case folding has letters outside ASCII that match ASCII ones (the long s, the Kelvin
sign), so a text with any non-ASCII character always goes to RE2. The screen itself is a
substring search per literal (``str.find``'s, linear in the text): on the short texts of a call
it is several times quicker than one alternation of the literals in Python's ``re``, which
tries each literal at each position.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

#: ASCII capitals to small letters, nothing else (one character for one, unlike ``str.lower``).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class Screened:
    """An RE2 expression and the literals one of which each of its matches contains.

    ``search`` and ``finditer`` answer exactly as the RE2 expression does; ``ignore_case``
    says the expression ignores case (then the screen does too, on ASCII text only);
    ``source`` is the expression as written (Python syntax), when it differs from RE2's.
    """

    def __init__(self, regex: Any, literals: Iterable[str], *, ignore_case: bool,
                 source: str | None = None) -> None:
        self.source: str = regex.pattern if source is None else source
        self.literals = tuple(literals)
        if not self.literals or any(not lit or "\n" in lit for lit in self.literals):
            raise ValueError("a screen needs literals, none of them empty or holding a line end")
        self._regex = regex
        self._compile: Callable[[str], Any] | None = None
        self._ignore_case = ignore_case
        # what ``possible_each`` looks for: the literals, ASCII letters lower-cased if need be
        self._sought = tuple(dict.fromkeys(
            lit.translate(_ASCII_LOWER) if ignore_case else lit for lit in self.literals))

    @classmethod
    def later(cls, source: str, compile_regex: Callable[[str], Any], literals: Iterable[str],
              *, ignore_case: bool) -> Screened:
        """A screen whose expression ``compile_regex(source)`` is compiled the first time a
        text gets past the screen (a translation to RE2 can cost a good part of a second;
        most processes never need it)."""
        screened = cls(None, literals, ignore_case=ignore_case, source=source)
        screened._compile = compile_regex
        return screened

    def possible(self, text: str) -> bool:
        """False only when ``text`` cannot match (it holds none of the literals)."""
        if self._ignore_case:
            if not text.isascii():
                return True
            text = text.lower()  # of an ASCII text: its capitals only, as ``_ASCII_LOWER``
        for literal in self._sought:  # noqa: SIM110 - no generator on every string of every call
            if literal in text:
                return True
        return False

    def possible_each(self, texts: Sequence[str]) -> list[bool]:
        """``[self.possible(t) for t in texts]``, found by looking for each literal in the
        texts joined by line ends (ASCII letters lower-cased first when the screen ignores
        case, which keeps every offset): no literal holds a line end, so every occurrence
        lies inside one text, and once a text is marked the search goes on after it."""
        flags = [False] * len(texts)
        if not texts:
            return flags
        ends = list(itertools.accumulate(len(text) + 1 for text in texts))
        joined = "\n".join(texts)
        if self._ignore_case:
            joined = joined.translate(_ASCII_LOWER)
        for literal in self._sought:
            at = joined.find(literal)
            while at >= 0:
                index = bisect.bisect_right(ends, at)
                flags[index] = True
                at = joined.find(literal, ends[index])
        if self._ignore_case and not joined.isascii():
            for i, text in enumerate(texts):
                if not flags[i] and not text.isascii():
                    flags[i] = True
        return flags

    def search(self, text: str) -> Any:
        """RE2's first match in ``text``, or None."""
        return self.regex.search(text) if self.possible(text) else None

    def finditer(self, text: str) -> Iterator[Any]:
        """RE2's matches in ``text``."""
        if self.possible(text):
            yield from self.regex.finditer(text)

    @property
    def regex(self) -> Any:
        """The RE2 expression itself (compiled now if it was left for later)."""
        if self._regex is None:
            assert self._compile is not None
            self._regex = self._compile(self.source)  # two threads may both compile: harmless
        return self._regex

"""Set inclusion between declarations: does an old glob (or host pattern) cover a new one?

The verifier asks, for every path glob and host pattern of the current manifest, whether the
baseline already allowed everything it matches. Answers are judged by the sets the patterns
denote, not by their text: ``/srv/uploads/a/**`` is covered by ``/srv/uploads/**``, ``/**`` is
not. The check is sound but not complete: ``True`` means inclusion is proved; when a proof is
not found (a ``..`` segment, a class compared with another class, a relative glob against an
absolute one) the answer is ``False``, which the verifier reports as a widening.

Glob syntax is the path gate's: ``**`` is zero or more whole segments, ``*`` and ``?`` stay within
one segment, ``[abc]`` / ``[a-z]`` / ``[!abc]`` are classes. The comparison is lexical: a symlink
under an old root that leads elsewhere is the runtime path gate's concern (it resolves both
sides with ``realpath``), not this module's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from callgate.matchers._paths import class_end, class_pattern

_GLOB_CHARS = frozenset("*?[")

#: A segment token: ("lit", char), ("any",) for ``?``, ("star",) for ``*``, ("class", text).
Token = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Glob:
    """A glob split into its anchor (``/``, ``~`` or relative) and its segments."""

    anchor: str
    segments: tuple[str, ...]
    dotdot: bool


def _split(pattern: str) -> _Glob:
    text = pattern.strip()
    if text.startswith("/"):
        anchor = "/"
    elif text == "~" or text.startswith("~/"):
        anchor, text = "~", text[1:]
    else:
        anchor = "."
    segments = tuple(s for s in text.split("/") if s not in ("", "."))
    return _Glob(anchor, segments, ".." in segments)


@functools.lru_cache(maxsize=2048)
def _tokens(segment: str) -> tuple[Token, ...]:
    out: list[Token] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            if not out or out[-1] != ("star",):  # "**" inside a segment is one star
                out.append(("star",))
        elif char == "?":
            out.append(("any",))
        elif char == "[" and (end := class_end(segment, i)) > 0:
            out.append(("class", segment[i + 1 : end]))
            i = end
        else:
            out.append(("lit", char))
        i += 1
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _class_regex(body: str) -> re.Pattern[str]:
    # The same class syntax as the path gate's globs, from the same code.
    return re.compile(class_pattern(body))


def _token_covers(old: Token, new: Token) -> bool:
    """Whether one-character token ``old`` matches every character ``new`` can match."""
    if old == new or (old[0] == "any" and new[0] != "star"):
        return True
    if old[0] == "class" and new[0] == "lit":
        return new[1] != "/" and _class_regex(old[1]).fullmatch(new[1]) is not None
    return False


def _segment_covers(old: tuple[Token, ...], new: tuple[Token, ...]) -> bool:
    @functools.cache
    def walk(i: int, j: int) -> bool:
        if i == len(old):
            return j == len(new)
        if old[i] == ("star",):
            # The star matches nothing more, or swallows the next new token (any of which
            # produces only non-slash characters, so a star can absorb it).
            return walk(i + 1, j) or (j < len(new) and walk(i, j + 1))
        if j == len(new):
            return False
        return _token_covers(old[i], new[j]) and walk(i + 1, j + 1)

    return walk(0, 0)


def _segments_cover(old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    @functools.cache
    def walk(i: int, j: int) -> bool:
        if i == len(old):
            return j == len(new)
        if old[i] == "**":
            return walk(i + 1, j) or (j < len(new) and walk(i, j + 1))
        if j == len(new) or new[j] == "**":
            return False
        return _segment_covers(_tokens(old[i]), _tokens(new[j])) and walk(i + 1, j + 1)

    return walk(0, 0)


def glob_covers(old: str, new: str) -> bool:
    """Whether every path glob ``new`` matches is matched by glob ``old`` (proved, or False)."""
    if old.strip() == new.strip():
        return True
    a, b = _split(old), _split(new)
    if a.anchor != b.anchor or a.dotdot or b.dotdot:
        return False
    return _segments_cover(a.segments, b.segments)


def globs_cover(old: Iterable[str], new: str) -> bool:
    """Whether some glob in ``old`` covers ``new``."""
    return any(glob_covers(o, new) for o in old)


def uncovered_globs(old: Iterable[str], new: Iterable[str]) -> list[str]:
    """The globs of ``new`` that no glob of ``old`` covers, in order."""
    before = tuple(old)
    return [g for g in new if not globs_cover(before, g)]


def _host(pattern: str) -> str:
    return pattern.strip().lower().rstrip(".")


def host_covers(old: str, new: str) -> bool:
    """Whether host pattern ``old`` allows every host ``new`` allows.

    Patterns are exact hosts or ``*.suffix`` (one or more labels below ``suffix``, not
    ``suffix`` itself), as the network checks read them.
    """
    a, b = _host(old), _host(new)
    if a == b:
        return True
    if not a.startswith("*."):
        return False
    suffix = a[1:]  # ".example.org"
    if b.startswith("*."):
        return b[1:].endswith(suffix)
    return b.endswith(suffix) and len(b) > len(suffix)


def uncovered_hosts(old: Iterable[str], new: Iterable[str]) -> list[str]:
    """The host patterns of ``new`` that no pattern of ``old`` covers, in order."""
    before = tuple(old)
    return [h for h in new if not any(host_covers(o, h) for o in before)]


def has_wildcard(pattern: str) -> bool:
    """Whether a glob holds a wildcard or class."""
    return bool(_GLOB_CHARS & set(pattern))

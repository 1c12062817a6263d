"""Whether an RE2 expression matches, asked of RE2 directly.

The ``re2`` package's ``search`` and ``fullmatch`` wrap RE2's ``Match`` in a generator and a
match object, which costs twice the match itself, and a generator left suspended after its
first answer is closed with a traceback. The checks that run on every call (path globs, policy
argument patterns, statement text patterns) only need whether there is a match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import re2  # google-re2 ships no type information (ignore_missing_imports in pyproject)

__all__ = ["re2_test"]

#: RE2's anchors, for the direct calls of ``re2_test`` (None: the package does not expose
#: them, and its wrapper is used).
_ANCHOR_KINDS: Any = getattr(re2, "_Anchor", None)
_ANCHORS: dict[str, Any] | None = None if _ANCHOR_KINDS is None else {
    "search": _ANCHOR_KINDS.UNANCHORED, "fullmatch": _ANCHOR_KINDS.ANCHOR_BOTH}


def re2_test(regexp: Any, mode: Literal["search", "fullmatch"]) -> Callable[[bytes], bool]:
    """Whether ``regexp`` (a ``re2.compile`` result) is found in UTF-8 bytes (``search``) or
    matches all of them (``fullmatch``): RE2's ``Match`` called directly when the package
    exposes it, else the package's wrapper. Given bytes, the wrapper makes exactly that call,
    so the answers are the same (a test holds them equal)."""
    engine: Any = getattr(regexp, "_regexp", None)
    if _ANCHORS is not None and callable(getattr(engine, "Match", None)):
        anchor = _ANCHORS[mode]
        match = engine.Match

        def direct(data: bytes) -> bool:
            found: tuple[int, int] = match(anchor, data, 0, len(data))[0]
            return found[0] >= 0

        return direct
    wrapped = regexp.search if mode == "search" else regexp.fullmatch
    return lambda data: wrapped(data) is not None

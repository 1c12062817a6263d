"""The injection guard: injected instructions and look-alike letters that reach a tool.

Text is normalised before it is matched: NFKC (full-width and compatibility forms), zero-width
and bidirectional control characters removed, Cyrillic and Greek letters that look like Latin
ones mapped to them, case folded, whitespace collapsed. "ignore previous instructions" written with
the Cyrillic letter U+0456 in place of each "i" then reads as the phrase it imitates.

Two rules:

* a parameter whose normalised text contains an injected-instruction phrase is denied
  (``guard.injection.homoglyph`` when look-alikes were needed to see it, else
  ``guard.injection.phrase``);
* a word mixing Latin with Cyrillic or Greek letters in a command, URL, host or path parameter
  is denied (``guard.injection.mixed-script``): no program or file name needs one, and a
  look-alike name is how a command or host is disguised. Text in one script (Russian, Greek)
  is fine.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from callgate._model import Reason, ToolCall, ToolResult
from callgate.guards._scan import scan_of
from callgate.guards._text import CACHED_CHARS, walk_strings
from callgate.matchers._screen import Screened

#: Cyrillic and Greek letters that render like Latin ones (lower case; input is case-folded).
CONFUSABLES: Mapping[str, str] = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d",
    "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "ɡ": "g", "ь": "b", "п": "n", "г": "r",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o",
    "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j", "ς": "c", "μ": "u",
}
_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f"
                        "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")
_SPACES = re.compile(r"\s+")
_TABLE = str.maketrans(dict(CONFUSABLES))

#: Phrases of injected instructions, matched on normalised text.
DEFAULT_PHRASES: tuple[str, ...] = (
    r"ignore (?:all |any |the )?(?:previous|prior|above|earlier|preceding) "
    r"(?:instructions|prompts|rules|directions)",
    r"disregard (?:all |any |the )?(?:previous|prior|above|earlier|your) "
    r"(?:instructions|prompts|rules|guidelines)",
    r"forget (?:all |any )?(?:previous|prior|your|earlier) (?:instructions|rules|prompts)",
    r"(?:new|updated|override) (?:system )?instructions ?:",
    r"you are now (?:in )?(?:developer|dan|jailbreak|admin|god) mode",
    r"do not (?:tell|inform|alert|notify) the user",
    r"(?:reveal|print|output|leak) (?:your|the) system prompt",
)
#: One of these is in every text a default phrase matches (after ``normalise``): a text with
#: none of them is not searched.
_PHRASE_LITERALS = ("ignore ", "disregard ", "forget ", "instructions", " mode", "do not ",
                    "system prompt")
#: Parameters that name a command, a place or an address (where a mixed-script word is a
#: disguise, never prose).
NAME_KEYS = frozenset({"command", "argv", "cmd", "program", "args", "url", "host", "hostname",
                       "path", "paths", "file", "filename", "dest", "destination", "target",
                       "to", "recipient", "database", "table", "name"})
_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=4096)
def _normalise_cached(text: str) -> str:
    return _normalise(text)


def normalise(text: str) -> str:
    """NFKC, invisible characters removed, look-alikes mapped to Latin, folded, collapsed."""
    return _normalise_cached(text) if len(text) <= CACHED_CHARS else _normalise(text)


def _normalise(text: str) -> str:
    if text.isascii():  # nothing to map: NFKC and the look-alike table leave ASCII alone
        return _SPACES.sub(" ", text.casefold()).strip()
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    # Mapped before and after case folding: folding turns some look-alikes into letters
    # that look like nothing Latin (final sigma into sigma), and capitals into small ones.
    return _SPACES.sub(" ", text.translate(_TABLE).casefold().translate(_TABLE)).strip()


def _unmapped(text: str) -> str:
    """``normalise`` without the look-alike map: what a reader sees without squinting."""
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    return _SPACES.sub(" ", text.casefold()).strip()


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    for script in ("LATIN", "CYRILLIC", "GREEK"):
        if name.startswith(script):
            return script
    return "OTHER"


def mixed_script_word(text: str) -> str | None:
    """The first word mixing Latin letters with Cyrillic or Greek ones, or None."""
    if text.isascii():
        return None
    for word in _WORD.findall(unicodedata.normalize("NFKC", text)):
        scripts = {s for s in map(_script, word) if s is not None}
        if "LATIN" in scripts and scripts & {"CYRILLIC", "GREEK"}:
            return str(word)
    return None


def _named_strings(params: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    for key, value in params.items():
        if key.lower() in NAME_KEYS:
            for text in walk_strings(value):
                yield key, text


class InjectionGuard:
    """Deny calls carrying injected-instruction phrases or disguised (mixed-script) names."""

    name = "injection"

    def __init__(self, extra_phrases: Iterable[str] = ()) -> None:
        extra = [normalise(p) for p in extra_phrases]
        phrases = re.compile("|".join(
            f"(?:{p})" for p in (*DEFAULT_PHRASES, *(re.escape(p) for p in extra))))
        # A text holding none of the phrases' literals is not searched (an extra phrase is its
        # own literal; one that normalises to nothing matches every text, so none is skipped).
        self._search: Callable[[str], re.Match[str] | None] = Screened(
            phrases, (*_PHRASE_LITERALS, *extra), ignore_case=False).search if all(extra) \
            else phrases.search

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        """A reason to deny a call whose parameters carry an injection."""
        for key, text in _named_strings(call.parameters):
            word = mixed_script_word(text)
            if word is not None:
                return Reason(id="guard.injection.mixed-script", check="guard",
                              message=f"parameter {key!r} holds a word mixing Latin with "
                                      f"look-alike letters ({word!r})")
        for text in scan_of(call).strings:
            found = self._search(normalise(text))
            if found is None:
                continue
            what = "phrase" if self._search(_unmapped(text)) else "homoglyph"
            return Reason(id=f"guard.injection.{what}", check="guard",
                          message=f"a parameter carries an injected instruction "
                                  f"({found.group(0)!r})")
        return None

    def observe(self, call: ToolCall, result: ToolResult | None) -> None:
        """Nothing to learn: the rule is about what reaches a tool."""

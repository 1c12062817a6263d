"""Policy patterns run on RE2, a linear-time engine, with the meaning Python's ``re`` gives them.

A policy's ``parameters.<name>.pattern`` runs against attacker-influenced arguments on every
call. A backtracking engine can take exponential time on some patterns, so guessing which
patterns are safe leaves holes; RE2 cannot be slow on any pattern (time linear in the text).
The two engines do not agree on what a pattern means, so a pattern is never handed to RE2 as
written. ``compile_policy_pattern`` parses it with Python's own parser (``re._parser``) and
emits RE2 syntax with the same meaning, or refuses it with a ``PatternError`` naming the
construct and what to write instead:

* every character item (literal, ``.``, class, ``\\w \\d \\s`` and their negations, under
  ``(?i)``, ``(?s)`` and ``(?a)``) becomes an explicit set of code points, computed from what
  Python's engine matches (``\\w`` stays Unicode, ``(?i)`` keeps Python's case folding, the long
  s and the Kelvin sign included), so RE2's own classes and case folding are never used;
* ``^ \\A \\Z (?m)^ (?m)$`` map to RE2's anchors; a plain ``$`` (end, or before a final
  newline) is accepted where it ends the pattern;
* ``\\b`` is accepted under ``(?a)`` (RE2's word boundary is ASCII), ``(?!x)y`` and ``(?=x)y``
  over single characters become one set; other lookarounds, ``\\B``, back-references,
  conditionals, possessive quantifiers and atomic groups are refused;
* counted repeats above ``MAX_REPEAT_COUNT`` and patterns longer than ``MAX_PATTERN_LENGTH``
  are refused, and so is syntax Python warns will change meaning (``[[``).

RE2 reads UTF-8, so a text holding a lone surrogate (which has no UTF-8 form) cannot be
matched: ``PolicyPattern.matches`` raises ``SubjectError`` and the decision fails closed.
"""

from __future__ import annotations

import array
import functools
import importlib
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import re2  # google-re2 ships no type information (ignore_missing_imports in pyproject)

from callgate._errors import CallgateError
from callgate._re2 import re2_test

# ``re._parser`` and ``re._compiler`` are the engine's own; typeshed does not describe them.
_parser: Any = importlib.import_module("re._parser")
_compiler: Any = importlib.import_module("re._compiler")
_c: Any = importlib.import_module("re._constants")
_casefix: Any = importlib.import_module("re._casefix")
_sre: Any = importlib.import_module("_sre")

#: Longer policy patterns are refused outright: nobody audits a 2 KiB regex.
MAX_PATTERN_LENGTH = 512
#: RE2 refuses counted repeats above this (``a{1001}``).
MAX_REPEAT_COUNT = 1000

Mode = Literal["search", "fullmatch"]
Intervals = tuple[tuple[int, int], ...]

_MAX_CODE = 0x10FFFF
_NOT_SURROGATES: Intervals = ((0, 0xD7FF), (0xE000, _MAX_CODE))
_ALL: Intervals = ((0, _MAX_CODE),)
_NOTHING: Intervals = ()
_CHAR_ITEMS = frozenset({_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN})
_REPEATS = frozenset({_c.MAX_REPEAT, _c.MIN_REPEAT})
_CATEGORY_CLASSES = {
    _c.CATEGORY_DIGIT: r"\d", _c.CATEGORY_NOT_DIGIT: r"\D",
    _c.CATEGORY_SPACE: r"\s", _c.CATEGORY_NOT_SPACE: r"\S",
    _c.CATEGORY_WORD: r"\w", _c.CATEGORY_NOT_WORD: r"\W",
}


class PatternError(CallgateError):
    """A pattern cannot run on the linear-time engine with the meaning Python gives it."""


class SubjectError(CallgateError):
    """A text cannot be matched (it holds a lone surrogate, which has no UTF-8 form)."""


class _Refused(Exception):  # noqa: N818 - internal signal carrying the reason, never escapes
    """Raised inside the translation with the reason the pattern is refused."""


@dataclass(frozen=True, slots=True)
class PolicyPattern:
    """A compiled policy pattern: ``source`` as written, ``translated`` as RE2 runs it."""

    source: str
    translated: str
    mode: Mode
    _regexp: Any
    _test: Callable[[bytes], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_test", re2_test(self._regexp, self.mode))

    def matches(self, text: str) -> bool:
        """Whether the pattern is found in ``text`` (``search``) or matches all of it.

        Raises ``SubjectError`` for a text holding a lone surrogate.
        """
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SubjectError(
                f"text holds a lone surrogate at index {exc.start}; it cannot be matched"
            ) from exc
        return self._test(data)


def compile_policy_pattern(
    text: str, mode: Mode = "search", *, max_length: int | None = MAX_PATTERN_LENGTH
) -> PolicyPattern:
    """Compile a Python-syntax pattern to RE2 with the same meaning, or raise ``PatternError``.

    ``mode`` is how it will be matched: ``search`` (found anywhere) or ``fullmatch`` (the whole
    text). ``max_length`` bounds policy-written patterns; generated ones (globs) pass None.
    """
    if max_length is not None and len(text) > max_length:
        raise PatternError(f"pattern is {len(text)} characters long (at most {max_length})")
    tree = _parse(text)
    try:
        translated = _Translator(mode).sequence(list(tree), tree.state.flags, tail=True)
    except _Refused as exc:
        raise PatternError(str(exc)) from None
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, RecursionError) as exc:
        # A tree shape this translation does not know: refuse rather than guess its meaning.
        raise PatternError(f"pattern could not be translated ({type(exc).__name__})") from exc
    return PolicyPattern(text, translated, mode, _re2_compile(translated))


def compile_search_regex(text: str) -> Any:
    """Compile one of callgate's own expressions to an RE2 regexp with Python's meaning.

    For fixed expressions that search attacker-supplied text and read what they found (the
    guards' credential shapes): capturing groups keep their numbers and lazy repeats stay lazy,
    so ``finditer``, ``group`` and ``lastindex`` answer as Python's would, in time linear in the
    text. A plain ``$`` is refused (write ``\\Z`` or ``(?m)$``), and so is a pattern that can
    match the empty string (RE2's ``finditer`` repeats an empty match at the end of a text).
    Raises ``PatternError``.
    """
    tree = _parse(text)
    if tree.getwidth()[0] == 0:
        raise PatternError("pattern can match the empty string")
    try:
        translated = _Translator("search", groups=True).sequence(
            list(tree), tree.state.flags, tail=False)
    except _Refused as exc:
        raise PatternError(str(exc)) from None
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(translated, options)
    except re2.error as exc:
        raise PatternError(f"pattern is too large for the linear-time engine ({exc})") from exc


def check_pattern(text: str) -> str | None:
    """Why a policy pattern is refused, or None when it compiles (the loader's check)."""
    try:
        compile_policy_pattern(text)
    except PatternError as exc:
        return str(exc)
    return None


def _parse(text: str) -> Any:
    try:
        with warnings.catch_warnings():
            # Syntax whose meaning Python says will change ("possible nested set") is refused:
            # a policy must mean the same thing on every interpreter that loads it.
            warnings.simplefilter("error")
            re.compile(text)
            return _parser.parse(text)
    except (FutureWarning, DeprecationWarning) as exc:
        raise PatternError(f"pattern uses ambiguous syntax: {exc}") from exc
    except (re.error, RecursionError, OverflowError) as exc:
        raise PatternError(f"pattern does not compile: {exc}") from exc


def _re2_compile(translated: str) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    try:
        return re2.compile(translated, options)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise PatternError(
            f"pattern is too large for the linear-time engine ({detail}); "
            "use fewer or smaller counted repeats"
        ) from exc


class _Translator:
    """Emits RE2 syntax for one parsed pattern; raises ``_Refused`` at what it cannot keep."""

    def __init__(self, mode: Mode, *, groups: bool = False) -> None:
        self.mode = mode
        # Keep capturing groups and lazy repeats (what was found is read, not only whether).
        self.groups = groups

    def sequence(self, items: Sequence[Any], flags: int, *, tail: bool) -> str:
        """RE2 text for ``items``; ``tail`` when nothing after them can consume a character."""
        out: list[str] = []
        i = 0
        while i < len(items):
            op, av = items[i]
            merged = _lookahead_set(items, i, flags)
            if merged is not None:
                out.append(_emit_set(merged))
                i += 2
                continue
            out.append(self.item(op, av, flags, tail=tail and i == len(items) - 1))
            i += 1
        return "".join(out)

    def item(self, op: Any, av: Any, flags: int, *, tail: bool) -> str:
        """RE2 text for one node of the parse tree."""
        if op in _CHAR_ITEMS:
            return _emit_set(_item_set(op, av, flags))
        if op == _c.SUBPATTERN:
            inner = _combine(flags, av[1], av[2])
            opener = "(" if self.groups and av[0] is not None else "(?:"
            return opener + self.sequence(list(av[3]), inner, tail=tail) + ")"
        if op == _c.BRANCH:
            return "(?:" + "|".join(self.sequence(list(a), flags, tail=tail) for a in av[1]) + ")"
        if op in _REPEATS:
            lazy = "?" if self.groups and op == _c.MIN_REPEAT else ""
            return self.repeat(av, flags) + lazy
        if op == _c.AT:
            return self.anchor(av, flags, tail=tail)
        raise _Refused(_unsupported(op))

    def repeat(self, av: Any, flags: int) -> str:
        low, high, body = av
        bounded = high != _c.MAXREPEAT
        if low > MAX_REPEAT_COUNT or (bounded and high > MAX_REPEAT_COUNT):
            raise _Refused(
                f"counted repeats go up to {MAX_REPEAT_COUNT} (this one is "
                f"{{{low},{high if bounded else ''}}}); split the repeat or bound it lower"
            )
        if self.groups and body.getwidth()[0] == 0 and _captures(body):
            # ``(x*)*``: Python's last round matches nothing and empties the group, RE2's
            # keeps the round before; what a group found would differ
            raise _Refused("a repeated part that can match nothing may not hold a capturing "
                           "group; make the group's body match at least one character")
        inner = "(?:" + self.sequence(list(body), flags, tail=False) + ")"
        if not bounded:
            return inner + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}")
        return inner + (f"{{{low}}}" if low == high else f"{{{low},{high}}}")

    def anchor(self, code: Any, flags: int, *, tail: bool) -> str:
        multiline = bool(flags & re.MULTILINE)
        if code in (_c.AT_BEGINNING_STRING, _c.AT_BEGINNING) and not (
            code == _c.AT_BEGINNING and multiline
        ):
            return r"\A"
        if code == _c.AT_BEGINNING:
            return "(?m:^)"
        if code == _c.AT_END_STRING:
            return r"\z"
        if code == _c.AT_END and multiline:
            return "(?m:$)"
        if code == _c.AT_END:
            if not tail:
                raise _Refused(
                    "$ is accepted only where it ends the pattern (Python's $ also matches "
                    r"before a final newline); write \Z for the end of the text, or (?m)$"
                )
            return r"\z" if self.mode == "fullmatch" else r"(?:\n?\z)"
        if code == _c.AT_BOUNDARY and flags & re.ASCII:
            return r"\b"
        if code == _c.AT_BOUNDARY:
            raise _Refused(
                r"\b is refused: the linear-time engine's word boundary is ASCII-only while "
                r"Python's is Unicode; add (?a) to use ASCII word boundaries, or spell out "
                r"the characters around the word, as in (^|[^\w])word([^\w]|$)"
            )
        raise _Refused(r"\B is refused; spell out the characters around it instead")


def _captures(tree: Any) -> bool:
    """Whether a parsed (sub)pattern holds a capturing group."""
    for op, av in tree:
        if op == _c.SUBPATTERN and (av[0] is not None or _captures(av[3])):
            return True
        if op in _REPEATS and _captures(av[2]):
            return True
        if op == _c.BRANCH and any(_captures(a) for a in av[1]):
            return True
    return False


def _unsupported(op: Any) -> str:
    what = {
        _c.GROUPREF: r"back-references (\1, (?P=name))",
        _c.GROUPREF_EXISTS: "conditional groups ((?(1)a|b))",
        _c.POSSESSIVE_REPEAT: "possessive quantifiers (a*+, a++)",
        _c.ATOMIC_GROUP: "atomic groups ((?>...))",
        _c.ASSERT: "lookahead and lookbehind ((?=...), (?<=...))",
        _c.ASSERT_NOT: "negative lookahead and lookbehind ((?!...), (?<!...))",
    }.get(op, f"the construct {op}")
    return (
        f"{what} cannot run in linear time and are refused; match the text directly "
        "(a separate rule, or a character class such as [^x] in place of a lookahead)"
    )


def _combine(flags: int, add: int, remove: int) -> int:
    """The flags inside a ``(?flags:...)`` group, as Python's compiler combines them."""
    return int(_compiler._combine_flags(flags, add, remove))


def _lookahead_set(items: Sequence[Any], i: int, flags: int) -> Intervals | None:
    """``(?!x)y`` or ``(?=x)y`` over single characters, as one set; else None."""
    op, av = items[i]
    if op not in (_c.ASSERT, _c.ASSERT_NOT) or av[0] != 1 or i + 1 >= len(items):
        return None
    inner, (next_op, next_av) = list(av[1]), items[i + 1]
    if len(inner) != 1 or inner[0][0] not in _CHAR_ITEMS or next_op not in _CHAR_ITEMS:
        return None
    assertion = _item_set(inner[0][0], inner[0][1], flags)
    following = _item_set(next_op, next_av, flags)
    if op == _c.ASSERT:
        return _intersect(following, assertion)
    return _intersect(following, _complement(assertion))


# --------------------------------------------------------------------------- character sets


def _item_set(op: Any, av: Any, flags: int) -> Intervals:
    """The code points one character item matches, as Python's engine matches them."""
    return _cached_item_set(op, tuple(av) if isinstance(av, list) else av, flags)


@functools.lru_cache(maxsize=4096)
def _cached_item_set(op: Any, av: Any, flags: int) -> Intervals:
    plain = _case_sensitive_set(op, av, flags)
    if flags & re.IGNORECASE:
        uncased, cased_text = _cased()
        # Off the cased characters, case-insensitive matching is case-sensitive matching;
        # on them, Python's own engine says which ones the item matches.
        found = _python_matches((op, list(av) if op == _c.IN else av), flags, cased_text)
        plain = _union(_intersect(plain, uncased), _from_codes(found))
    return _intersect(plain, _NOT_SURROGATES)


def _case_sensitive_set(op: Any, av: Any, flags: int) -> Intervals:
    if op == _c.LITERAL:
        return ((av, av),)
    if op == _c.NOT_LITERAL:
        return _complement(((av, av),))
    if op == _c.ANY:
        return _ALL if flags & re.DOTALL else _complement(((10, 10),))
    negate, found = False, _NOTHING
    for code, value in av:
        if code == _c.NEGATE:
            negate = True
        elif code == _c.LITERAL:
            found = _union(found, ((value, value),))
        elif code == _c.RANGE:
            found = _union(found, (tuple(value),))
        elif code == _c.CATEGORY:
            found = _union(found, _category(value, bool(flags & re.ASCII)))
        else:
            raise _Refused(f"character class member {code} is not supported")
    return _complement(found) if negate else found


@functools.cache
def _category(code: Any, ascii_only: bool) -> Intervals:
    """The code points ``\\d \\s \\w`` (or a negation) match, read from Python's engine."""
    regex = ("(?a)" if ascii_only else "") + _CATEGORY_CLASSES[code] + "+"
    runs: list[tuple[int, int]] = []
    for match in re.finditer(regex, _every_character()):
        start, end = match.span()
        runs.extend(_split_runs(start, end - 1))
    return _normalise(runs)


def _split_runs(start: int, last: int) -> list[tuple[int, int]]:
    """Code point runs for a run of indexes in ``_every_character`` (which skips surrogates)."""
    def code(index: int) -> int:
        return index if index < 0xD800 else index + 0x800
    if start < 0xD800 <= last:
        return [(code(start), 0xD7FF), (0xE000, code(last))]
    return [(code(start), code(last))]


@functools.cache
def _every_character() -> str:
    codes = array.array("I", [*range(0xD800), *range(0xE000, _MAX_CODE + 1)])
    return codes.tobytes().decode(f"utf-32-{'le' if sys.byteorder == 'little' else 'be'}")


@functools.cache
def _cased() -> tuple[Intervals, str]:
    """The characters case-insensitive matching treats as case-sensitive matching does, and
    the others (every one it can treat differently) as text."""
    codes: set[int] = set()
    for code in range(_MAX_CODE + 1):
        if _sre.unicode_iscased(code):
            ch = chr(code)
            codes.add(code)
            codes.add(_sre.unicode_tolower(code))
            codes.update(ord(c) for c in (ch.upper(), ch.lower(), ch.title()) if len(c) == 1)
    for low, others in _casefix._EXTRA_CASES.items():
        codes.add(low)
        codes.update(others)
    codes -= set(range(0xD800, 0xE000))
    return _complement(_from_codes(codes)), "".join(map(chr, sorted(codes)))


def _python_matches(item: Any, flags: int, text: str) -> set[int]:
    """The characters of ``text`` that Python's engine matches with the one item."""
    state = _parser.State()
    state.flags = flags
    compiled = _compiler.compile(_parser.SubPattern(state, [item]), flags)
    return {ord(ch) for ch in compiled.findall(text)}


def _from_codes(codes: Iterable[int]) -> Intervals:
    return _normalise([(c, c) for c in codes])


def _normalise(ranges: Iterable[tuple[int, int]]) -> Intervals:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _union(one: Intervals, other: Intervals) -> Intervals:
    return _normalise([*one, *other])


def _complement(ranges: Intervals) -> Intervals:
    out: list[tuple[int, int]] = []
    start = 0
    for low, high in ranges:
        if low > start:
            out.append((start, low - 1))
        start = max(start, high + 1)
    if start <= _MAX_CODE:
        out.append((start, _MAX_CODE))
    return tuple(out)


def _intersect(one: Intervals, other: Intervals) -> Intervals:
    return _complement(_union(_complement(one), _complement(other)))


def _emit_set(ranges: Intervals) -> str:
    """RE2 text for a set of code points, every one written as ``\\x{hex}``."""
    if not ranges:
        return r"[^\x{0}-\x{10ffff}]"  # matches nothing
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return f"\\x{{{ranges[0][0]:x}}}"
    if _is_ascii_case_pair(ranges):
        # RE2 reads a two-character class [Xx] as a case-folded literal x, and an alternation
        # gathering such literals into one class adds Unicode's whole fold orbit (the long s
        # for [Ss], the Kelvin sign for [Kk]). Two plain literals keep exactly the two.
        return f"(?:\\x{{{ranges[0][0]:x}}}|\\x{{{ranges[1][0]:x}}})"
    body = "".join(
        f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}"
        for low, high in ranges
    )
    return f"[{body}]"


def _is_ascii_case_pair(ranges: Intervals) -> bool:
    """Whether the set is exactly one ASCII capital letter and its small letter."""
    if len(ranges) != 2 or ranges[0][0] != ranges[0][1] or ranges[1][0] != ranges[1][1]:
        return False
    upper, lower = ranges[0][0], ranges[1][0]
    return ord("A") <= upper <= ord("Z") and lower == upper + 32

"""Refuse regular expressions that can make Python's backtracking engine take exponential time.

A policy's ``parameters.<name>.pattern`` runs against attacker-influenced arguments on every
call, so a pattern that backtracks catastrophically is a denial-of-service hole in the monitor
itself. ``check_regex`` walks the tree ``re``'s own parser builds (so it sees exactly what the
engine will run, after its optimisations) and refuses:

* patterns longer than ``MAX_PATTERN_LENGTH`` characters, that do not compile, or whose
  syntax Python warns will change meaning (``[[``);
* back-references and conditional groups (they defeat every linear-time argument);
* a variable quantifier nested under another repeating quantifier, as in ``(a+)+`` or
  ``(a*)*``, unless each iteration of the outer repeat contains a mandatory character that the
  inner repeat cannot consume (``([a-z]+\\.)+`` is accepted: every iteration ends at a dot);
* alternatives under a repeating quantifier that can match the same text, as in ``(a|aa)+``
  or ``(a|a)*``;
* ``MAX_ADJACENT_QUANTIFIERS`` or more variable quantifiers in a row over shared characters, as
  in ``a?a?a?a?aaaa`` (each split of the text between them is tried).

Possessive quantifiers and atomic groups never backtrack into their body and are not judged.
Character sets are compared on a sample alphabet (Latin-1, a few other scripts, and every
character and range end the pattern names): two sets the pattern writes down that share any
character share one of these, except for category-only overlaps outside the sample.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# ``re._parser`` is the engine's own parser; typeshed does not describe it, so it is typed loosely.
_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

#: Longer patterns are refused outright: nobody audits a 2 KiB regex.
MAX_PATTERN_LENGTH = 512
#: This many variable quantifiers in a row over shared characters is refused (``.*a.*b.*`` is 3).
MAX_ADJACENT_QUANTIFIERS = 4

_SINGLE_CHAR = frozenset({_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN})
_BACKTRACKING_REPEATS = frozenset({_c.MAX_REPEAT, _c.MIN_REPEAT})
_ALL_REPEATS = _BACKTRACKING_REPEATS | {_c.POSSESSIVE_REPEAT}
_ZERO_WIDTH = frozenset({_c.AT, _c.ASSERT, _c.ASSERT_NOT})
_BASE_ALPHABET = "".join(chr(i) for i in range(256)) + "ЖжΩω中文\u2028\u3000٣"

_CATEGORY_TESTS: dict[Any, Callable[[str], bool]] = {
    _c.CATEGORY_DIGIT: str.isdigit,
    _c.CATEGORY_SPACE: str.isspace,
    _c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    _c.CATEGORY_LINEBREAK: lambda ch: ch == "\n",
}
_CATEGORY_NEGATED = {
    _c.CATEGORY_NOT_DIGIT: _c.CATEGORY_DIGIT,
    _c.CATEGORY_NOT_SPACE: _c.CATEGORY_SPACE,
    _c.CATEGORY_NOT_WORD: _c.CATEGORY_WORD,
    _c.CATEGORY_NOT_LINEBREAK: _c.CATEGORY_LINEBREAK,
}


class _Unsafe(Exception):  # noqa: N818 - internal signal carrying the reason, never escapes
    """Raised inside the walk with the reason the pattern is refused."""


def check_regex(pattern: str) -> str | None:
    """Return why ``pattern`` is unsafe to run on untrusted input, or ``None`` if it is safe."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"pattern is {len(pattern)} characters long (at most {MAX_PATTERN_LENGTH})"
    try:
        with warnings.catch_warnings():
            # Syntax whose meaning Python says will change ("possible nested set") is refused:
            # a policy must mean the same thing on every interpreter that loads it.
            warnings.simplefilter("error")
            re.compile(pattern)
            tree = _parser.parse(pattern)
    except (FutureWarning, DeprecationWarning) as exc:
        return f"pattern uses ambiguous syntax: {exc}"
    except (re.error, RecursionError, OverflowError) as exc:
        return f"pattern does not compile: {exc}"
    checker = _Checker(pattern, tree)
    try:
        checker.walk(tree)
    except _Unsafe as exc:
        return str(exc)
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, RecursionError) as exc:
        # A tree shape this walk does not know: refuse rather than guess it is safe.
        return f"pattern could not be analysed ({type(exc).__name__}); simplify it"
    return None


class _Checker:
    """Walks one parsed pattern; raises ``_Unsafe`` at the first catastrophic construct."""

    def __init__(self, pattern: str, tree: Any) -> None:
        self.fold = bool(tree.state.flags & re.IGNORECASE) or "(?i" in pattern
        named = {chr(v) for v in _literal_codes(tree)}
        self.alphabet = frozenset(_BASE_ALPHABET) | named

    def walk(self, seq: Iterable[Any]) -> None:
        """Check every construct in ``seq``, recursively."""
        seq = list(seq)
        self._check_runs(seq)
        for op, av in seq:
            if op in (_c.GROUPREF, _c.GROUPREF_EXISTS):
                raise _Unsafe("back-references and conditional groups are not allowed")
            if op in _BACKTRACKING_REPEATS and _repeats(av):
                self._check_repeat_body(av[2])
            for child in _children(op, av):
                self.walk(child)

    def _check_runs(self, seq: Sequence[Any]) -> None:
        """Refuse long runs of adjacent variable quantifiers over shared characters.

        ``a?a?a?a?aaaa`` or ``\\d*\\d*\\d*\\d*`` try every way of splitting the text between
        them; a mandatory character none of them can consume ends a run.
        """
        count, chars = 0, frozenset[str]()
        for item in _flat(seq):
            op, av = item
            if op in _BACKTRACKING_REPEATS and av[0] != av[1]:
                body = self.all_chars(av[2])
                count, chars = (count + 1, chars | body) if body & chars else (1, body)
                if count >= MAX_ADJACENT_QUANTIFIERS:
                    raise _Unsafe(
                        f"{count} adjacent quantifiers over the same characters (as in "
                        "a?a?a?a?aaaa), which backtrack exponentially or polynomially"
                    )
            elif self._is_mandatory_char(item) and not (self._item_chars(item) & chars):
                count, chars = 0, frozenset()

    def _check_repeat_body(self, body: Sequence[Any]) -> None:
        if not self._iterations_are_delimited(body):
            raise _Unsafe(
                "nested quantifier: a repeated group contains another variable quantifier "
                "over the same characters (as in (a+)+), which backtracks exponentially"
            )
        body_first, _ = self.first(body)
        for branch, rest in _branches_in(body):
            follow, rest_nullable = self.first(rest)
            if rest_nullable:
                follow = follow | body_first
            self._check_alternatives(branch, follow)

    def _iterations_are_delimited(self, body: Sequence[Any]) -> bool:
        variable = self.variable_chars(body)
        if variable is None:
            return True
        for item in _flat(body):
            if self._is_mandatory_char(item) and not (self._item_chars(item) & variable):
                return True
        branches = [item for item in _flat(body) if item[0] == _c.BRANCH]
        others = [i for i in _flat(body) if i[0] != _c.BRANCH]
        if len(branches) == 1 and self.variable_chars(others) is None:
            return all(self._iterations_are_delimited(alt) for alt in branches[0][1][1])
        return False

    def _check_alternatives(self, branch: Any, follow: frozenset[str]) -> None:
        alternatives = list(branch[1])
        for i, one in enumerate(alternatives):
            for other in alternatives[i + 1 :]:
                if self._overlap(one, other, follow):
                    raise _Unsafe(
                        "alternatives under a quantifier can match the same text (as in "
                        "(a|aa)+), which backtracks exponentially"
                    )

    def _overlap(self, one: Sequence[Any], other: Sequence[Any], follow: frozenset[str]) -> bool:
        """Whether two alternatives can match the same text (then continue the same way)."""
        left, right = self._fixed(one), self._fixed(other)
        if left is None or right is None:
            # Not a plain run of characters: judge by the characters they can start with.
            starts = []
            for alt in (one, other):
                first, nullable = self.first(alt)
                starts.append(first | follow if nullable else first)
            return bool(starts[0] & starts[1])
        short, long = sorted((left, right), key=len)
        if any(not (a & b) for a, b in zip(short, long, strict=False)):
            return False  # they part ways at some position
        return len(short) == len(long) or bool(long[len(short)] & follow)

    def _fixed(self, seq: Sequence[Any]) -> list[frozenset[str]] | None:
        """The per-position character sets of a run of single characters, else None."""
        items = _flat(seq)
        if not all(op in _SINGLE_CHAR for op, _ in items):
            return None
        return [self.charset(item) for item in items]

    def _is_mandatory_char(self, item: Any) -> bool:
        op, av = item
        if op in _SINGLE_CHAR:
            return True
        if op not in _ALL_REPEATS or av[0] < 1 or len(av[2]) != 1:
            return False
        return bool(av[2][0][0] in _SINGLE_CHAR)

    def _item_chars(self, item: Any) -> frozenset[str]:
        op, av = item
        return self.charset(av[2][0]) if op in _ALL_REPEATS else self.charset(item)

    def variable_chars(self, seq: Sequence[Any]) -> frozenset[str] | None:
        """Characters consumed by variable quantifiers in ``seq``; None if it has none."""
        found: frozenset[str] | None = None
        for op, av in seq:
            if op in _BACKTRACKING_REPEATS and av[0] != av[1]:
                found = (found or frozenset()) | self.all_chars(av[2])
                continue
            if op in (_c.ATOMIC_GROUP, _c.ASSERT, _c.ASSERT_NOT):
                continue  # the engine never backtracks into these
            for child in _children(op, av):
                inner = self.variable_chars(child)
                if inner is not None:
                    found = (found or frozenset()) | inner
        return found

    def all_chars(self, seq: Iterable[Any]) -> frozenset[str]:
        """Every character some match of ``seq`` may consume."""
        chars: frozenset[str] = frozenset()
        for op, av in seq:
            if op in _SINGLE_CHAR:
                chars |= self.charset((op, av))
            for child in _children(op, av):
                if op not in (_c.ASSERT, _c.ASSERT_NOT):
                    chars |= self.all_chars(child)
        return chars

    def first(self, seq: Iterable[Any]) -> tuple[frozenset[str], bool]:
        """The characters a match of ``seq`` can start with, and whether it can match empty."""
        chars: frozenset[str] = frozenset()
        for op, av in seq:
            if op in _SINGLE_CHAR:
                return chars | self.charset((op, av)), False
            if op in _ZERO_WIDTH:
                continue
            if op == _c.BRANCH:
                nullable = False
                for alt in av[1]:
                    alt_first, alt_null = self.first(alt)
                    chars |= alt_first
                    nullable = nullable or alt_null
            elif op in _ALL_REPEATS:
                body_first, body_null = self.first(av[2])
                chars |= body_first
                nullable = av[0] == 0 or body_null
            else:
                child_first, nullable = self.first(_only(_children(op, av)))
                chars |= child_first
            if not nullable:
                return chars, False
        return chars, True

    def charset(self, item: Any) -> frozenset[str]:
        """The sample characters one single-character item matches."""
        op, av = item
        if op == _c.ANY:
            return self.alphabet
        if op in (_c.LITERAL, _c.NOT_LITERAL):
            hit = frozenset(ch for ch in self.alphabet if self._same(ch, chr(av)))
            return hit if op == _c.LITERAL else self.alphabet - hit
        negate = any(code == _c.NEGATE for code, _ in av)
        hit = frozenset(ch for ch in self.alphabet if any(self._in(ch, m) for m in av))
        return self.alphabet - hit if negate else hit

    def _in(self, ch: str, member: tuple[Any, Any]) -> bool:
        code, value = member
        if code == _c.LITERAL:
            return self._same(ch, chr(value))
        if code == _c.RANGE:
            lo, hi = value
            candidates = {ch, ch.lower(), ch.upper()} if self.fold else {ch}
            return any(lo <= ord(c) <= hi for c in candidates)
        if code == _c.CATEGORY:
            if value in _CATEGORY_NEGATED:
                return not _CATEGORY_TESTS[_CATEGORY_NEGATED[value]](ch)
            test = _CATEGORY_TESTS.get(value)
            return test(ch) if test is not None else True
        return False

    def _same(self, ch: str, other: str) -> bool:
        return ch == other or (self.fold and ch.lower() == other.lower())


def _repeats(av: Any) -> bool:
    """Whether a repeat node's body can run more than once."""
    return bool(av[1] > 1)


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-sequences nested in one node."""
    if op in _ALL_REPEATS:
        return [av[2]]
    if op == _c.SUBPATTERN:
        return [av[3]]
    if op == _c.BRANCH:
        return list(av[1])
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return [av[1]]
    if op == _c.ATOMIC_GROUP:
        return [av]
    if op == _c.GROUPREF_EXISTS:
        return [part for part in av[1:] if part is not None]
    return []


def _only(children: list[Any]) -> list[Any]:
    return list(children[0]) if children else []


def _flat(seq: Iterable[Any]) -> list[Any]:
    """The items of ``seq`` with plain groups opened, so group contents count as the sequence."""
    items: list[Any] = []
    for op, av in seq:
        if op == _c.SUBPATTERN:
            items.extend(_flat(av[3]))
        else:
            items.append((op, av))
    return items


def _branches_in(body: Sequence[Any]) -> list[tuple[Any, list[Any]]]:
    """Each top-level alternation in ``body`` with the items that follow it."""
    items = _flat(body)
    return [(av, items[i + 1 :]) for i, (op, av) in enumerate(items) if op == _c.BRANCH]


def _literal_codes(seq: Iterable[Any]) -> set[int]:
    """Every code point the pattern names, as literals or range ends."""
    codes: set[int] = set()
    for op, av in seq:
        if op in (_c.LITERAL, _c.NOT_LITERAL):
            codes.add(av)
        elif op == _c.IN:
            for code, value in av:
                if code in (_c.LITERAL, _c.NOT_LITERAL):
                    codes.add(value)
                elif code == _c.RANGE:
                    codes.update(value)
        for child in _children(op, av):
            codes |= _literal_codes(child)
    return codes

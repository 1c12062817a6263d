"""Atom and pattern evaluation on one event, shared by both engines.

Conventions (the language's meaning on concrete values):

* Every atom on an argument the event does not carry is false, negated atoms included.
* A string literal matches an equal string; a number literal matches a number equal to it (not
  a boolean) or a string spelling that number (``"6"``, ``"6.0"``, ``"6e0"``).
* Text patterns (``~``) match the whole text; ``*`` matches any run of characters (``/``
  included) and ``?`` exactly one. A value that is not a string is matched through its
  canonical JSON text (``6`` → ``6``, ``true`` → ``true``, ``["rm", "-rf"]`` →
  ``["rm","-rf"]``), so a list argument cannot slip past a pattern by not being a string.
* The output is observed only up to ``OBSERVATION_LIMIT`` characters.
* Variables compare by value: strings with strings, numbers with numbers (``1 == 1.0``); the
  string ``"6"`` is not the number ``6`` for a variable.
* Identifiers compare in their normal form (``callgate._identifiers``): an e-mail address or
  host name in any case, a URL with or without its scheme and trailing ``/``, are one value to
  ``=``, ``in``, variables and ``contains``.
* ``~*`` matches ignoring case; ``any ARG …`` / ``all ARG …`` apply a condition to the elements
  of a list argument; ``ARG from S`` reads the event's provenance of ARG.

The matcher for ``*`` / ``?`` places each literal segment leftmost in order, so it runs in time
linear in the text times the pattern length; it never backtracks exponentially.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import re2  # google-re2 ships no type information (ignore_missing_imports in pyproject)

from callgate._identifiers import identifiers, normal_identifier
from callgate._model import Event
from callgate._re2 import re2_test
from callgate.temporal import _nodes as n

#: Characters of an event's output that patterns observe (64 KiB); the rest is not seen.
OBSERVATION_LIMIT = 65_536

_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_MISSING = object()

Test = Callable[[Event], bool]


def observe(output: object) -> str:
    """The bounded observation of an output: its text, cut at ``OBSERVATION_LIMIT``."""
    text = output if isinstance(output, str) else text_of(output)
    return text if len(text) <= OBSERVATION_LIMIT else text[:OBSERVATION_LIMIT]


def text_of(value: object) -> str:
    """The text a value is matched through: itself for strings, canonical JSON otherwise."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=str)
    except (TypeError, ValueError):
        return str(value)


def _maybe_identifier(text: str) -> bool:
    """Cheap test: could ``text`` have a normal form other than itself?"""
    return "." in text and len(text) <= 2048 and not text.startswith("/") and " " not in text


def normal_text(text: str) -> str:
    """``text``, or its identifier's normal form when the whole of it is one."""
    if _maybe_identifier(text):
        normal = normal_identifier(text)
        if normal is not None:
            return normal
    return text


def value_key(value: object) -> Hashable:
    """A hashable key with equality by value (``1`` and ``1.0`` equal, ``"1"`` and ``1`` not;
    two spellings of one identifier equal)."""
    if isinstance(value, str):
        return normal_text(value)
    if value is None:
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("nan",) if isinstance(value, float) and math.isnan(value) else value
    return ("json", text_of(value))


def as_number(value: object) -> int | float | None:
    """A number, or a string spelling one, as a number; anything else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return int(value) if value.lstrip("-").isdigit() else float(value)
    return None


def literal_matches(literal: n.Literal_, value: object) -> bool:
    """Whether an argument value matches a literal of the language."""
    if isinstance(literal, str):
        return isinstance(value, str) and (value == literal
                                           or normal_text(value) == normal_text(literal))
    number = as_number(value)
    return number is not None and number == literal


def contained(needle: object, haystack: str) -> bool:
    """Whether the text of ``needle`` occurs in ``haystack`` (an identifier also in another
    spelling: ``Mark@X.com`` occurs in "write to mark@x.com")."""
    text = text_of(needle)
    if text in haystack:
        return True
    normal = normal_identifier(text) if isinstance(needle, str) else None
    return normal is not None and normal in identifiers(haystack)


class Glob:
    """A text pattern: ``*`` any run of characters, ``?`` one character, the rest literal;
    with ``casefold`` the text and the pattern are compared ignoring case."""

    def __init__(self, pattern: str, *, casefold: bool = False) -> None:
        self.pattern = pattern
        self._casefold = casefold
        parts = (pattern.casefold() if casefold else pattern).split("*")
        self._parts = parts
        self._prefix = _Segment(parts[0])
        self._suffix = _Segment(parts[-1]) if len(parts) > 1 else self._prefix
        self._middle = tuple(_Segment(p) for p in parts[1:-1] if p)

    def matches(self, text: str) -> bool:
        """Whether the whole of ``text`` matches."""
        if self._casefold:
            text = text.casefold()
        if len(self._parts) == 1:
            return len(text) == len(self._prefix.text) and self._prefix.at(text, 0)
        start, end = len(self._prefix.text), len(text) - len(self._suffix.text)
        if end < start or not self._prefix.at(text, 0) or not self._suffix.at(text, end):
            return False
        for segment in self._middle:
            found = segment.find(text, start, end)
            if found < 0:
                return False
            start = found + len(segment.text)
        return True


def glob_regex(pattern: str) -> str:
    """The regular expression (RE2 syntax) a text pattern means over a whole text: ``*`` any
    run of characters, ``?`` one, every other character itself."""
    parts = []
    for char in pattern:
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif char.isascii() and (char.isalnum() or char == "_"):
            parts.append(char)
        else:
            parts.append(f"\\x{{{ord(char):x}}}")
    return "".join(parts)


class GlobSet:
    """Several text patterns at once: whether a text matches any of them, in one linear pass
    of RE2 (a disjunction of ``ARG ~ "p"`` conditions on one argument). A text RE2 cannot
    take (a lone surrogate, which JSON admits) is matched pattern by pattern instead."""

    def __init__(self, patterns: Sequence[str], *, casefold: bool = False) -> None:
        self._globs = tuple(Glob(p, casefold=casefold) for p in patterns)
        flags = "(?si)" if casefold else "(?s)"
        alternatives = "|".join(f"(?:{glob_regex(p)})" for p in patterns)
        self._test: Callable[[bytes], bool] | None
        try:
            self._test = re2_test(re2.compile(f"{flags}(?:{alternatives})"), "fullmatch")
        except (re2.error, UnicodeError, ValueError):  # a surrogate, or past RE2's memory
            self._test = None

    def matches(self, text: str) -> bool:
        """Whether the whole of ``text`` matches one of the patterns."""
        if self._test is not None:
            try:
                return self._test(text.encode("utf-8"))
            except UnicodeError:
                pass
        return any(glob.matches(text) for glob in self._globs)


class _Segment:
    """A literal run of a glob, where ``?`` stands for any one character."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._regex = (
            re.compile("".join("." if c == "?" else re.escape(c) for c in text), re.DOTALL)
            if "?" in text
            else None
        )

    def at(self, text: str, offset: int) -> bool:
        if self._regex is None:
            return text.startswith(self.text, offset)
        return self._regex.match(text, offset, offset + len(self.text)) is not None

    def find(self, text: str, start: int, end: int) -> int:
        if self._regex is None:
            return text.find(self.text, start, end)
        match = self._regex.search(text, start, end)
        return -1 if match is None else match.start()


# -- ground atoms ---------------------------------------------------------------------------


def atom_test(atom: n.Atom) -> Test:
    """A predicate for an atom that involves no variable."""
    if isinstance(atom, n.ActionIn):
        names, negated = atom.names, atom.negated
        return lambda ev: (ev.action in names) != negated
    if isinstance(atom, n.StatusIs):
        status, negated = atom.status, atom.negated
        return lambda ev: (ev.status == status) != negated
    if isinstance(atom, n.TaintHas):
        sources = atom.sources
        return lambda ev: not sources.isdisjoint(ev.taint)
    if isinstance(atom, n.ArgIn):
        return _arg_in(atom)
    if isinstance(atom, n.TextMatch):
        return _text_match(atom)
    if isinstance(atom, n.Compare):
        return _compare(atom)
    if isinstance(atom, n.FromSource):
        return _from_source(atom)
    if isinstance(atom, n.Each):
        return _each(atom)
    raise TypeError(f"{type(atom).__name__} involves a variable")


def _from_source(atom: n.FromSource) -> Test:
    arg, sources, negated = atom.arg, atom.sources, atom.negated
    if arg is None:
        return lambda ev: (not sources.isdisjoint(ev.source)) != negated

    carried = links_of(arg) or arg

    def test(ev: Event) -> bool:
        pieces = ev.provenance.get(arg) if carried in ev.args else None
        if not pieces:  # absent, or no value to trace (null, empty, true/false): neither
            return False
        if negated:  # some piece came from none of the sources
            return any(sources.isdisjoint(labels) for labels in pieces)
        return any(not sources.isdisjoint(labels) for labels in pieces)

    return test


def _each(atom: n.Each) -> Test:
    inner = atom.atom
    arg = inner.arg
    if arg is None:  # the parser gives an argument; a body made elsewhere may not
        raise TypeError("any/all need an argument")
    # the condition reads each element as the value of a stand-in argument
    one = atom_test(dataclasses.replace(inner, arg=_ELEMENT))
    every = atom.quantifier == "all"
    read = reader(arg)

    def test(ev: Event) -> bool:
        value = read(ev)
        if value is _MISSING:
            return False
        items = value if isinstance(value, list | tuple) else [value]
        if not items:
            return False
        results = (one(_element(item)) for item in items)
        return all(results) if every else any(results)

    return test


_ELEMENT = "@element"


def _element(item: object) -> Event:
    """An event that carries one element of a list as its only argument (``any``/``all``)."""
    return Event(action="", args={_ELEMENT: item})


def links_of(arg: str) -> str | None:
    """The argument a ``links(ARG)`` subject reads, or None for a plain argument."""
    return arg[6:-1] if arg.startswith("links(") and arg.endswith(")") else None


def argument(ev: Event, arg: str) -> object:
    """The value an atom on ``arg`` reads: the argument, or for ``links(ARG)`` the list of
    identifiers in ARG's text (normal forms); ``_MISSING`` when the event lacks ARG."""
    return reader(arg)(ev)


Reader = Callable[[Event], object]


def reader(arg: str) -> Reader:
    """The function that reads ``arg`` of an event (decided once, when the atom compiles)."""
    inner = links_of(arg)
    if inner is None:
        return lambda ev: ev.args.get(arg, _MISSING)

    def links(ev: Event) -> object:
        value = ev.args.get(inner, _MISSING)
        return _MISSING if value is _MISSING else identifiers(text_of(value))

    return links


def _arg_in(atom: n.ArgIn) -> Test:
    read, negated = reader(atom.arg), atom.negated
    strings = frozenset(v for v in atom.values if isinstance(v, str))
    numbers = tuple(v for v in atom.values if not isinstance(v, str))
    # identifiers among the literals compare in their normal form; only they need it
    normals = frozenset(normal_text(v) for v in strings if normal_identifier(v) is not None)

    def test(ev: Event) -> bool:
        value = read(ev)
        if value is _MISSING:
            return False
        if isinstance(value, str):
            found = value in strings or (bool(normals) and normal_text(value) in normals)
        else:
            found = False
        if not found and numbers:
            number = as_number(value)
            found = number is not None and number in numbers
        return found != negated

    return test


def _text_match(atom: n.TextMatch) -> Test:
    glob, negated = Glob(atom.pattern, casefold=atom.casefold), atom.negated
    if atom.arg is None:
        return lambda ev: glob.matches(observe(ev.output)) != negated
    read = reader(atom.arg)

    def test(ev: Event) -> bool:
        value = read(ev)
        if value is _MISSING:
            return False
        return glob.matches(value if isinstance(value, str) else text_of(value)) != negated

    return test


_COMPARATORS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def _compare(atom: n.Compare) -> Test:
    arg, bound, compare = atom.arg, atom.value, _COMPARATORS[atom.op]

    read = reader(arg)

    def test(ev: Event) -> bool:
        value = read(ev)
        number = None if value is _MISSING else as_number(value)
        return number is not None and compare(number, bound)

    return test


# -- compiled patterns ----------------------------------------------------------------------


class CompiledPattern:
    """A pattern ready to evaluate: a ground part, plus how it binds or uses variables.

    ``variables`` is the statement's variable order; an environment is a tuple of values in
    that order. In a statement's first pattern (``binding=True``) the first ``ARG = $x`` of each
    variable binds it; every other occurrence is a use.
    """

    def __init__(self, pattern: n.Pattern, variables: tuple[str, ...], binding: bool) -> None:
        actions: frozenset[str] | None = None
        tests: list[Test] = []
        binds: dict[int, str] = {}
        eqs: list[tuple[int, str]] = []
        contains: list[tuple[int, str | None]] = []
        for atom in pattern.atoms:
            if isinstance(atom, n.ActionIn) and not atom.negated:
                actions = atom.names if actions is None else actions & atom.names
            elif isinstance(atom, n.VarEq):
                index = variables.index(atom.var)
                if binding and index not in binds:
                    binds[index] = atom.arg
                else:
                    eqs.append((index, atom.arg))
            elif isinstance(atom, n.VarContains):
                contains.append((variables.index(atom.var), atom.arg))
            else:
                tests.append(atom_test(atom))
        self.actions = actions
        self.tests = tuple(tests)
        self.binds = tuple(sorted(binds.items()))
        self._eqs = tuple(eqs)
        self._contains = tuple(contains)
        self.eq_vars = tuple(sorted({index for index, _ in eqs}))
        self.uses_vars = bool(eqs or contains)

    def ground(self, ev: Event) -> bool:
        """The variable-free part of the pattern on ``ev``."""
        if self.actions is not None and ev.action not in self.actions:
            return False
        for test in self.tests:  # noqa: SIM110 - a plain loop is faster here, the innermost call
            if not test(ev):
                return False
        return True

    def bind(self, ev: Event, size: int) -> tuple[Any, ...] | None:
        """The environment ``ev`` binds (first pattern, ground part already true), or None."""
        values: list[Any] = [None] * size
        args = ev.args
        for index, arg in self.binds:
            value = args.get(arg, _MISSING)
            if value is _MISSING:
                return None
            values[index] = value
        env = tuple(values)
        return env if self.uses_hold(ev, env) else None

    def project(self, ev: Event) -> tuple[Hashable, ...] | None:
        """The keys ``ev`` gives the variables this pattern compares by ``=``, or None.

        None when an argument is missing or two ``ARG = $x`` of one variable disagree.
        """
        keys: dict[int, Hashable] = {}
        for index, arg in self._eqs:
            value = ev.args.get(arg, _MISSING)
            if value is _MISSING:
                return None
            key = value_key(value)
            if keys.setdefault(index, key) != key:
                return None
        return tuple(keys[index] for index in self.eq_vars)

    def env_projection(self, env: tuple[Any, ...]) -> tuple[Hashable, ...]:
        """The keys of an environment's values for the variables this pattern compares."""
        return tuple(value_key(env[index]) for index in self.eq_vars)

    def contains_hold(self, ev: Event, env: tuple[Any, ...]) -> bool:
        """Whether every ``… contains $x`` of this pattern holds on ``ev`` under ``env``."""
        if not self._contains:
            return True
        haystacks = self.haystacks(ev)
        return haystacks is not None and self.contained_in(haystacks, env)

    def haystacks(self, ev: Event) -> tuple[str, ...] | None:
        """The texts this pattern's ``contains`` uses search in ``ev`` (None if one is missing)."""
        texts: list[str] = []
        for _, arg in self._contains:
            if arg is None:
                texts.append(observe(ev.output))
                continue
            value = ev.args.get(arg, _MISSING)
            if value is _MISSING:
                return None
            texts.append(text_of(value))
        return tuple(texts)

    def contained_in(self, haystacks: tuple[str, ...], env: tuple[Any, ...]) -> bool:
        """Whether each ``contains`` needle of ``env`` occurs in the matching haystack."""
        return all(
            contained(env[index], hay)
            for (index, _), hay in zip(self._contains, haystacks, strict=True)
        )

    @property
    def eqs(self) -> tuple[tuple[int, str], ...]:
        """The ``ARG = $x`` uses, as (variable index, argument name)."""
        return self._eqs

    @property
    def contains_uses(self) -> tuple[tuple[int, str | None], ...]:
        """The ``… contains $x`` uses, as (variable index, argument name or None for output)."""
        return self._contains

    @property
    def has_contains(self) -> bool:
        """Whether the pattern uses a variable with ``contains``."""
        return bool(self._contains)

    def uses_hold(self, ev: Event, env: tuple[Any, ...]) -> bool:
        """Whether every variable use (``=`` and ``contains``) holds on ``ev`` under ``env``."""
        if self._eqs:
            projected = self.project(ev)
            if projected is None or projected != self.env_projection(env):
                return False
        return self.contains_hold(ev, env)

    def matches(self, ev: Event, env: tuple[Any, ...]) -> bool:
        """The whole pattern on ``ev`` under ``env`` (a use pattern)."""
        return self.ground(ev) and self.uses_hold(ev, env)

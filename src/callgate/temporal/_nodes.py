"""The syntax tree of a behavioral statement: atoms, patterns, temporal bodies and forms.

Every node keeps the 1-based line and column of the text it was parsed from, so scope errors
can name the place. Nodes are frozen dataclasses; the engines compile them, never mutate them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Literal_ = str | int | float
CompareOp = Literal[">", ">=", "<", "<="]
FormName = Literal["abs", "prec", "resp", "bresp", "rslv", "until", "always"]


@dataclass(frozen=True, slots=True)
class Pos:
    """Where a node starts in its source."""

    source: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class ActionIn:
    """``action = A`` / ``action in {A, B}``; ``negated`` for ``!=`` / ``not in``."""

    names: frozenset[str]
    negated: bool
    pos: Pos


@dataclass(frozen=True, slots=True)
class StatusIs:
    """``status = ok|error|denied`` (``negated`` for ``!=``)."""

    status: str
    negated: bool
    pos: Pos


@dataclass(frozen=True, slots=True)
class ArgIn:
    """``ARG = v`` / ``ARG in {v, …}``; ``negated`` for ``!=`` / ``not in``."""

    arg: str
    values: tuple[Literal_, ...]
    negated: bool
    pos: Pos


@dataclass(frozen=True, slots=True)
class TextMatch:
    """``ARG ~ "p"`` / ``output ~ "p"`` (``arg`` None means the output); ``!~`` negates;
    ``~*`` / ``!~*`` match ignoring case."""

    arg: str | None
    pattern: str
    negated: bool
    pos: Pos
    casefold: bool = False


@dataclass(frozen=True, slots=True)
class Compare:
    """``ARG > N`` and friends: a numeric comparison."""

    arg: str
    op: CompareOp
    value: int | float
    pos: Pos


@dataclass(frozen=True, slots=True)
class TaintHas:
    """``taint has web`` / ``taint has {web, rag}``: any of the sources."""

    sources: frozenset[str]
    pos: Pos


@dataclass(frozen=True, slots=True)
class FromSource:
    """``ARG from S`` / ``ARG from {S, …}``: a value of ARG first appeared in content whose
    labels include one of the sources; ``output from …``: the event's own output is from one
    of them (``arg`` None); ``not from`` negates."""

    arg: str | None
    sources: frozenset[str]
    negated: bool
    pos: Pos


@dataclass(frozen=True, slots=True)
class Each:
    """``any ARG …`` / ``all ARG …``: a condition on the elements of a list argument (a value
    that is not a list is one element): some element satisfies it, or every one does (and
    there is at least one)."""

    quantifier: Literal["any", "all"]
    atom: ArgIn | TextMatch | Compare
    pos: Pos


@dataclass(frozen=True, slots=True)
class VarEq:
    """``ARG = $x``: binds ``x`` in a statement's first pattern, requires it in the others."""

    arg: str
    var: str
    pos: Pos


@dataclass(frozen=True, slots=True)
class VarContains:
    """``ARG contains $x`` / ``output contains $x`` (``arg`` None): the value's text occurs."""

    arg: str | None
    var: str
    pos: Pos


Atom = (ActionIn | StatusIs | ArgIn | TextMatch | Compare | TaintHas | FromSource | Each
        | VarEq | VarContains)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A conjunction of atoms on one event."""

    atoms: tuple[Atom, ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class Not:
    """``not Θ``."""

    body: Body
    pos: Pos


@dataclass(frozen=True, slots=True)
class And:
    """``Θ and Θ' and …``."""

    parts: tuple[Body, ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class Or:
    """``Θ or Θ' or …``."""

    parts: tuple[Body, ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class Once:
    """``once(Θ)``: some strictly earlier event; ``once[N](Θ)``: one of the N events before."""

    body: Body
    bound: int | None
    pos: Pos


@dataclass(frozen=True, slots=True)
class Eventually:
    """``eventually(Θ)``: some strictly later event."""

    body: Body
    pos: Pos


Body = Pattern | Not | And | Or | Once | Eventually


@dataclass(frozen=True, slots=True)
class Statement:
    """One parsed statement: a form over its patterns, or ``always`` over a body.

    ``patterns`` holds one pattern for ``abs``, two for the binary forms and three for
    ``until`` (trigger, resolver, bad); ``body`` is set only for ``always``; ``bound`` only for
    ``bresp``. ``variables`` lists the statement's variables in order of first appearance.
    """

    form: FormName
    patterns: tuple[Pattern, ...]
    body: Body | None
    bound: int | None
    variables: tuple[str, ...]
    text: str
    pos: Pos

"""The incremental monitor for ``always(Θ)``: past operators by state, futures by residuals.

``once(χ)`` and ``once[N](χ)`` are decided from the position where χ last held. An
``eventually(χ)`` at position i asks whether χ holds at some later position; every position
still waiting on the same ``eventually`` gets the same answer (true at the next position where
χ holds, false if the run ends first). So the body's value at a position is a Boolean function
of the ``M`` eventually operators that are still open: the monitor keeps it as a truth table
(an int of ``2**M`` bits) and groups waiting positions by table. When χ_m holds, every group is
cofactored with ``m = true``; a group whose table becomes 0 has failed for good (that is how
``not eventually(…)`` is caught online), one that becomes all-ones is satisfied and dropped.
At run end each group takes the all-false assignment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from callgate._model import Event
from callgate.temporal import _nodes as n
from callgate.temporal._forms import NO_EVENTS
from callgate.temporal._patterns import CompiledPattern, GlobSet, links_of, text_of

Eval = Callable[[Event, int], int]
_NONE: list[int] = []


class AlwaysMonitor:
    """Monitors ``always(Θ)``: the events where Θ is false fail."""

    def __init__(self, body: n.Body) -> None:
        self._eventually: list[n.Eventually] = []
        self._onces: list[n.Once] = []
        _collect(body, self._eventually, self._onces)
        count = len(self._eventually)
        self._size = 1 << count
        self._full = (1 << self._size) - 1
        self._atoms = [
            sum(1 << a for a in range(self._size) if a >> m & 1) for m in range(count)
        ]
        self._last = [0] * len(self._onces)  # where each once's child last held (0 = never)
        self._groups: dict[int, list[int]] = {}
        self._root = self._compile(body)
        self._once_children = [self._compile(o.body) for o in self._onces]
        self._eventually_children = [self._compile(e.body) for e in self._eventually]

    # -- compilation ----------------------------------------------------------------------
    def _compile(self, body: n.Body) -> Eval:
        full = self._full
        if isinstance(body, n.Pattern):
            pattern = CompiledPattern(body, (), binding=False)
            return lambda ev, pos: full if pattern.ground(ev) else 0
        if isinstance(body, n.Not):
            child = self._compile(body.body)
            return lambda ev, pos: full ^ child(ev, pos)
        if isinstance(body, n.Or):
            parts, fused = _fuse(body.parts)
            children = [self._compile(p) for p in parts] + [_fused(f, full) for f in fused]
            return children[0] if len(children) == 1 else _junction(children, False, full)
        if isinstance(body, n.And):
            return _junction([self._compile(p) for p in body.parts], True, full)
        if isinstance(body, n.Once):
            return self._once(body)
        atom = self._atoms[_index(self._eventually, body)]
        return lambda ev, pos: atom

    def _once(self, body: n.Once) -> Eval:
        full, last, slot, bound = self._full, self._last, _index(self._onces, body), body.bound
        if bound is None:
            return lambda ev, pos: full if last[slot] else 0
        return lambda ev, pos: full if last[slot] and last[slot] >= pos - bound else 0

    # -- monitoring -----------------------------------------------------------------------
    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        """Positions failing for good once ``ev`` happens at ``pos``, and the plan to commit it."""
        value = self._root(ev, pos)
        once_hits = (
            [i for i, child in enumerate(self._once_children) if child(ev, pos)]
            if self._once_children else _NONE
        )
        hits = (
            [m for m, child in enumerate(self._eventually_children) if child(ev, pos)]
            if self._eventually_children else _NONE
        )
        if value == self._full and not (hits and self._groups):
            return NO_EVENTS, (value, once_hits, self._groups)
        failing: list[int] = []
        groups = self._groups
        if hits and groups:
            groups = {}
            for before, positions in self._groups.items():
                table = before
                for m in hits:
                    table = self._cofactor(table, m)
                if table == 0:
                    failing.extend(positions)
                elif table != self._full:
                    groups.setdefault(table, []).extend(positions)
        if value == 0:
            failing.append(pos)
        return (tuple(sorted(failing)) if failing else NO_EVENTS), (value, once_hits, groups)

    def apply(self, plan: object, pos: int) -> None:
        """Commit the event the plan was computed for."""
        value, once_hits, groups = cast(tuple[int, list[int], dict[int, list[int]]], plan)
        for slot in once_hits:
            self._last[slot] = pos
        if groups is not self._groups:
            self._groups = groups
        if value not in (0, self._full):
            self._groups.setdefault(value, []).append(pos)

    def finish(self) -> tuple[int, ...]:
        """Positions whose waiting ``eventually`` operators never came true."""
        return tuple(sorted(p for table, ps in self._groups.items() if not table & 1 for p in ps))

    def _cofactor(self, table: int, m: int) -> int:
        """The table with eventually operator ``m`` fixed to true."""
        bit, result = 1 << m, 0
        for assignment in range(self._size):
            if table >> (assignment | bit) & 1:
                result |= 1 << assignment
        return result


def _fuse(parts: tuple[n.Body, ...]) -> tuple[list[n.Body], list[tuple[str, list[str]]]]:
    """The parts of a disjunction, with every group of two or more ``ARG ~ "p"`` leaves on one
    argument taken out as (ARG, patterns): the group is then matched in one pass."""
    by_arg: dict[str, list[str]] = {}
    for part in parts:
        glob = _plain_glob(part)
        if glob is not None:
            by_arg.setdefault(glob[0], []).append(glob[1])
    fused = {arg: patterns for arg, patterns in by_arg.items() if len(patterns) > 1}
    rest = [p for p in parts if (g := _plain_glob(p)) is None or g[0] not in fused]
    return rest, list(fused.items())


def _plain_glob(part: n.Body) -> tuple[str, str] | None:
    """(ARG, pattern) of a leaf that is exactly ``ARG ~ "p"`` on a plain argument."""
    if not isinstance(part, n.Pattern) or len(part.atoms) != 1:
        return None
    atom = part.atoms[0]
    if not isinstance(atom, n.TextMatch) or atom.negated or atom.casefold or atom.arg is None \
            or links_of(atom.arg) is not None:
        return None
    return atom.arg, atom.pattern


def _fused(group: tuple[str, list[str]], full: int) -> Eval:
    arg, patterns = group
    globs = GlobSet(patterns)
    missing = object()

    def either(ev: Event, pos: int) -> int:
        value = ev.args.get(arg, missing)
        if value is missing:
            return 0
        return full if globs.matches(value if isinstance(value, str) else text_of(value)) \
            else 0

    return either


def _junction(children: list[Eval], conjunction: bool, full: int) -> Eval:
    if conjunction:

        def both(ev: Event, pos: int) -> int:
            value = -1
            for child in children:
                value &= child(ev, pos)
                if not value:
                    return 0
            return value

        return both

    def either(ev: Event, pos: int) -> int:
        value = 0
        for child in children:
            value |= child(ev, pos)
            if value == full:  # true in every world already: the rest cannot add anything
                return value
        return value

    return either


def _collect(body: n.Body, eventually: list[n.Eventually], onces: list[n.Once]) -> None:
    if isinstance(body, n.Eventually):
        eventually.append(body)
        _collect(body.body, eventually, onces)
    elif isinstance(body, n.Once):
        onces.append(body)
        _collect(body.body, eventually, onces)
    elif isinstance(body, n.Not):
        _collect(body.body, eventually, onces)
    elif isinstance(body, n.And | n.Or):
        for part in body.parts:
            _collect(part, eventually, onces)


def _index(items: list[n.Eventually] | list[n.Once], node: n.Body) -> int:
    # Nodes are compared by identity: two textually equal sub-bodies are distinct operators.
    return next(i for i, item in enumerate(items) if item is node)


def nested_future(body: n.Body, under: bool = False) -> bool:
    """Whether ``eventually`` appears under ``once`` or under another ``eventually``."""
    if isinstance(body, n.Eventually):
        return under or nested_future(body.body, True)
    if isinstance(body, n.Once):
        return nested_future(body.body, True)
    if isinstance(body, n.Not):
        return nested_future(body.body, under)
    if isinstance(body, n.And | n.Or):
        return any(nested_future(p, under) for p in body.parts)
    return False


class DeferredAlwaysMonitor:
    """Monitors ``always(Θ)`` whose Θ nests a future in a past or a future operator
    (``once(eventually(χ))``, ``eventually(eventually(χ))``).

    Such a body's value at a position can depend on the whole run, so the monitor keeps, per
    event, which of the body's patterns held (one integer a position) and judges every position
    when the run ends, by the same finite-trace rules as the other engines. Nothing is reported
    before the end: the obligation stays open until then.
    """

    def __init__(self, body: n.Body) -> None:
        self._body = body
        self._leaves: list[n.Pattern] = []
        _leaves(body, self._leaves)
        self._tests = [CompiledPattern(p, (), binding=False) for p in self._leaves]
        self._rows: list[int] = []

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        """Nothing fails before the end; the plan is the row of pattern outcomes."""
        row = 0
        for index, test in enumerate(self._tests):
            if test.ground(ev):
                row |= 1 << index
        return NO_EVENTS, row

    def apply(self, plan: object, pos: int) -> None:
        self._rows.append(cast(int, plan))

    def finish(self) -> tuple[int, ...]:
        """Every position where the body is false over the whole run."""
        values = self._value(self._body)
        return tuple(i for i in range(1, len(self._rows) + 1) if not values[i])

    def _value(self, body: n.Body) -> list[bool]:
        """The body at positions 1..n (index 0 unused)."""
        count = len(self._rows)
        if isinstance(body, n.Pattern):
            bit = 1 << _index_of(self._leaves, body)
            return [False, *(bool(row & bit) for row in self._rows)]
        if isinstance(body, n.Not):
            return [not v for v in self._value(body.body)]
        if isinstance(body, n.And | n.Or):
            parts = [self._value(p) for p in body.parts]
            join = all if isinstance(body, n.And) else any
            return [False, *(join(p[i] for p in parts) for i in range(1, count + 1))]
        child = self._value(body.body)
        out = [False] * (count + 1)
        if isinstance(body, n.Once):
            if body.bound is None:
                seen = False
                for i in range(1, count + 1):
                    out[i], seen = seen, seen or child[i]
            else:
                for i in range(1, count + 1):
                    out[i] = any(child[j] for j in range(max(1, i - body.bound), i))
            return out
        later = False
        for i in range(count, 0, -1):
            out[i], later = later, later or child[i]
        return out


def _leaves(body: n.Body, out: list[n.Pattern]) -> None:
    if isinstance(body, n.Pattern):
        out.append(body)
    elif isinstance(body, n.Not | n.Once | n.Eventually):
        _leaves(body.body, out)
    elif isinstance(body, n.And | n.Or):
        for part in body.parts:
            _leaves(part, out)


def _index_of(items: list[n.Pattern], node: n.Pattern) -> int:
    return next(i for i, item in enumerate(items) if item is node)

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
from callgate.temporal._patterns import CompiledPattern, GlobSet, atom_test, links_of, text_of

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
        self._body = body
        self._general = _Kind(self._compile(body),
                              [self._compile(o.body) for o in self._onces],
                              [self._compile(e.body) for e in self._eventually], quiet=False)
        self._kinds = _Kinds(body)
        self._specs: dict[tuple[object, ...], _Kind] = {}

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

    def _kind(self, ev: Event) -> _Kind:
        """The body specialised to events of ``ev``'s kind (made on first sight of the kind),
        or the general body when the event has no kind the monitor can remember."""
        key = self._kinds.key(ev)
        try:
            found = self._specs.get(key)
        except TypeError:  # a value that cannot be a key (a list): the general body
            return self._general
        if found is not None:
            return found
        if self._kinds.note(key):  # an argument of too many values left the key
            self._specs.clear()
            return self._general
        if len(self._specs) >= _MAX_KINDS:
            return self._general
        known = self._kinds.known(ev)
        root = _specialise(self._body, known)
        onces = [_specialise(o.body, known) for o in self._onces]
        eventually = [_specialise(e.body, known) for e in self._eventually]
        quiet = root is True and not any(c is not False for c in (*onces, *eventually))
        found = _Kind(self._compile_spec(root), [self._compile_spec(c) for c in onces],
                      [self._compile_spec(c) for c in eventually], quiet=quiet)
        self._specs[key] = found
        return found

    def _compile_spec(self, body: n.Body | bool) -> Eval:
        if body is True:
            full = self._full
            return lambda ev, pos: full
        if body is False:
            return lambda ev, pos: 0
        return self._compile(body)

    @property
    def kind_args(self) -> tuple[str, ...]:
        """The arguments whose values are part of an event's kind for this body (at the start:
        an argument of too many values leaves it later)."""
        return self._kinds.args

    def quiet_on(self, ev: Event) -> bool:
        """Whether ``ev`` is quiet here: the body is true on it whatever the past and the future,
        and no ``once`` / ``eventually`` operand holds on it (so it changes nothing). The same
        holds of every event that agrees with ``ev`` on its action, status, taint and the values
        of ``kind_args``: the answer depends on nothing else."""
        return self._kind(ev).quiet

    # -- monitoring -----------------------------------------------------------------------
    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        """Positions failing for good once ``ev`` happens at ``pos``, and the plan to commit it."""
        kind = self._kind(ev)
        if kind.quiet:  # true here whatever the past and the future; no operand holds
            return NO_EVENTS, (self._full, _NONE, self._groups)
        value = kind.root(ev, pos)
        once_hits = (
            [i for i, child in enumerate(kind.onces) if child(ev, pos)]
            if kind.onces else _NONE
        )
        hits = (
            [m for m, child in enumerate(kind.eventually) if child(ev, pos)]
            if kind.eventually else _NONE
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


#: Kinds of event whose specialised body a monitor keeps (past that, the general body).
_MAX_KINDS = 256
#: Distinct values an argument may take before it stops being part of an event's kind.
_MAX_VALUES = 16
_ABSENT = object()


class _Kind:
    """A body compiled for one kind of event: its root, ``once`` and ``eventually`` operands;
    ``quiet`` when the root is true and no operand can hold (nothing to compute or record)."""

    def __init__(self, root: Eval, onces: list[Eval], eventually: list[Eval], *,
                 quiet: bool) -> None:
        self.root, self.onces, self.eventually, self.quiet = root, onces, eventually, quiet


class _Kinds:
    """What makes an event's kind for one body: its action, its status, its taint when the body
    reads taint (``taint has …``) and the values of the arguments the body compares by ``=`` /
    ``in``. Every such atom has one truth value on all events of a kind, so the body can be
    specialised to the kind once (partial evaluation).

    An argument that takes more than ``_MAX_VALUES`` distinct values (a file name, say) stops
    being part of the kind: its atoms are evaluated on each event instead. So does the taint.
    """

    def __init__(self, body: n.Body) -> None:
        atoms: list[n.Atom] = []
        _atoms(body, atoms)
        self._args = tuple(sorted({a.arg for a in atoms if isinstance(a, n.ArgIn)}))
        self.args = self._args  # as at the start (``_args`` may shrink)
        self._taint = any(isinstance(a, n.TaintHas) for a in atoms)
        self._seen: dict[str | None, set[object]] = {arg: set() for arg in self._args}
        self._seen[None] = set()  # the taint's values
        self._tests: dict[int, Callable[[Event], bool]] = {}

    def key(self, ev: Event) -> tuple[object, ...]:
        """The event's kind (see ``kind_key``)."""
        return kind_key(ev, self._args, taint=self._taint)

    def note(self, key: tuple[object, ...]) -> bool:
        """Count a new kind's values; True when an argument (or the taint) just left the kind."""
        dropped = False
        for arg, value in zip((None, *self._args), key[2:], strict=True):
            seen = self._seen[arg]
            seen.add(value)
            if len(seen) > _MAX_VALUES:
                dropped = True
        if dropped:
            self._args = tuple(a for a in self._args if len(self._seen[a]) <= _MAX_VALUES)
            self._taint = self._taint and len(self._seen[None]) <= _MAX_VALUES
        return dropped

    def known(self, ev: Event) -> Callable[[n.Atom], bool | None]:
        """The truth value of each atom the kind decides on ``ev``'s kind, None for others."""
        args = frozenset(self._args)
        taint = self._taint

        def known(atom: n.Atom) -> bool | None:
            if isinstance(atom, n.ActionIn):
                return (ev.action in atom.names) != atom.negated
            if isinstance(atom, n.StatusIs):
                return (ev.status == atom.status) != atom.negated
            if isinstance(atom, n.TaintHas) and taint:
                return not atom.sources.isdisjoint(ev.taint)
            if isinstance(atom, n.ArgIn) and atom.arg in args:
                test = self._tests.get(id(atom))
                if test is None:
                    test = self._tests[id(atom)] = atom_test(atom)
                return test(ev)
            return None

        return known


def kind_key(ev: Event, args: tuple[str, ...], *, taint: bool = True) -> tuple[object, ...]:
    """The kind of ``ev`` made of its action, status, taint (when ``taint``) and the values of
    ``args``. A value that is not a string goes with its type: ``True`` and ``1`` are equal
    keys to Python, yet ``1`` is the number the language compares and ``True`` is not."""
    values = ev.args
    key: list[object] = [ev.action, ev.status, ev.taint if taint else None]
    for arg in args:  # (a loop: a generator unpacked into the tuple costs twice as much)
        value = values.get(arg, _ABSENT)
        key.append(value if type(value) is str else (type(value), value))
    return tuple(key)


def _atoms(body: n.Body, out: list[n.Atom]) -> None:
    if isinstance(body, n.Pattern):
        out.extend(body.atoms)
    elif isinstance(body, n.Not | n.Once | n.Eventually):
        _atoms(body.body, out)
    else:
        for part in body.parts:
            _atoms(part, out)


def _specialise(body: n.Body, known: Callable[[n.Atom], bool | None]) -> n.Body | bool:
    """``body`` with the atoms ``known`` decides replaced by their values and simplified.

    ``once`` and ``eventually`` nodes are kept as they are (the very objects: the monitor's
    state is indexed by them); their operands are specialised apart, on their own events.
    """
    if isinstance(body, n.Pattern):
        rest = []
        for atom in body.atoms:
            value = known(atom)
            if value is None:
                rest.append(atom)
            elif not value:
                return False
        if not rest:
            return True
        return body if len(rest) == len(body.atoms) else n.Pattern(tuple(rest), body.pos)
    if isinstance(body, n.Not):
        inner = _specialise(body.body, known)
        if isinstance(inner, bool):
            return not inner
        return body if inner is body.body else n.Not(inner, body.pos)
    if isinstance(body, n.And | n.Or):
        absorbing = isinstance(body, n.Or)  # true absorbs a disjunction, false a conjunction
        parts: list[n.Body] = []
        for part in body.parts:
            reduced = _specialise(part, known)
            if reduced is absorbing:
                return absorbing
            if reduced is not (not absorbing):
                parts.append(cast(n.Body, reduced))
        if not parts:
            return not absorbing
        if len(parts) == 1:
            return parts[0]
        if len(parts) == len(body.parts) and all(
                p is q for p, q in zip(parts, body.parts, strict=True)):
            return body
        return type(body)(tuple(parts), body.pos)
    return body


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


def conjuncts(body: n.Body) -> tuple[n.Body, ...]:
    """``body`` as the parts of a conjunction (``not (A or B)`` read as ``not A and not B``),
    flattened; a body that is no conjunction is its own one part."""
    if isinstance(body, n.And):
        return tuple(c for part in body.parts for c in conjuncts(part))
    if isinstance(body, n.Not) and isinstance(body.body, n.Or):
        return tuple(c for part in body.body.parts
                     for c in conjuncts(n.Not(body=part, pos=body.pos)))
    if isinstance(body, n.Not) and isinstance(body.body, n.Not):
        return conjuncts(body.body.body)
    return (body,)


class SplitAlwaysMonitor:
    """Monitors ``always(A and B)`` where only ``B`` nests a future in a past or a future:
    ``always(A)`` is judged at each event (so its failures block online), ``always(B)`` at
    the end of the run (``DeferredAlwaysMonitor``). The body is false exactly where one of
    them is, so the positions reported are the same as for the whole body."""

    def __init__(self, now: n.Body, later: n.Body) -> None:
        self._now = AlwaysMonitor(now)
        self._later = DeferredAlwaysMonitor(later)

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        failed, now = self._now.pending(ev, pos)
        _, later = self._later.pending(ev, pos)
        return failed, (now, later)

    def apply(self, plan: object, pos: int) -> None:
        now, later = cast(tuple[object, object], plan)
        self._now.apply(now, pos)
        self._later.apply(later, pos)

    def finish(self) -> tuple[int, ...]:
        return tuple(sorted({*self._now.finish(), *self._later.finish()}))

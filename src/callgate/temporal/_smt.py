"""The reference engine: ground a statement over the finite trace and ask Z3 (the only z3 import).

As in Vigil (section 5): the trace is a closed world. Every ground outcome of a pattern on an
event — the action, status, taint and text atoms, evaluated outside the solver — becomes a fact
(a Boolean symbol asserted true; an outcome that is false is simply absent). Argument values a
variable ties together become integer constants fixed by facts to the codes of their values,
and the solver compares them. Each statement compiles, by the rules of the paper's Figure 5, to
one requirement ``R(e)`` per event, each guarded by its own assumption literal; one query
decides the statement, and a minimal unsatisfiable core of the assumptions names the events
whose requirement fails — the matching event for ``abs`` and ``always``, the consumer for
``prec``, the trigger for ``resp``, ``bresp``, ``rslv`` and ``until``.

A solver answer of ``unknown`` (timeout, resource limit) or a solver error is reported as an
``unknown`` violation: the caller fails closed on it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Sequence
from typing import Any

import z3

from callgate._model import Event
from callgate.temporal import _nodes as n
from callgate.temporal._monitor import CompiledStatement, Violation
from callgate.temporal._patterns import (
    CompiledPattern,
    contained,
    observe,
    text_of,
    value_key,
)

Expr = Any  # a Python bool (a ground outcome) or a z3 BoolRef
Env = tuple[list[Any], list[Any]]  # (z3 constants, raw values) per variable


def check_statement(
    statement: CompiledStatement,
    events: Sequence[Event],
    *,
    timeout_ms: int = 10_000,
    rlimit: int | None = None,
) -> Violation | None:
    """Decide one statement on a whole trace; None when it holds.

    ``rlimit`` bounds the solver's work deterministically (tests use it to force ``unknown``).
    """
    try:
        return _decide(statement, events, timeout_ms, rlimit)
    except z3.Z3Exception as exc:
        return statement.unknown((), f"the solver failed: {exc}")
    except Exception as exc:  # fail closed on anything unexpected in grounding
        return statement.unknown((), f"internal error while grounding: {exc!r}")


def _decide(
    statement: CompiledStatement, events: Sequence[Event], timeout_ms: int, rlimit: int | None
) -> Violation | None:
    grounder = _Grounder(statement.statement, events)
    requirements = grounder.requirements()
    tracked = {i: r for i, r in requirements.items() if r is not True}
    if not tracked:
        return None
    ctx = grounder.ctx
    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", max(1, timeout_ms))
    if rlimit is not None:
        solver.set("rlimit", rlimit)
    for fact in grounder.facts:
        solver.add(fact)
    literals: dict[str, int] = {}
    assumptions = []
    for i, requirement in tracked.items():
        literal = z3.Bool(f"R[{i}]", ctx)
        solver.add(z3.Implies(literal, z3.BoolVal(False, ctx) if requirement is False
                              else requirement))
        literals[str(literal)] = i
        assumptions.append(literal)
    answer = solver.check(*assumptions)
    if answer == z3.sat:
        return None
    if answer == z3.unknown:
        return statement.unknown((), f"the solver returned unknown ({solver.reason_unknown()})")
    core = _minimize(solver, list(solver.unsat_core()))
    return statement.violation(tuple(sorted(literals[str(c)] for c in core)))


def _minimize(solver: z3.Solver, core: list[Any]) -> list[Any]:
    """Deletion-based minimal core: drop each literal the rest is still unsat without."""
    for literal in list(core):
        if len(core) <= 1:
            break
        if not any(c.eq(literal) for c in core):
            continue
        trial = [c for c in core if not c.eq(literal)]
        if solver.check(*trial) == z3.unsat:
            smaller = {str(c) for c in solver.unsat_core()}
            core = [c for c in trial if str(c) in smaller] or trial
    return core


def _or(items: Sequence[Expr]) -> Expr:
    kept = [x for x in items if x is not False]
    if any(x is True for x in kept):
        return True
    if not kept:
        return False
    return kept[0] if len(kept) == 1 else z3.Or(kept)


def _and(items: Sequence[Expr]) -> Expr:
    kept = [x for x in items if x is not True]
    if any(x is False for x in kept):
        return False
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else z3.And(kept)


def _not(item: Expr) -> Expr:
    return (not item) if isinstance(item, bool) else z3.Not(item)


def _implies(premise: Expr, conclusion: Expr) -> Expr:
    if premise is False or conclusion is True:
        return True
    if premise is True:
        return conclusion
    if conclusion is False:
        return z3.Not(premise)
    return z3.Implies(premise, conclusion)


class _Grounder:
    """Builds the fact base and the per-event requirements of one statement."""

    def __init__(self, statement: n.Statement, events: Sequence[Event]) -> None:
        self.ctx = z3.Context()
        self.statement = statement
        self.events = list(events)
        self.facts: list[Any] = []
        self._codes: dict[Hashable, int] = {}
        self._consts: dict[tuple[int, str], Any] = {}
        self._symbols: dict[tuple[int, int], Any] = {}
        self._candidates: dict[int, list[int]] = {}
        self.patterns = [
            CompiledPattern(p, statement.variables, binding=i == 0)
            for i, p in enumerate(statement.patterns)
        ]

    # -- facts --------------------------------------------------------------------------
    def _outcome(self, which: int, i: int, holds: bool) -> Expr:
        """The fact that pattern ``which``'s ground part holds on event ``i``."""
        if not holds:
            return False
        symbol = self._symbols.get((which, i))
        if symbol is None:
            symbol = self._symbols[(which, i)] = z3.Bool(f"p{which}[{i}]", self.ctx)
            self.facts.append(symbol)
        return symbol

    def _const(self, i: int, arg: str) -> Any:
        """The constant for argument ``arg`` of event ``i``, fixed by a fact to its value."""
        const = self._consts.get((i, arg))
        if const is None:
            key = value_key(self.events[i - 1].args[arg])
            code = self._codes.setdefault(key, len(self._codes))
            const = self._consts[(i, arg)] = z3.Int(f"e{i}.{arg}", self.ctx)
            self.facts.append(const == code)
        return const

    # -- patterns -----------------------------------------------------------------------
    def trigger(self, i: int) -> tuple[Expr, Env] | None:
        """The first pattern on event ``i``: its condition and the environment it binds."""
        ev, pattern = self.events[i - 1], self.patterns[0]
        size = len(self.statement.variables)
        consts: list[Any] = [None] * size
        raw: list[Any] = [None] * size
        if not pattern.ground(ev):
            return None
        for index, arg in pattern.binds:
            if arg not in ev.args:
                return None
            consts[index], raw[index] = self._const(i, arg), ev.args[arg]
        env = (consts, raw)
        return _and([self._outcome(0, i, True), *self._uses(pattern, i, env)]), env

    def use(self, which: int, j: int, env: Env) -> Expr:
        """Pattern ``which`` (not the first) on event ``j`` under ``env``."""
        pattern = self.patterns[which]
        if not pattern.ground(self.events[j - 1]):
            return False
        return _and([self._outcome(which, j, True), *self._uses(pattern, j, env)])

    def _uses(self, pattern: CompiledPattern, j: int, env: Env) -> list[Expr]:
        ev = self.events[j - 1]
        consts, raw = env
        out: list[Expr] = []
        for index, arg in pattern.eqs:
            out.append(self._const(j, arg) == consts[index] if arg in ev.args else False)
        for index, where in pattern.contains_uses:
            if where is None:
                haystack = observe(ev.output)
            elif where in ev.args:
                haystack = text_of(ev.args[where])
            else:
                out.append(False)
                continue
            out.append(contained(raw[index], haystack))
        return out

    def same_binding(self, j: int, env: Env) -> Expr:
        """The first pattern on event ``j``, binding the same values as ``env``."""
        found = self.trigger(j)
        if found is None:
            return False
        condition, (consts, _) = found
        return _and([condition, *(c == d for c, d in zip(consts, env[0], strict=True))])

    # -- requirements (Figure 5) --------------------------------------------------------
    def requirements(self) -> dict[int, Expr]:
        """``R(e)`` for every event that can trigger the statement."""
        st = self.statement
        if st.body is not None:
            values = _BodyGrounder(self).ground(st.body)
            return {i: values[i] for i in range(1, len(self.events) + 1)}
        out: dict[int, Expr] = {}
        for i in self._between(0, 1, len(self.events)):
            found = self.trigger(i)
            if found is not None:
                condition, env = found
                out[i] = _implies(condition, self._obligation(i, env))
        return out

    def _obligation(self, i: int, env: Env) -> Expr:
        st, n_events = self.statement, len(self.events)
        if st.form == "abs":
            return False
        # Disjuncts over events where a pattern's ground part is false are false facts: the
        # closed world drops them before the solver sees them.
        if st.form == "prec":
            return _or([self.use(1, j, env) for j in self._between(1, 1, i - 1)])
        if st.form == "resp":
            return _or([self.use(1, j, env) for j in self._between(1, i + 1, n_events)])
        if st.form == "bresp":
            assert st.bound is not None
            last = min(n_events, i + st.bound)
            return _or([self.use(1, j, env) for j in self._between(1, i + 1, last)])
        if st.form == "rslv":
            answers = [self.use(1, j, env) for j in self._between(1, i + 1, n_events)]
            repeats = [self.same_binding(j, env) for j in self._between(0, i + 1, n_events)]
            return _or([self.use(1, i, env), *answers, *repeats])
        return self._until(i, env)

    def _until(self, i: int, env: Env) -> Expr:
        resolved: Expr = False  # some resolver strictly between the trigger and the bad event
        parts: list[Expr] = []
        resolvers = set(self._between(1, i + 1, len(self.events)))
        bads = set(self._between(2, i + 1, len(self.events)))
        for b in sorted(resolvers | bads):
            if b in bads:
                parts.append(_implies(self.use(2, b, env), resolved))
            if b in resolvers:
                resolved = _or([resolved, self.use(1, b, env)])
        return _and(parts)

    def _between(self, which: int, low: int, high: int) -> list[int]:
        """Positions in [low, high] where pattern ``which``'s ground part holds."""
        found = self._candidates.get(which)
        if found is None:
            pattern = self.patterns[which]
            found = self._candidates[which] = [
                i for i, ev in enumerate(self.events, start=1) if pattern.ground(ev)
            ]
        return found[bisect_left(found, low):bisect_right(found, high)]


class _BodyGrounder:
    """Unfolds an ``always`` body over the positions 1..n (index 0 unused)."""

    def __init__(self, grounder: _Grounder) -> None:
        self.g = grounder
        self.n = len(grounder.events)
        self._leaves = 0

    def ground(self, body: n.Body) -> list[Expr]:
        positions = range(1, self.n + 1)
        if isinstance(body, n.Pattern):
            self._leaves += 1
            which = 100 + self._leaves  # symbol namespace apart from the form patterns
            pattern = CompiledPattern(body, (), binding=False)
            return [False, *(self.g._outcome(which, i, pattern.ground(self.g.events[i - 1]))
                             for i in positions)]
        if isinstance(body, n.Not):
            child = self.ground(body.body)
            return [False, *(_not(child[i]) for i in positions)]
        if isinstance(body, n.And | n.Or):
            parts = [self.ground(p) for p in body.parts]
            join = _and if isinstance(body, n.And) else _or
            return [False, *(join([p[i] for p in parts]) for i in positions)]
        if isinstance(body, n.Once):
            return self._once(self.ground(body.body), body.bound)
        return self._eventually(self.ground(body.body))

    def _once(self, child: list[Expr], bound: int | None) -> list[Expr]:
        out: list[Expr] = [False]
        if bound is not None:
            return out + [_or([child[j] for j in range(max(1, i - bound), i)])
                          for i in range(1, self.n + 1)]
        seen: Expr = False
        for i in range(1, self.n + 1):
            out.append(seen)
            seen = _or([seen, child[i]])
        return out

    def _eventually(self, child: list[Expr]) -> list[Expr]:
        out: list[Expr] = [False] * (self.n + 1)
        later: Expr = False
        for i in range(self.n, 0, -1):
            out[i] = later
            later = _or([later, child[i]])
        return out

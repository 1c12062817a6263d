"""A direct, quadratic reading of the finite-trace semantics, used as a test oracle.

Each function transcribes one rule of Vigil's Figure 5 with plain loops over positions; it
shares only single-event pattern evaluation with the engines under test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from callgate._model import Event
from callgate.temporal import _nodes as n
from callgate.temporal._patterns import CompiledPattern, value_key


def failing_events(statement: n.Statement, events: Sequence[Event]) -> set[int]:
    """The positions (from 1) whose requirement R(e) is false."""
    if statement.body is not None:
        return {i for i in range(1, len(events) + 1)
                if not _body(statement.body, events, i)}
    pats = [CompiledPattern(p, statement.variables, binding=k == 0)
            for k, p in enumerate(statement.patterns)]
    size = len(statement.variables)
    out: set[int] = set()
    for i, ev in enumerate(events, start=1):
        env = pats[0].bind(ev, size) if pats[0].ground(ev) else None
        if env is not None and not _holds(statement, pats, events, i, env):
            out.add(i)
    return out


def _holds(st: n.Statement, pats: list[CompiledPattern], events: Sequence[Event], i: int,
           env: tuple[Any, ...]) -> bool:
    count = len(events)

    def use(k: int, j: int) -> bool:
        return pats[k].matches(events[j - 1], env)

    if st.form == "abs":
        return False
    if st.form == "prec":
        return any(use(1, j) for j in range(1, i))
    if st.form == "resp":
        return any(use(1, j) for j in range(i + 1, count + 1))
    if st.form == "bresp":
        assert st.bound is not None
        return any(use(1, j) for j in range(i + 1, min(count, i + st.bound) + 1))
    if st.form == "rslv":
        key = tuple(value_key(v) for v in env)

        def same(j: int) -> bool:
            ev = events[j - 1]
            other = pats[0].bind(ev, len(env)) if pats[0].ground(ev) else None
            return other is not None and tuple(value_key(v) for v in other) == key

        return use(1, i) or any(use(1, j) or same(j) for j in range(i + 1, count + 1))
    return all(
        not use(2, b) or any(use(1, c) for c in range(i + 1, b))
        for b in range(i + 1, count + 1)
    )


def _body(body: n.Body, events: Sequence[Event], i: int) -> bool:
    if isinstance(body, n.Pattern):
        return CompiledPattern(body, (), binding=False).ground(events[i - 1])
    if isinstance(body, n.Not):
        return not _body(body.body, events, i)
    if isinstance(body, n.And):
        return all(_body(p, events, i) for p in body.parts)
    if isinstance(body, n.Or):
        return any(_body(p, events, i) for p in body.parts)
    if isinstance(body, n.Once):
        start = 1 if body.bound is None else max(1, i - body.bound)
        return any(_body(body.body, events, j) for j in range(start, i))
    return any(_body(body.body, events, j) for j in range(i + 1, len(events) + 1))

"""Scope rules of the behavioral language, checked after parsing.

* A variable ties patterns together: it is bound by ``ARG = $x`` in a statement's first pattern
  and used (``ARG = $x`` or ``… contains $x``) in at least one other pattern. A variable seen
  in one pattern only, used before it is bound, or written inside an ``always`` body is an error.
* A body has at most ``MAX_EVENTUALLY`` ``eventually`` operators, unless one is nested under
  ``once`` or another ``eventually``: such a body is judged at the end of the run (see
  ``_body.DeferredAlwaysMonitor``), with no truth table to bound.

All problems of a statement are reported together.
"""

from __future__ import annotations

from collections.abc import Iterator

from callgate._errors import Problem, TemporalError
from callgate.temporal import _nodes as n
from callgate.temporal._body import nested_future

#: The most ``eventually`` operators one ``always`` body may use (the monitor keeps a truth
#: table over them, 2**MAX_EVENTUALLY bits per pending residual).
MAX_EVENTUALLY = 5


def check_scope(statement: n.Statement) -> None:
    """Raise ``TemporalError`` listing every scope problem of ``statement``."""
    problems: list[Problem] = []
    if statement.body is not None:
        problems.extend(_body_problems(statement.body))
    else:
        problems.extend(_variable_problems(statement))
    if problems:
        raise TemporalError(problems)


def _problem(message: str, pos: n.Pos) -> Problem:
    return Problem(message, pos.source, pos.line, pos.column)


def _variable_problems(statement: n.Statement) -> list[Problem]:
    problems: list[Problem] = []
    first = statement.patterns[0]
    bound = {a.var for a in first.atoms if isinstance(a, n.VarEq)}
    uses: dict[str, list[int]] = {}
    for index, pattern in enumerate(statement.patterns):
        for atom in pattern.atoms:
            if isinstance(atom, n.VarEq | n.VarContains):
                uses.setdefault(atom.var, []).append(index)
                if index == 0 and isinstance(atom, n.VarContains) and atom.var not in bound:
                    problems.append(_problem(
                        f"${atom.var} is used with 'contains' before it is bound; bind it "
                        f"with ARG = ${atom.var} in the first pattern", atom.pos))
    for var, indexes in uses.items():
        where = _first_use(statement, var)
        if len(set(indexes)) < 2:
            problems.append(_problem(
                f"variable ${var} appears in only one pattern; a variable ties the first "
                "pattern to another one", where))
        elif var not in bound:
            problems.append(_problem(
                f"variable ${var} is not bound in the first pattern (write ARG = ${var} there)",
                where))
    return problems


def _first_use(statement: n.Statement, var: str) -> n.Pos:
    for pattern in statement.patterns:
        for atom in pattern.atoms:
            if isinstance(atom, n.VarEq | n.VarContains) and atom.var == var:
                return atom.pos
    return statement.pos


def _body_problems(body: n.Body) -> list[Problem]:
    problems: list[Problem] = []
    eventually_count = 0
    deferred = nested_future(body)  # judged at the end: no truth table, no limit
    for node, _, _ in _walk(body, False, False):
        if isinstance(node, n.Pattern):
            for atom in node.atoms:
                if isinstance(atom, n.VarEq | n.VarContains):
                    problems.append(_problem(
                        f"variable ${atom.var} inside an always body; variables need a form "
                        "with two patterns (prec, resp, bresp, rslv, until)", atom.pos))
        elif isinstance(node, n.Eventually):
            eventually_count += 1
            if eventually_count == MAX_EVENTUALLY + 1 and not deferred:
                problems.append(_problem(
                    f"an always body may use at most {MAX_EVENTUALLY} eventually operators",
                    node.pos))
    return problems


def _walk(
    body: n.Body, under_once: bool, under_eventually: bool
) -> Iterator[tuple[n.Body, bool, bool]]:
    yield body, under_once, under_eventually
    if isinstance(body, n.Not):
        yield from _walk(body.body, under_once, under_eventually)
    elif isinstance(body, n.And | n.Or):
        for part in body.parts:
            yield from _walk(part, under_once, under_eventually)
    elif isinstance(body, n.Once):
        yield from _walk(body.body, True, under_eventually)
    elif isinstance(body, n.Eventually):
        yield from _walk(body.body, under_once, True)

"""Which events can matter to a statement: the action filter the online monitor indexes by.

A statement is *quiet* on an event when processing the event could neither report a failure
nor change the statement's state. For most forms that holds when no pattern can match, which a
positive action condition in every pattern decides from the action alone. For an ``always``
body it holds when, with the leaves that name other actions false, the body is true and no
``once`` / ``eventually`` operand holds, whatever the past, the future and the leaves that name
no action say (checked by trying every value of those). ``bresp`` counts every event, so it is
never quiet.
"""

from __future__ import annotations

from itertools import product

from callgate.temporal import nodes as n

_MAX_FREE = 10  # beyond 2**10 cases the analysis is not worth it: treat the body as not quiet


def interest(statement: n.Statement) -> frozenset[str] | None:
    """The actions the statement is not quiet on, or None when any event may matter."""
    if statement.form == "bresp":
        return None
    if statement.body is not None:
        return _body_interest(statement.body)
    actions: set[str] = set()
    for pattern in statement.patterns:
        named = pattern_actions(pattern)
        if named is None:
            return None
        actions |= named
    return frozenset(actions)


def pattern_actions(pattern: n.Pattern) -> frozenset[str] | None:
    """The actions a pattern can match by its positive action conditions (None: any)."""
    named: frozenset[str] | None = None
    for atom in pattern.atoms:
        if isinstance(atom, n.ActionIn) and not atom.negated:
            named = atom.names if named is None else named & atom.names
    return named


def _body_interest(body: n.Body) -> frozenset[str] | None:
    leaves: list[n.Pattern] = []
    temporal: list[n.Once | n.Eventually] = []
    _collect(body, leaves, temporal)
    actions: set[str] = set()
    free: list[n.Body] = list(temporal)
    for leaf in leaves:
        named = pattern_actions(leaf)
        if named is None:
            free.append(leaf)  # its value does not follow from the action
        else:
            actions |= named
    if len(free) > _MAX_FREE:
        return None
    for values in product((False, True), repeat=len(free)):
        assignment = {id(node): value for node, value in zip(free, values, strict=True)}
        if not _value(body, assignment):
            return None
        if any(_value(node.body, assignment) for node in temporal):
            return None
    return frozenset(actions)


def _collect(body: n.Body, leaves: list[n.Pattern], temporal: list[n.Once | n.Eventually]) -> None:
    if isinstance(body, n.Pattern):
        leaves.append(body)
    elif isinstance(body, n.Not):
        _collect(body.body, leaves, temporal)
    elif isinstance(body, n.And | n.Or):
        for part in body.parts:
            _collect(part, leaves, temporal)
    else:
        temporal.append(body)
        _collect(body.body, leaves, temporal)


def _value(body: n.Body, assignment: dict[int, bool]) -> bool:
    """The body with named-action leaves false and the rest as assigned."""
    if isinstance(body, n.Pattern):
        return assignment.get(id(body), False)
    if isinstance(body, n.Not):
        return not _value(body.body, assignment)
    if isinstance(body, n.And):
        return all(_value(p, assignment) for p in body.parts)
    if isinstance(body, n.Or):
        return any(_value(p, assignment) for p in body.parts)
    return assignment[id(body)]

"""Validating a drafted statement before it is kept: it parses, its variables are scoped, and
every action, argument name and value it names exists in the signature Σ.

Parsing and scoping are the language's own (``parse_statement``). Grounding walks the parsed
patterns: an action must be one of Σ's actions; an argument must be an argument of some action
(or one the kernel adds to every call event: ``tool_class``, ``tool_action``, ``risk``); a
literal compared with ``=``/``in`` on an argument whose values Σ knows all of (an ``enum``, or
a sample trace's) must be one of them. A pattern that asks one event to be two different actions
matches nothing, so a statement holding one can never fire: it is refused too (a model asked to
"emit a statement that never fires" cannot slip one through that way).
"""

from __future__ import annotations

import json

from callgate._errors import TemporalError
from callgate.compile._signature import KERNEL_ARGS, Signature
from callgate.temporal import Statement, parse_statement
from callgate.temporal import _nodes as n

__all__ = ["ground"]


def ground(rule: str, signature: Signature) -> tuple[Statement | None, list[str]]:
    """The parsed statement and the problems that keep it out (none: it is kept)."""
    try:
        statement = parse_statement(rule, source="<draft>")
    except TemporalError as exc:
        return None, [f"does not parse: {exc}"]
    problems: list[str] = []
    bodies: list[n.Body] = [*statement.patterns]
    if statement.body is not None:
        bodies.append(statement.body)
    for body in bodies:
        for pattern in _patterns(body):
            problems.extend(_check_pattern(pattern, signature))
    return statement, list(dict.fromkeys(problems))


def _patterns(body: n.Body) -> list[n.Pattern]:
    if isinstance(body, n.Pattern):
        return [body]
    if isinstance(body, n.And | n.Or):
        return [p for part in body.parts for p in _patterns(part)]
    return _patterns(body.body)


def _check_pattern(pattern: n.Pattern, signature: Signature) -> list[str]:
    problems: list[str] = []
    required: list[frozenset[str]] = []
    for atom in pattern.atoms:
        inner = atom.atom if isinstance(atom, n.Each) else atom
        if isinstance(inner, n.ActionIn):
            unknown = sorted(inner.names - signature.actions)
            problems.extend(f"action {name!r} is not in the signature (its actions: "
                            f"{', '.join(sorted(signature.actions)) or 'none'})"
                            for name in unknown)
            if not inner.negated:
                required.append(inner.names)
            continue
        arg = getattr(inner, "arg", None)
        if arg is not None and arg not in signature.arg_names and arg not in KERNEL_ARGS:
            problems.append(f"argument {arg!r} is not in the signature (its arguments: "
                            f"{', '.join(sorted(signature.arg_names)) or 'none'})")
            continue
        if isinstance(inner, n.ArgIn) and inner.arg in signature.closed_values:
            known = signature.values.get(inner.arg, frozenset())
            for value in inner.values:
                text = value if isinstance(value, str) else json.dumps(value)
                if text not in known:
                    problems.append(f"value {text!r} of argument {inner.arg!r} is not one of its "
                                    f"values ({', '.join(sorted(known)[:12])})")
    if len(required) > 1 and not frozenset.intersection(*required):
        problems.append("a pattern asks one event to be two different actions: it matches "
                        "nothing, so the statement could never fire")
    return problems

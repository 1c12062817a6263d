"""Validating a drafted statement before it is kept: it parses, its variables are scoped, every
action, argument name and value it names exists in the signature Σ, and it can matter.

Parsing and scoping are the language's own (``parse_statement``). Grounding walks the parsed
patterns: an action must be one of Σ's actions; an argument must be one the pattern's actions
have (any action's, when the pattern names none); a literal compared with ``=``/``in`` on an
argument whose values Σ knows all of (an ``enum``, or a sample trace's) must equal one of them
as the language compares (``"6"`` is not ``6``). Arguments the kernel adds to a call online
(``tool_class``, ``tool_action``, ``risk``) are not in Σ, so a statement cannot rest on them.
Then meaning (``_witness``): a pattern no event over Σ matches, a statement no run over Σ
breaks (it could never fire: the quiet way to disable a requirement) and one every non-empty
run breaks (it would refuse all work) are refused.
"""

from __future__ import annotations

import json

from callgate._errors import TemporalError
from callgate._model import KNOWN_TAINT_SOURCES
from callgate.abstraction._flow import TRUSTED, UNSEEN, USER_DIRECTED
from callgate.compile._signature import Signature
from callgate.compile._witness import reach
from callgate.temporal import Statement, parse_statement
from callgate.temporal import _nodes as n
from callgate.temporal._patterns import links_of, literal_matches

__all__ = ["LABELS", "ground"]

#: The labels taint and provenance carry without a policy declaring more: the known sources
#: and the provenance of untainted and never-seen values. A compiled statement has no policy's
#: declared sources to rest on.
LABELS = frozenset({*KNOWN_TAINT_SOURCES, TRUSTED, UNSEEN, USER_DIRECTED, "system"})


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
            problems.extend(_check_pattern(pattern, signature, _never(statement, pattern)))
    if not problems:
        problems.extend(_meaning(statement, signature))
    return statement, list(dict.fromkeys(problems))


def _never(statement: Statement, pattern: n.Pattern) -> bool:
    """Whether ``pattern`` may match nothing: the resolver of ``until`` (``until(P, Q, B)``
    with a ``Q`` no event matches says "after P, never B", the language's way to tie the
    forbidden event to P's values)."""
    return statement.form == "until" and len(statement.patterns) > 1 and \
        pattern is statement.patterns[1]


def _meaning(statement: Statement, signature: Signature) -> list[str]:
    found = reach(statement, signature)
    problems = [f"the pattern at column {p.pos.column} matches no event over the signature "
                f"(its atoms contradict each other or the values Σ allows)" for p in found.dead
                if not _never(statement, p)]
    if found.breaks is None:
        problems.append("no run over the signature breaks it, so it could never fire")
    if found.holds is None:
        problems.append("every run over the signature breaks it, so it would refuse all work")
    return problems


def _patterns(body: n.Body) -> list[n.Pattern]:
    if isinstance(body, n.Pattern):
        return [body]
    if isinstance(body, n.And | n.Or):
        return [p for part in body.parts for p in _patterns(part)]
    return _patterns(body.body)


def _check_pattern(pattern: n.Pattern, signature: Signature, may_be_empty: bool) -> list[str]:
    problems: list[str] = []
    required: list[frozenset[str]] = []
    for atom in pattern.atoms:
        if isinstance(atom, n.ActionIn):
            unknown = sorted(atom.names - signature.actions)
            problems.extend(f"action {name!r} is not in the signature (its actions: "
                            f"{', '.join(sorted(signature.actions)) or 'none'})"
                            for name in unknown)
            if not atom.negated:
                required.append(atom.names)
    for atom in pattern.atoms:
        if isinstance(atom, n.TaintHas | n.FromSource):
            problems.extend(f"source {name!r} is not one callgate labels content with "
                            f"({', '.join(sorted(LABELS))})"
                            for name in sorted(atom.sources - LABELS))
    actions = frozenset.intersection(*required) if required else signature.actions
    if not actions:
        if not may_be_empty:
            problems.append("a pattern asks one event to be two different actions: it "
                            "matches nothing, so the statement could never fire")
        return problems
    has = frozenset().union(*(signature.args.get(a, frozenset()) for a in actions))
    for atom in pattern.atoms:
        inner = atom.atom if isinstance(atom, n.Each) else atom
        arg = getattr(inner, "arg", None)
        if arg is None:
            continue
        base = links_of(arg) or arg
        if base not in has:
            whose = ", ".join(sorted(actions)) if required else "any action"
            problems.append(f"argument {base!r} is not an argument of {whose} in the signature "
                            f"(its arguments: {', '.join(sorted(has)) or 'none'})")
            continue
        if isinstance(inner, n.ArgIn) and base in signature.closed_values and base == arg:
            texts = sorted(signature.values.get(base, ()))
            known = [json.loads(v) for v in texts]
            for value in inner.values:
                if not any(literal_matches(value, k) for k in known):
                    problems.append(f"value {json.dumps(value)} of argument {base!r} is not one "
                                    f"of its values ({', '.join(texts)[:200]})")
    return problems

"""Whether a statement can matter over the signature Σ: a run it breaks, a run it allows.

Grounding names; this judges meaning. A drafted statement that no run over Σ can break
enforces nothing (``always(P or not P)``, ``prec(P, P)``, a pattern whose atoms contradict
each other, a literal of the wrong type or outside an ``enum``), and one that breaks every
non-empty run refuses all work. Both are refused, whoever drafted them.

The judge is the language's own monitor (``BehaviorSet.check_trace``), run over small
candidate runs. The candidate events are built from Σ and from the statement's literals: each
action the statement names (and one it does not), each argument the statement reads that the
action has, set to the values Σ knows for it (only those, when a schema lists them all), the
statement's literals (and a neighbour of each number, an example of each text pattern) or two
fresh values that variables can share, and absent; each status; the taint and sources the
statement names. Events alike for every pattern of the statement are kept once. The search
tries every run of up to three such events, then runs of one event repeated (counting
statements need N + 1 alike events).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from callgate._model import Event
from callgate.compile._signature import Signature
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import Statement, compile_behavior
from callgate.temporal import _nodes as n
from callgate.temporal._patterns import CompiledPattern, links_of, value_key

__all__ = ["Reach", "reach"]

#: Candidate events built per statement before the alike ones are merged (sampled beyond).
MAX_CANDIDATES = 4096
#: Distinct events the runs are made of.
MAX_POOL = 16
#: Longest run tried with mixed events.
MAX_MIXED = 3
#: Longest run of one event repeated (a count of at most ten needs eleven).
MAX_REPEAT = 12
#: Values tried per argument.
MAX_VALUES = 10
_FRESH = ("v1", "v2")
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Reach:
    """What the search found: patterns no event matches, a run the statement breaks (None:
    none found, it can never fire), a non-empty run it allows (None: it refuses every run)."""

    dead: tuple[n.Pattern, ...]
    breaks: tuple[Event, ...] | None
    holds: tuple[Event, ...] | None


def reach(statement: Statement, signature: Signature) -> Reach:
    """Search runs over Σ for one the statement breaks and one it allows."""
    patterns = _patterns_of(statement)
    variables = statement.variables
    compiled = [CompiledPattern(p, variables, False) for p in patterns]
    events = list(_candidates(statement, patterns, signature))
    dead = tuple(p for p, c in zip(patterns, compiled, strict=True)
                 if not any(c.ground(e) for e in events))
    pool = _pool(events, compiled, patterns)
    behavior = compile_behavior([BehaviorStatement(id="s", rule=statement.text,
                                                   enforce="block")])
    breaks: tuple[Event, ...] | None = None
    holds: tuple[Event, ...] | None = None
    for run in _runs(pool):
        broken = bool(behavior.check_trace(run))
        if broken and breaks is None:
            breaks = run
        elif not broken and holds is None:
            holds = run
        if breaks is not None and holds is not None:
            break
    return Reach(dead, breaks, holds)


def _patterns_of(statement: Statement) -> list[n.Pattern]:
    found: list[n.Pattern] = list(statement.patterns)

    def walk(body: n.Body) -> None:
        if isinstance(body, n.Pattern):
            found.append(body)
        elif isinstance(body, n.And | n.Or):
            for part in body.parts:
                walk(part)
        else:
            walk(body.body)

    if statement.body is not None:
        walk(statement.body)
    return found


def _atoms(patterns: Sequence[n.Pattern]) -> Iterator[n.Atom]:
    for pattern in patterns:
        for atom in pattern.atoms:
            yield atom.atom if isinstance(atom, n.Each) else atom


def _glob_examples(pattern: str) -> list[str]:
    """Texts a glob matches: the pattern with ``*`` empty or a word, ``?`` a letter."""
    bare = pattern.replace("?", "x")
    return list(dict.fromkeys([bare.replace("*", ""), bare.replace("*", "v1")]))


@dataclass
class _Vocabulary:
    """What the candidate events are made of."""

    actions: list[str]
    values: dict[str, list[Any]]  # per argument the statement reads (as the atom names it)
    listed: set[str]  # arguments an any/all reads: their values are lists
    statuses: list[str]
    outputs: list[str]
    taints: list[frozenset[str]]
    sources: list[frozenset[str]]
    provenance: dict[str, list[frozenset[str]]]


def _vocabulary(statement: Statement, patterns: Sequence[n.Pattern],
                signature: Signature) -> _Vocabulary:
    named: list[str] = []
    literals: dict[str, list[Any]] = {}
    listed: set[str] = set()
    statuses = ["ok", "error"]
    outputs = [""]
    taints: list[frozenset[str]] = [frozenset()]
    sources: list[frozenset[str]] = [frozenset()]
    provenance: dict[str, list[frozenset[str]]] = {}
    for pattern in patterns:
        for atom in pattern.atoms:
            if isinstance(atom, n.Each) and atom.atom.arg is not None:
                listed.add(atom.atom.arg)
    for atom in _atoms(patterns):
        if isinstance(atom, n.ActionIn):
            named.extend(sorted(atom.names))
        elif isinstance(atom, n.StatusIs):
            statuses.append(atom.status)
        elif isinstance(atom, n.ArgIn):
            literals.setdefault(atom.arg, []).extend(atom.values)
        elif isinstance(atom, n.Compare):
            literals.setdefault(atom.arg, []).extend(
                [atom.value, atom.value + 1, atom.value - 1])
        elif isinstance(atom, n.TextMatch):
            if atom.arg is None:
                outputs.extend(_glob_examples(atom.pattern))
            else:
                literals.setdefault(atom.arg, []).extend(_glob_examples(atom.pattern))
        elif isinstance(atom, n.TaintHas):
            taints.extend(frozenset({s}) for s in sorted(atom.sources))
        elif isinstance(atom, n.FromSource):
            labels = [frozenset({s}) for s in sorted(atom.sources)] + [frozenset({"trusted"})]
            if atom.arg is None:
                sources.extend(labels)
            else:
                provenance.setdefault(atom.arg, []).extend(labels)
                literals.setdefault(atom.arg, [])
        elif isinstance(atom, n.VarEq):
            literals.setdefault(atom.arg, [])
        elif isinstance(atom, n.VarContains):
            if atom.arg is None:
                outputs.append(_FRESH[0])
            else:
                literals.setdefault(atom.arg, [])
    others = sorted(signature.actions - set(named))
    actions = list(dict.fromkeys(named)) + others[:1]
    if any(not any(isinstance(a, n.ActionIn) and not a.negated for a in p.atoms)
           for p in patterns):
        actions += others[1:]  # a pattern open to any action: every action may matter
    values = {arg: _values(arg, found, signature, arg in listed)
              for arg, found in literals.items()}
    return _Vocabulary(actions, values, listed, list(dict.fromkeys(statuses)),
                       list(dict.fromkeys(outputs)), list(dict.fromkeys(taints)),
                       list(dict.fromkeys(sources)),
                       {k: list(dict.fromkeys(v)) for k, v in provenance.items()})


def _values(arg: str, literals: list[Any], signature: Signature, listed: bool) -> list[Any]:
    """The values tried for an argument: Σ's own, only those when Σ knows them all."""
    base = links_of(arg) or arg
    known = [json.loads(v) for v in sorted(signature.values.get(base, ()))]
    if base in signature.exhaustive:
        found = known
    else:
        texts: list[Any] = known + literals + list(_FRESH)
        if links_of(arg) is not None:  # an identifier inside a text
            texts = [f"see {t}" if isinstance(t, str) else t for t in texts]
        found = texts
    unique: dict[Hashable, Any] = {}
    for value in found:
        unique.setdefault(_key(value), value)
    chosen = list(unique.values())[:MAX_VALUES]
    if listed:  # an any/all reads a list: one element, two, or none
        return [[v] for v in chosen] + [chosen[:2], []]
    return chosen


def _key(value: Any) -> Hashable:
    return ("list", json.dumps(value, sort_keys=True, default=str)) if isinstance(
        value, list | dict) else (type(value).__name__, value_key(value))


def _candidates(statement: Statement, patterns: Sequence[n.Pattern],
                signature: Signature) -> Iterator[Event]:
    vocab = _vocabulary(statement, patterns, signature)
    rng = random.Random(0)
    for action in vocab.actions:
        has = signature.args.get(action, frozenset())
        args = [a for a in vocab.values if (links_of(a) or a) in has]
        axes: list[list[Any]] = [[_MISSING, *vocab.values[a]] for a in args]
        axes += [vocab.statuses, vocab.outputs, vocab.taints, vocab.sources]
        prov_args = [a for a in args if a in vocab.provenance]
        axes += [[frozenset(), *vocab.provenance[a]] for a in prov_args]
        total = 1
        for axis in axes:
            total *= len(axis)
        combos: Iterator[tuple[Any, ...]]
        if total <= MAX_CANDIDATES:
            combos = itertools.product(*axes)
        else:
            combos = (tuple(rng.choice(axis) for axis in axes) for _ in range(MAX_CANDIDATES))
        for combo in combos:
            values = combo[:len(args)]
            status, output, taint, source = combo[len(args):len(args) + 4]
            prov = combo[len(args) + 4:]
            event_args = {(links_of(a) or a): v for a, v in zip(args, values, strict=True)
                          if v is not _MISSING}
            pieces = {a: (labels,) for a, labels in zip(prov_args, prov, strict=True)
                      if labels and (links_of(a) or a) in event_args}
            yield Event(action=action, args=event_args, status=status, output=output,
                        taint=taint, source=source, provenance=pieces)


def _pool(events: Sequence[Event], compiled: Sequence[CompiledPattern],
          patterns: Sequence[n.Pattern]) -> list[Event]:
    """One event per way of matching the statement's patterns (and of filling the arguments
    its variables read), those matching the most patterns first."""
    var_args = sorted({a.arg for p in patterns for a in p.atoms
                       if isinstance(a, n.VarEq | n.VarContains) and a.arg is not None})
    kept: dict[tuple[Hashable, ...], Event] = {}
    first: dict[tuple[bool, ...], Event] = {}
    for event in events:
        truth = tuple(c.ground(event) for c in compiled)
        shared = tuple(_key(event.args.get(a)) if a in event.args else None for a in var_args)
        kept.setdefault((truth, shared, event.output), event)
        first.setdefault(truth, event)
    # every way of matching first (the event that matches nothing included), then the variants
    ranked = sorted(first.items(), key=lambda kv: -sum(kv[0]))
    pool = [event for _, event in ranked]
    for event in kept.values():
        if len(pool) >= MAX_POOL:
            break
        if event not in pool:
            pool.append(event)
    return pool[:min(max(MAX_POOL, len(first)), 2 * MAX_POOL)]


def _runs(pool: Sequence[Event]) -> Iterator[tuple[Event, ...]]:
    for length in range(1, MAX_MIXED + 1):
        yield from itertools.product(pool, repeat=length)
    for event in pool:
        for count in range(MAX_MIXED + 1, MAX_REPEAT + 1):
            yield (event,) * count

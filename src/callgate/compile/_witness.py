"""Whether a statement can matter over the signature Σ: a run it breaks, a run it allows.

Grounding names; this judges meaning. A drafted statement that no run over Σ can break
enforces nothing (``always(P or not P)``, ``rslv(P, P)``, a pattern whose atoms contradict
each other, a literal of the wrong type or outside an ``enum``), and one that breaks every
non-empty run refuses all work. Both are refused, whoever drafted them.

The judge is the language's own monitor (``BehaviorSet.check_trace``), run over small
candidate runs. The candidate events are built from Σ and from the statement's literals. For
each pattern, events made to match it: for each action it allows, each field it reads set to a
value meeting all its atoms on that field (only Σ's values, when a schema lists them all; else
Σ's, the statement's literals with a neighbour of each number and an example of each text
pattern, or a fresh value; a field that must contain a variable's value: that value, or a
candidate text holding it or ending with it), then alternatives one field at a time, and the
fields it leaves free set otherwise. The statement's variables take, together, the values of
the arguments they are compared with or a fresh one, one choice at a time. Beside them, events
over every combination of those values (sampled past a bound), which match some patterns and
not others. The search tries every run of up to three events of one choice, then runs of one
event repeated (counting statements need N + 1 alike events), within ``MAX_RUNS``.
``tests/compile/test_witness.py`` holds it to random statements of every form and random runs:
what it calls impossible, no run does.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from callgate._model import Event, Status
from callgate.compile._signature import Signature
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import Statement, compile_behavior
from callgate.temporal import _nodes as n
from callgate.temporal._patterns import (
    CompiledPattern,
    atom_test,
    links_of,
    text_of,
    value_key,
)

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
#: Choices of values for the statement's variables tried together.
MAX_ASSIGNMENTS = 64
#: Runs judged, at most, over all the choices.
MAX_RUNS = 20_000
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
    compiled = [CompiledPattern(p, statement.variables, False) for p in patterns]
    vocab = _vocabulary(statement, patterns, signature)
    spread = list(_spread(vocab, signature))
    tries = [[e for p in patterns for e in _directed(p, vocab, signature, dict(values))]
             for values in _assignments(patterns, vocab)]
    every = spread + [e for events in tries for e in events]
    dead = tuple(p for p, c in zip(patterns, compiled, strict=True)
                 if not any(c.ground(e) for e in every))
    others = _pool(spread, compiled, patterns)[:MAX_POOL // 2]
    behavior = compile_behavior([BehaviorStatement(id="s", rule=statement.text,
                                                   enforce="block")])
    breaks: tuple[Event, ...] | None = None
    holds: tuple[Event, ...] | None = None
    budget = MAX_RUNS
    for directed in tries:  # the runs of one choice of the variables' values at a time
        pool = _pool(directed, compiled, patterns)[:MAX_POOL // 2]
        pool += [e for e in others if e not in pool]
        for run in _runs(pool):
            budget -= 1
            broken = bool(behavior.check_trace(run))
            if broken and breaks is None:
                breaks = run
            elif not broken and holds is None:
                holds = run
            if (breaks is not None and holds is not None) or budget <= 0:
                return Reach(dead, breaks, holds)
    return Reach(dead, breaks, holds)


def _assignments(patterns: Sequence[n.Pattern], vocab: _Vocabulary) -> list[dict[str, Any]]:
    """Values to try for the statement's variables, together: the values of the arguments any
    variable is compared with (two variables on one argument are one value), or a fresh one;
    every variable the same value first, then the other combinations."""
    names: set[str] = set()
    values: list[Any] = list(_FRESH)
    for pattern in patterns:
        for atom in pattern.atoms:
            if isinstance(atom, n.VarEq | n.VarContains):
                names.add(atom.var)
                if atom.arg is not None:
                    values.extend(v for v in vocab.values.get(atom.arg, [])
                                  if not isinstance(v, list))
    if not names:
        return [{}]
    order = sorted(names)
    unique = list({_key(v): v for v in values}.values())[:2 * MAX_VALUES]
    same = [dict.fromkeys(order, v) for v in unique]
    mixed = (dict(zip(order, combo, strict=True))
             for combo in itertools.product(unique, repeat=len(order))
             if len({_key(v) for v in combo}) > 1)
    return same + list(itertools.islice(mixed, max(0, MAX_ASSIGNMENTS - len(same))))


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
    statuses: list[Status]
    outputs: list[str]
    taints: list[frozenset[str]]
    sources: list[frozenset[str]]
    provenance: dict[str, list[frozenset[str]]]


def _vocabulary(statement: Statement, patterns: Sequence[n.Pattern],
                signature: Signature) -> _Vocabulary:
    named: list[str] = []
    literals: dict[str, list[Any]] = {}
    listed: set[str] = set()
    statuses: list[Status] = ["ok", "error", "denied"]
    outputs = ["", _FRESH[1]]
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
            statuses.append(cast(Status, atom.status))  # the parser admits only statuses
        elif isinstance(atom, n.ArgIn):
            literals.setdefault(atom.arg, []).extend(atom.values)
        elif isinstance(atom, n.Compare):
            literals.setdefault(atom.arg, []).extend(
                [atom.value, atom.value + 1, atom.value - 1, atom.value + 0.5,
                 atom.value - 0.5, atom.value + 100, atom.value - 100])
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
        # a pattern open to any action: an unnamed action matters only by which of the
        # statement's arguments it has, so one action of each such kind stands for the rest
        read = {links_of(arg) or arg for arg in literals}
        kinds: dict[frozenset[str], str] = {}
        for action in others:
            kinds.setdefault(signature.args.get(action, frozenset()) & read, action)
        actions += [a for a in kinds.values() if a not in actions]
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


#: Values kept per field of a directed event (the first, and alternatives one at a time).
MAX_CHOICES = 3


def _field_of(atom: n.Atom) -> str:
    """The field an atom reads: ``arg:NAME`` (``links(NAME)`` reads NAME), or one of the
    event's own: the output's text, the status, the taint, the output's source."""
    inner = atom.atom if isinstance(atom, n.Each) else atom
    arg = getattr(inner, "arg", None)
    if arg is not None:
        return f"arg:{links_of(arg) or arg}"
    if isinstance(atom, n.StatusIs):
        return "status"
    if isinstance(atom, n.TaintHas):
        return "taint"
    if isinstance(atom, n.FromSource):
        return "source"
    return "output"  # a text match or a ``contains $x`` on the output


def _directed(pattern: n.Pattern, vocab: _Vocabulary, signature: Signature,
              bound: dict[str, Any]) -> Iterator[Event]:
    """For each action the pattern allows, events that match it when one over Σ can: each
    field set, on its own, to a value that meets every atom of the pattern on that field (the
    atoms of different fields are independent; a variable's atoms take its value in
    ``bound``): the first such value of every field, then each field's alternatives in turn
    (an event that matches this pattern and not another is what many runs need)."""
    by_field: dict[str, list[n.Atom]] = {}
    for atom in pattern.atoms:
        if not isinstance(atom, n.ActionIn):
            by_field.setdefault(_field_of(atom), []).append(atom)
    for action in [a for a in vocab.actions if _allows(pattern, a)][:4]:
        has = signature.args.get(action, frozenset())
        choices = [_choices(field, atoms, Event(action=action), vocab, has, bound=bound)
                   for field, atoms in by_field.items()]
        if any(not found for found in choices):
            continue
        first = _merged(action, [found[0] for found in choices])
        yield first
        # the fields the pattern leaves free, set otherwise: another pattern may read them
        if "status" not in by_field:
            yield from (dataclasses.replace(first, status=s) for s in vocab.statuses[1:])
        if "output" not in by_field:
            yield from (dataclasses.replace(first, output=o) for o in vocab.outputs[1:])
        if "taint" not in by_field:
            yield from (dataclasses.replace(first, taint=t) for t in vocab.taints[1:])
        for index, found in enumerate(choices):
            for other in found[1:]:
                picks = [c[0] for c in choices]
                picks[index] = other
                yield _merged(action, picks)


def _merged(action: str, parts: Sequence[Event]) -> Event:
    """One event with the field each part set (each part sets one field)."""
    event = Event(action=action)
    for part in parts:
        event = dataclasses.replace(
            event, args={**event.args, **part.args},
            provenance={**event.provenance, **part.provenance},
            status=part.status if part.status != "ok" else event.status,
            output=part.output or event.output, taint=part.taint or event.taint,
            source=part.source or event.source)
    return event


def _allows(pattern: n.Pattern, action: str) -> bool:
    return all(not isinstance(a, n.ActionIn) or ((action in a.names) != a.negated)
               for a in pattern.atoms)


def _choices(field: str, atoms: list[n.Atom], blank: Event, vocab: _Vocabulary,
             has: frozenset[str], *, bound: dict[str, Any]) -> list[Event]:
    """Up to ``MAX_CHOICES`` events with only ``field`` set, each meeting every atom of
    ``atoms`` (all on that field); none when no candidate value does."""
    tests = [atom_test(a) for a in atoms if not isinstance(a, n.VarEq | n.VarContains)]
    variables = {a.var for a in atoms if isinstance(a, n.VarEq | n.VarContains)}
    if len({_key(bound[v]) for v in variables if v in bound}) > 1:
        return []  # two variables of different values on one field
    shared = [bound[v] for v in variables if v in bound]
    # ``contains $x`` alone: the value, or a candidate text holding it (another atom on the
    # field may need more around it, such as a text pattern's literal)
    holds = bool(shared) and not any(isinstance(a, n.VarEq) for a in atoms)
    options: list[Event] = []
    if field.startswith("arg:"):
        base = field[4:]
        if base not in has:
            return []
        written = {getattr(a.atom if isinstance(a, n.Each) else a, "arg", base) for a in atoms}
        candidates = [v for w in sorted(written) for v in vocab.values.get(w, [])]
        values = _holding(shared, candidates) if holds else shared or candidates
        labels = [frozenset(), *{lab for w in written for lab in vocab.provenance.get(w, [])}]
        options = [dataclasses.replace(blank, args={base: value}, provenance={
            w: (label,) for w in written} if label else {})
            for value in values for label in labels]
    elif field == "status":
        options = [dataclasses.replace(blank, status=s) for s in vocab.statuses]
    elif field == "taint":
        options = [dataclasses.replace(blank, taint=t) for t in vocab.taints]
    elif field == "source":
        options = [dataclasses.replace(blank, source=t) for t in vocab.sources]
    else:  # the output's text
        texts = _holding(shared, vocab.outputs) if holds else \
            [text_of(v) for v in shared] or vocab.outputs
        options = [dataclasses.replace(blank, output=o) for o in texts]
    return [e for e in options if all(t(e) for t in tests)][:MAX_CHOICES]


def _holding(shared: Sequence[Any], candidates: Sequence[Any]) -> list[Any]:
    """Values holding a variable's value: the value itself, its text, the candidate texts
    holding it, then each candidate text with it appended."""
    text = text_of(shared[0])
    found: list[Any] = [shared[0], text,
                        *(c for c in candidates if isinstance(c, str) and text in c)]
    found += [f"{c}{text}" for c in candidates if isinstance(c, str) and text not in c]
    unique: dict[Hashable, Any] = {}
    for value in found:
        unique.setdefault(_key(value), value)
    return list(unique.values())


def _spread(vocab: _Vocabulary, signature: Signature) -> Iterator[Event]:
    """Events over every combination of the candidate values (sampled past the bound): the
    ones that match some patterns and not others, and the ones that match none."""
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

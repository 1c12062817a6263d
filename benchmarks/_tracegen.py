"""Random traces for a behavioural statement, balanced between its two verdicts.

Two statements are judged equivalent by comparing their verdicts (violated or not) on many short
traces. Traces drawn uniformly rarely reach the interesting cases (the third ``rollback``, the
``warp_frames`` whose transform was validated), so the generator is aimed:

* **Vocabulary.** The actions are the tools of a ``tools.json`` (MCP ``tools/list`` shape); an
  argument's candidate values come from its JSON Schema (an ``enum``, else a small pool by type),
  from the literals the statements compare it with (``fps = 6`` gives 6; ``amount > 100`` gives
  99, 100 and 101; ``path ~ "/etc/*"`` gives ``/etc/`` and ``/etc/x``), and from a few fresh
  values nothing mentions. Strings share one pool (``t1``, ``t2``, ``t3``) across every
  argument, and numbers another, so the values a variable ties together (``transform = $t`` …
  ``target = $t``) coincide often, and outputs quote the same pool for ``output contains $x``.
  A statement's action or argument missing from the tools is added, so a compiled statement
  that names something else is still exercised.
* **Bias.** Most events take one of the actions the statements name; an argument that a
  statement compares takes one of the statement's literals half of the time; statuses are
  mostly ``ok``; an argument is sometimes left out (an atom on a missing argument is false).
* **Search.** Traces (1 to 12 events) are drawn at random, and, once one verdict has been seen,
  also by mutating a kept trace (insert, delete, replace or swap events, redraw arguments), which
  finds the rarer verdict near the boundary. Duplicates are dropped. Generation stops when both
  verdicts have ``count`` traces or the attempt budget is spent (``Sample.complete`` says
  which).

Everything is seeded: the same vocabulary, statements and seed give the same traces.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from callgate._errors import TemporalError
from callgate._model import Event, Status
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import BehaviorSet, compile_behavior, parse_statement
from callgate.temporal import _nodes as n

#: Longest trace drawn.
MAX_LENGTH = 12
#: Strings every string argument may take, so that variables can tie arguments together.
SHARED_STRINGS: tuple[str, ...] = ("t1", "t2", "t3")
#: Numbers every numeric argument may take.
SHARED_NUMBERS: tuple[int, ...] = (1, 2, 3)
#: Statuses and their weights.
STATUSES: tuple[tuple[str, float], ...] = (("ok", 0.75), ("error", 0.15), ("denied", 0.10))
#: Attempts (random draws and mutations) spent on one sample before giving up.
DEFAULT_BUDGET = 20_000
#: Chance that a required argument is left out (optional ones: three times as likely).
DROP_REQUIRED = 0.04


@dataclass(frozen=True)
class ArgSpec:
    """One argument of one tool: the values it may take and whether it is a list."""

    name: str
    values: tuple[Any, ...]
    literals: tuple[Any, ...] = ()
    required: bool = True
    is_list: bool = False


@dataclass(frozen=True)
class Vocabulary:
    """What traces are made of: each action's arguments, and the outputs events may carry."""

    tools: Mapping[str, tuple[ArgSpec, ...]]
    outputs: tuple[str, ...]
    output_literals: tuple[str, ...] = ()

    @property
    def actions(self) -> tuple[str, ...]:
        """The action names, in tools.json order (then the ones statements added)."""
        return tuple(self.tools)


@dataclass
class Literals:
    """What a set of statements mentions: actions, and the values compared per argument."""

    actions: list[str] = field(default_factory=list)
    args: dict[str, list[Any]] = field(default_factory=dict)
    elements: dict[str, list[Any]] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    mentioned: list[str] = field(default_factory=list)

    def values_of(self, name: str) -> list[Any]:
        """The values compared with argument ``name`` (noting that it is mentioned)."""
        if name not in self.mentioned:
            self.mentioned.append(name)
        return self.args.setdefault(name, [])


@dataclass
class Sample:
    """Traces on which the target statement(s) are violated and on which they hold."""

    violated: list[list[Event]]
    held: list[list[Event]]
    attempts: int
    count: int

    @property
    def complete(self) -> bool:
        """Whether both verdicts reached ``count`` traces."""
        return len(self.violated) >= self.count and len(self.held) >= self.count

    @property
    def traces(self) -> list[tuple[list[Event], bool]]:
        """Every trace with its verdict (True: violated)."""
        return [(t, True) for t in self.violated] + [(t, False) for t in self.held]

    def note(self) -> str:
        """A sentence on what was reached."""
        if self.complete:
            return (f"{len(self.violated)} violated and {len(self.held)} holding traces in "
                    f"{self.attempts} attempts")
        return (f"budget spent after {self.attempts} attempts: only {len(self.violated)} "
                f"violated and {len(self.held)} holding traces (wanted {self.count} each)")


# --- reading statements ---------------------------------------------------------------------


def _atoms(node: object) -> Iterator[tuple[object, bool]]:
    """Every atom of a statement or body, with whether it sits under ``any``/``all``."""
    if isinstance(node, n.Statement):
        for pattern in node.patterns:
            yield from _atoms(pattern)
        if node.body is not None:
            yield from _atoms(node.body)
    elif isinstance(node, n.Pattern):
        for atom in node.atoms:
            yield from _atoms(atom)
    elif isinstance(node, n.Not | n.Once | n.Eventually):
        yield from _atoms(node.body)
    elif isinstance(node, n.And | n.Or):
        for part in node.parts:
            yield from _atoms(part)
    elif isinstance(node, n.Each):
        yield node.atom, True
    else:
        yield node, False


def _glob_examples(pattern: str, casefold: bool) -> list[str]:
    """Texts a glob matches (``*`` as nothing and as ``x``), and upper-cased for ``~*``."""
    empty = pattern.replace("*", "").replace("?", "a")
    filled = pattern.replace("*", "x").replace("?", "a")
    found = [empty, filled]
    if casefold:
        found.append(filled.upper())
    return [t for i, t in enumerate(found) if t not in found[:i]]


def _number_examples(value: float) -> list[Any]:
    """Values on either side of a bound and the bound itself."""
    if isinstance(value, int):
        return [value - 1, value, value + 1]
    return [value - 0.5, value, value + 0.5]


def literals_of(statements: Iterable[str]) -> Literals:
    """The actions, argument values and output texts the statements mention."""
    found = Literals()
    for text in statements:
        for atom, element in _atoms(parse_statement(text)):
            _note_atom(found, atom, element)
    return found


def _note_atom(found: Literals, atom: object, element: bool) -> None:
    if isinstance(atom, n.ActionIn):
        found.actions.extend(a for a in sorted(atom.names) if a not in found.actions)
        return
    if isinstance(atom, n.TextMatch) and atom.arg is None:
        found.outputs.extend(_glob_examples(atom.pattern, atom.casefold))
        return
    if not isinstance(atom, n.ArgIn | n.TextMatch | n.Compare | n.VarEq | n.VarContains):
        return  # status, taint, provenance: not argument values
    if atom.arg is None:  # ``output contains $x``: the shared pool covers it
        return
    name = atom.arg
    if name.startswith("links("):
        name = name[len("links("):-1]
    values = found.values_of(name)
    if element:  # under any/all: the values are a list's elements
        values = found.elements.setdefault(name, [])
    if isinstance(atom, n.ArgIn):
        new: list[Any] = list(atom.values)
    elif isinstance(atom, n.TextMatch):
        new = list(_glob_examples(atom.pattern, atom.casefold))
    elif isinstance(atom, n.Compare):
        new = _number_examples(atom.value)
    else:
        new = []
    values.extend(v for v in new if not any(_same(v, w) for w in values))


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def statement_actions(statements: Iterable[str]) -> list[str]:
    """The actions the statements name (in order of first mention)."""
    return literals_of(statements).actions


# --- the vocabulary -------------------------------------------------------------------------


def load_tools(path: Path | str) -> list[dict[str, Any]]:
    """The tools of a ``tools.json`` (``{"tools": [...]}``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    tools: list[dict[str, Any]] = data["tools"]
    return tools


def _schema_values(name: str, schema: Mapping[str, Any], fresh: int) -> tuple[list[Any], bool]:
    """Candidate values from an argument's schema, plus ``fresh`` values; and whether the
    argument is a list (its candidates are then the elements')."""
    if schema.get("type") == "array":
        items = schema.get("items") or {}
        values, _ = _schema_values(name, items if isinstance(items, Mapping) else {}, fresh)
        return values, True
    if "enum" in schema:
        return list(schema["enum"]), False
    if "const" in schema:
        return [schema["const"]], False
    kind = schema.get("type")
    if kind == "boolean":
        return [True, False], False
    if kind == "integer":
        return [0, *SHARED_NUMBERS, *(40 + 7 * i for i in range(fresh))], False
    if kind == "number":
        return [0.5, *SHARED_NUMBERS, *(40.25 + 7 * i for i in range(fresh))], False
    if kind == "object":
        return [{"k": SHARED_STRINGS[0]}, {}], False
    return [*SHARED_STRINGS, *(f"{name}-fresh{i}" for i in range(fresh))], False


def build_vocabulary(
    tools: Sequence[Mapping[str, Any]], statements: Iterable[str], *, fresh: int = 2
) -> Vocabulary:
    """The vocabulary of a spec: its tools, plus what ``statements`` mention.

    An argument a statement names that no tool has is added to the actions that statement
    names (as optional); an action no tool declares is added with the arguments its statement
    names.
    """
    statements = list(statements)
    lits = literals_of(statements)
    specs: dict[str, list[ArgSpec]] = {}
    for t in tools:
        schema = t.get("inputSchema") or {}
        required = set(schema.get("required", []))
        specs[t["name"]] = []
        for name, prop in (schema.get("properties") or {}).items():
            values, is_list = _schema_values(name, prop, fresh)
            extra = lits.elements.get(name, []) if is_list else lits.args.get(name, [])
            if is_list:
                extra = extra + lits.args.get(name, [])
            specs[t["name"]].append(ArgSpec(
                name, _merged(values, extra), tuple(extra), name in required, is_list))
    declared = {a.name for args in specs.values() for a in args}
    for text in statements:
        local = literals_of([text])
        owners = [a for a in local.actions if a in specs] or list(specs)
        for action in local.actions:
            if action not in specs:
                specs[action] = []
                owners.append(action)
        for name in local.mentioned:
            if name in declared:
                continue
            extra = lits.args.get(name, [])
            for action in owners:
                if all(a.name != name for a in specs[action]):
                    specs[action].append(ArgSpec(
                        name, _merged(list(SHARED_STRINGS), extra), tuple(extra), False))
    outputs = ["", "done", *(f"result {s}" for s in SHARED_STRINGS), *lits.outputs]
    return Vocabulary({k: tuple(v) for k, v in specs.items()},
                      tuple(dict.fromkeys(outputs)), tuple(dict.fromkeys(lits.outputs)))


def _merged(values: Sequence[Any], extra: Sequence[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in [*values, *extra]:
        if not any(_same(v, w) for w in out):
            out.append(v)
    return tuple(out)


# --- drawing traces -------------------------------------------------------------------------

_Call = tuple[str, tuple[tuple[str, Any], ...], str, str]


def _draw_value(rng: random.Random, arg: ArgSpec) -> Any:
    pool = arg.literals if arg.literals and rng.random() < 0.5 else arg.values
    if not arg.is_list:
        return rng.choice(pool)
    chosen: list[Any] = []
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
        pick = rng.choice(arg.literals if arg.literals and rng.random() < 0.5 else arg.values)
        if pick not in chosen:
            chosen.append(pick)
    return chosen


def _draw_call(rng: random.Random, vocab: Vocabulary, action: str) -> _Call:
    args = []
    for arg in vocab.tools[action]:
        drop = DROP_REQUIRED if arg.required else 3 * DROP_REQUIRED
        if rng.random() >= drop:
            args.append((arg.name, _draw_value(rng, arg)))
    roll = rng.random()
    status = "ok"
    for name, weight in STATUSES:
        if roll < weight:
            status = name
            break
        roll -= weight
    if vocab.output_literals and rng.random() < 0.4:
        output = rng.choice(vocab.output_literals)
    else:
        output = rng.choice(vocab.outputs)
    return (action, tuple(args), status, output)


def _draw_action(rng: random.Random, vocab: Vocabulary, focus: Sequence[str], p: float) -> str:
    if focus and rng.random() < p:
        return rng.choice(focus)
    return rng.choice(vocab.actions)


def _random_trace(rng: random.Random, vocab: Vocabulary, focus: Sequence[str]) -> list[_Call]:
    length = rng.randint(1, MAX_LENGTH)
    p = rng.choice((0.6, 0.8, 1.0))
    return [_draw_call(rng, vocab, _draw_action(rng, vocab, focus, p)) for _ in range(length)]


def _mutate(rng: random.Random, vocab: Vocabulary, focus: Sequence[str],
            trace: Sequence[_Call]) -> list[_Call]:
    calls = list(trace)
    for _ in range(rng.randint(1, 2)):
        op = rng.choice(("insert", "delete", "replace", "swap", "redraw", "redraw"))
        if (op == "insert" and len(calls) < MAX_LENGTH) or not calls:
            calls.insert(rng.randint(0, len(calls)),
                         _draw_call(rng, vocab, _draw_action(rng, vocab, focus, 0.8)))
        elif op == "delete" and len(calls) > 1:
            del calls[rng.randrange(len(calls))]
        elif op == "replace":
            calls[rng.randrange(len(calls))] = _draw_call(
                rng, vocab, _draw_action(rng, vocab, focus, 0.8))
        elif op == "swap" and len(calls) > 1:
            i, j = rng.sample(range(len(calls)), 2)
            calls[i], calls[j] = calls[j], calls[i]
        else:  # same action, new arguments, status and output
            i = rng.randrange(len(calls))
            calls[i] = _draw_call(rng, vocab, calls[i][0])
    return calls


_STATUS: dict[str, Status] = {"ok": "ok", "error": "error", "denied": "denied"}


def to_events(calls: Sequence[_Call]) -> list[Event]:
    """Events numbered from 1."""
    return [Event(action=a, args=dict(args), status=_STATUS[status], output=output, seq=i)
            for i, (a, args, status, output) in enumerate(calls, start=1)]


def _key(calls: Sequence[_Call]) -> str:
    return json.dumps([[a, [list(x) for x in args], s, o] for a, args, s, o in calls],
                      sort_keys=True, default=str)


# --- judging --------------------------------------------------------------------------------


def compile_set(statements: Sequence[str]) -> BehaviorSet:
    """The statements as one set (ids ``s0``, ``s1``, …); raises ``TemporalError``."""
    return compile_behavior([BehaviorStatement(id=f"s{i}", rule=text, enforce="block")
                             for i, text in enumerate(statements)])


def violated(behavior: BehaviorSet, events: Sequence[Event]) -> bool:
    """Whether any statement of the set is violated (or undecided) on the trace."""
    return bool(behavior.check_trace(events, engine="incremental"))


#: A variable atom (``ARG = $x``, ``ARG contains $x``, ``output contains $x``).
_VARIABLE_ATOM = re.compile(r"[A-Za-z_][\w.-]*\s*(?:=|contains)\s*\$[A-Za-z_]\w*")
#: An atom that holds on every event (no action has this name).
_ANY_EVENT = "action != zz_no_such_action"


def _first_argument(text: str) -> str:
    """The text of a form's first pattern: up to the first comma outside brackets and quoted
    strings (double or single quotes, with backslash escapes)."""
    start = text.index("(") + 1
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            if depth == 0:
                return text[start:i]
            depth -= 1
        elif c == "," and depth == 0:
            return text[start:i]
    return text[start:]


def trigger_of(text: str) -> str | None:
    """``abs`` of the trigger of a ``prec``/``resp``/``bresp``/``rslv``/``until`` statement
    (its first pattern, variables dropped): violated exactly when some event could trigger it.
    None for ``abs`` and ``always``, whose holding traces are all alike."""
    if parse_statement(text).form not in ("prec", "resp", "bresp", "rslv", "until"):
        return None
    return f"abs({_VARIABLE_ATOM.sub(_ANY_EVENT, _first_argument(text))})"


def seed_of(*parts: str) -> int:
    """A stable seed from text (``hash`` of a string changes between runs)."""
    return zlib.crc32("\x1f".join(parts).encode("utf-8"))


def sample_traces(
    vocab: Vocabulary,
    target: str | Sequence[str],
    *,
    count: int = 100,
    seed: int = 0,
    budget: int = DEFAULT_BUDGET,
    focus: Iterable[str] = (),
) -> Sample:
    """Distinct traces on which ``target`` (one statement, or several judged together: violated
    when any is) is violated and on which it holds, ``count`` of each, within ``budget``
    attempts. Actions named by ``target`` and by the ``focus`` statements are preferred."""
    targets = [target] if isinstance(target, str) else list(target)
    behavior = compile_set(targets)
    named = statement_actions([*targets, *focus])
    focus_actions = [a for a in named if a in vocab.tools]
    triggers = [t for t in map(trigger_of, targets) if t is not None]
    try:
        trigger = compile_set(triggers) if triggers else None
    except TemporalError:  # an odd first pattern: judge without the vacuity filter
        trigger = None
    rng = random.Random(seed)
    seen: set[str] = set()
    kept: dict[bool, list[list[_Call]]] = {True: [], False: []}
    vacuous = 0  # holding traces kept in which nothing triggers the statement
    reserve: list[list[_Call]] = []  # more of them, used only when the budget runs out
    attempts = 0
    while attempts < budget and (len(kept[True]) < count or len(kept[False]) < count):
        attempts += 1
        short = min((True, False), key=lambda v: len(kept[v]))
        donors = kept[not short] or kept[short]
        if donors and attempts > 20 and rng.random() < 0.5:
            calls = _mutate(rng, vocab, focus_actions, rng.choice(donors))
        else:
            calls = _random_trace(rng, vocab, focus_actions)
        key = _key(calls)
        if key in seen:
            continue
        seen.add(key)
        events = to_events(calls)
        verdict = violated(behavior, events)
        if len(kept[verdict]) >= count:
            continue
        if not verdict and trigger is not None and not violated(trigger, events):
            if vacuous >= count // 2:
                if len(reserve) < count:
                    reserve.append(calls)
                continue
            vacuous += 1
        kept[verdict].append(calls)
    kept[False].extend(reserve[: max(0, count - len(kept[False]))])
    return Sample([to_events(c) for c in kept[True]], [to_events(c) for c in kept[False]],
                  attempts, count)


def describe(events: Sequence[Event]) -> str:
    """A trace on one line, for reports: ``warp_frames(transform=t1) error; …``."""
    parts = []
    for ev in events:
        args = ", ".join(f"{k}={json.dumps(v)}" for k, v in ev.args.items())
        text = f"{ev.action}({args})"
        if ev.status != "ok":
            text += f" {ev.status}"
        if ev.output:
            text += f" -> {json.dumps(ev.output)}"
        parts.append(text)
    return "; ".join(parts)

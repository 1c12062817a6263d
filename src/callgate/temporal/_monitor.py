"""The online monitor: one per run, asked about each pending call, told about each commit.

``check_pending`` decides the statements that a pending call can break for good — ``abs``,
``prec``, ``always`` bodies over the past (and a ``not eventually(…)`` an event falsifies),
``until`` (a bad event inside an open interval) and ``bresp`` (the l-th event after a trigger
that is not the response) — without changing any state. ``commit`` appends the event to the
run. ``finish`` judges the obligations still open when the run ends (``resp``, ``rslv``,
``eventually``, ``bresp`` windows). Work per event does not depend on the run's length (a
``contains`` use is the one exception: see ``forms``).

Statements are indexed by action: an event skips every statement it provably cannot affect
(``interest`` below).

Deciding never raises: an internal error while checking a statement becomes an ``unknown``
violation of that statement (the kernel treats it as a deny), and a statement whose state could
not be updated keeps failing that way for the rest of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Literal, Protocol

from callgate._errors import Problem, TemporalError
from callgate._model import Event, Witness
from callgate.temporal import _nodes as n
from callgate.temporal._body import (
    AlwaysMonitor,
    DeferredAlwaysMonitor,
    SplitAlwaysMonitor,
    conjuncts,
    kind_key,
    nested_future,
)
from callgate.temporal._forms import (
    AbsMonitor,
    BrespMonitor,
    PrecMonitor,
    RespMonitor,
    RslvMonitor,
    UntilMonitor,
)
from callgate.temporal._patterns import CompiledPattern

Enforce = Literal["block", "alert", "quarantine"]


@dataclass(frozen=True, slots=True)
class Violation:
    """A statement the trace breaks, with the offending events (numbered from 1).

    ``kind`` is ``"unknown"`` when the statement could not be decided (solver timeout, internal
    error); callers fail closed on it.
    """

    statement: str
    enforce: str
    events: tuple[int, ...]
    message: str
    kind: Literal["violation", "unknown"] = "violation"

    def witness(self) -> Witness:
        """The violation as the witness a ``Decision`` carries."""
        return Witness(statement=self.statement, events=self.events, detail=self.message)


class StatementMonitor(Protocol):
    """What every per-form monitor provides (see ``forms``)."""

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]: ...

    def apply(self, plan: object, pos: int) -> None: ...

    def finish(self) -> tuple[int, ...]: ...


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    """A parsed statement with its id and enforcement, ready to monitor or ground."""

    id: str
    enforce: Enforce
    statement: n.Statement

    def new_monitor(self) -> StatementMonitor:
        """Fresh incremental state for one run."""
        st = self.statement
        if st.body is not None:
            if not nested_future(st.body):
                return AlwaysMonitor(st.body)
            parts = conjuncts(st.body)
            now = [p for p in parts if not nested_future(p)]
            later = [p for p in parts if nested_future(p)]
            if not now:
                return DeferredAlwaysMonitor(st.body)
            # the parts that need no future are judged at each event: their failures block
            return SplitAlwaysMonitor(_joined(now), _joined(later))
        patterns = tuple(
            CompiledPattern(p, st.variables, binding=i == 0) for i, p in enumerate(st.patterns)
        )
        size = len(st.variables)
        if st.form == "bresp":
            assert st.bound is not None
            return BrespMonitor(patterns, size, st.bound)
        kinds: dict[str, type[AbsMonitor | PrecMonitor | RespMonitor | UntilMonitor]] = {
            "abs": AbsMonitor, "prec": PrecMonitor, "resp": RespMonitor,
            "rslv": RslvMonitor, "until": UntilMonitor,
        }
        return kinds[st.form](patterns, size)

    def violation(self, events: tuple[int, ...], *, at_end: bool = False) -> Violation:
        """A violation of this statement at ``events`` with a sentence saying why."""
        return Violation(self.id, self.enforce, events, describe(self.statement, events, at_end))

    def unknown(self, events: tuple[int, ...], reason: str) -> Violation:
        """An undecided statement (fail closed)."""
        return Violation(self.id, self.enforce, events, reason, "unknown")


def describe(st: n.Statement, events: tuple[int, ...], at_end: bool) -> str:
    """One sentence on why ``st`` fails at ``events``."""
    where = ", ".join(str(e) for e in events)
    plural = "s" if len(events) > 1 else ""
    if st.form == "abs":
        return f"event{plural} {where} match{'' if plural else 'es'} a forbidden pattern"
    if st.form == "prec":
        return f"event{plural} {where} happened without an earlier required event"
    if st.form == "until":
        return f"a forbidden event follows trigger{plural} {where} before it was resolved"
    if st.form == "bresp":
        return f"no response within {st.bound} events after event{plural} {where}"
    if st.form in ("resp", "rslv"):
        return f"trigger{plural} {where} left without a response when the run ended"
    tail = " (an eventually never came true)" if at_end else ""
    return f"the always body is false at event{plural} {where}{tail}"


class ActionIndex:
    """Which statements an event with a given action can matter to; shared by a set's runs."""

    #: Distinct actions remembered (actions come from the agent, so the cache is bounded).
    CACHE_LIMIT = 4096

    def __init__(self, statements: Sequence[CompiledStatement]) -> None:
        self._interest = [interest(s.statement) for s in statements]
        self._relevant: dict[str, tuple[int, ...]] = {}

    def relevant_to(self, action: str) -> tuple[int, ...]:
        """Indexes of the statements an event with ``action`` can matter to."""
        found = self._relevant.get(action)
        if found is None:
            found = tuple(
                i for i, actions in enumerate(self._interest)
                if actions is None or action in actions
            )
            if len(self._relevant) < self.CACHE_LIMIT:
                self._relevant[action] = found  # idempotent, so runs in threads may share it
        return found


class Monitor:
    """Incremental checking of a run: ``check_pending`` then ``commit`` per event, ``finish``.

    The statements consulted on an event are those its action is relevant to (``ActionIndex``)
    less the ``always`` bodies its kind is quiet on; which ones those are is found on the first
    event of each kind and remembered (up to ``KINDS_LIMIT`` kinds, then found per event).
    """

    #: Kinds of event whose statements to consult are remembered.
    KINDS_LIMIT = 4096

    def __init__(
        self, statements: Sequence[CompiledStatement], index: ActionIndex | None = None
    ) -> None:
        self._statements = tuple(statements)
        self._monitors: list[StatementMonitor | None] = [
            s.new_monitor() for s in self._statements
        ]
        self._index = index if index is not None else ActionIndex(self._statements)
        self._broken: dict[int, str] = {}
        self._length = 0
        self._cached: tuple[Event, dict[int, object]] | None = None
        # Which relevant statements are not quiet on an event's kind (``_active``): a kind
        # made of the action, status, taint and every argument an ``always`` body compares.
        self._kind_args = tuple(sorted({a for m in self._monitors if isinstance(m, AlwaysMonitor)
                                        for a in m.kind_args}))
        self._active: dict[tuple[object, ...], tuple[int, ...]] = {}

    def __len__(self) -> int:
        return self._length

    def check_pending(self, event: Event) -> list[Violation]:
        """Violations that ``event`` would cause now, as the next event; state is unchanged."""
        pos = self._length + 1
        violations: list[Violation] = [
            self._statements[i].unknown((pos,), reason) for i, reason in self._broken.items()
        ]
        plans: dict[int, object] = {}
        kind: tuple[object, ...] = ()
        remember = True
        try:
            kind = kind_key(event, self._kind_args)
            active = self._active.get(kind)
            relevant = self._index.relevant_to(event.action) if active is None else active
        except Exception:  # an unhashable action or value: consult every statement
            remember, active, relevant = False, None, tuple(range(len(self._statements)))
        for index in relevant:
            monitor = self._monitors[index]
            if monitor is None:
                continue
            try:
                failing, plans[index] = monitor.pending(event, pos)
            except Exception as exc:  # fail closed: an internal error denies
                statement = self._statements[index]
                violations.append(statement.unknown((pos,), f"internal error: {exc!r}"))
                plans[index] = None
                continue
            if failing:
                violations.append(self._statements[index].violation(failing))
        if active is None and remember and len(self._active) < self.KINDS_LIMIT:
            self._active[kind] = self._not_quiet(event, relevant)
        self._cached = (event, plans)
        return violations

    def _not_quiet(self, event: Event, relevant: tuple[int, ...]) -> tuple[int, ...]:
        """The statements of ``relevant`` that ``event``'s kind is not quiet on: a quiet one
        could neither fail nor change its state on any event of the kind (``quiet_on``)."""
        active = []
        for index in relevant:
            monitor = self._monitors[index]
            try:
                quiet = isinstance(monitor, AlwaysMonitor) and monitor.quiet_on(event)
            except Exception:  # not known to be quiet: consulted on every event of the kind
                quiet = False
            if not quiet:
                active.append(index)
        return tuple(active)

    def commit(self, event: Event) -> None:
        """Append ``event`` to the run (its ``seq`` must be the next position, or 0)."""
        pos = self._length + 1
        if event.seq not in (0, pos):
            raise TemporalError(
                [Problem(f"event seq {event.seq} committed at position {pos}", "<monitor>")]
            )
        if self._cached is None or self._cached[0] is not event:
            self.check_pending(event)
        assert self._cached is not None
        plans = self._cached[1]
        self._cached = None
        for index, plan in plans.items():
            monitor = self._monitors[index]
            if monitor is None:
                continue
            try:
                monitor.apply(plan, pos)
            except Exception as exc:  # state is now unknown: keep failing closed
                self._monitors[index] = None
                self._broken[index] = f"internal error while recording event {pos}: {exc!r}"
        self._length = pos

    def finish(self) -> list[Violation]:
        """Violations of obligations still open when the run ends."""
        violations: list[Violation] = []
        for index, statement in enumerate(self._statements):
            monitor = self._monitors[index]
            if monitor is None:
                violations.append(statement.unknown((), self._broken[index]))
                continue
            try:
                failing = monitor.finish()
            except Exception as exc:
                violations.append(statement.unknown((), f"internal error: {exc!r}"))
                continue
            if failing:
                violations.append(statement.violation(failing, at_end=True))
        return violations


# -- which events can matter to a statement -------------------------------------------------
#
# A statement is *quiet* on an event when processing the event could neither report a failure
# nor change the statement's state. For most forms that holds when no pattern can match, which a
# positive action condition in every pattern decides from the action alone. For an ``always``
# body it holds when, with the leaves that name other actions false, the body is true and no
# ``once`` / ``eventually`` operand holds, whatever the past, the future and the leaves that name
# no action say (checked by trying every value of those). ``bresp`` counts every event, so it is
# never quiet.

_MAX_FREE = 10  # beyond 2**10 cases the analysis is not worth it: treat the body as not quiet


def interest(statement: n.Statement) -> frozenset[str] | None:
    """The actions the statement is not quiet on, or None when any event may matter."""
    if statement.form == "bresp":
        return None
    if statement.body is not None:
        # a nested future is judged at the end over every event: none may be skipped
        return None if nested_future(statement.body) else _body_interest(statement.body)
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


def _joined(parts: list[n.Body]) -> n.Body:
    return parts[0] if len(parts) == 1 else n.And(parts=tuple(parts), pos=parts[0].pos)

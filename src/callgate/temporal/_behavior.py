"""Compiling a policy's behavior section, and judging whole traces with either engine.

``compile_behavior`` parses every statement and reports every problem at once (each at the
file, line and column of the rule text, when the caller can say where that text is).
``BehaviorSet.check_trace`` judges a finished trace: the ``incremental`` engine feeds it
through a ``Monitor`` exactly as the kernel does online; the ``smt`` engine grounds each
statement and asks Z3. Both return one ``Violation`` per broken statement, in policy order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from callgate._errors import Problem, TemporalError
from callgate._model import Event
from callgate.temporal._lexer import Placer
from callgate.temporal._monitor import ActionIndex, CompiledStatement, Enforce, Monitor, Violation
from callgate.temporal._parser import parse_with

Engine = Literal["incremental", "smt"]


class StatementText(Protocol):
    """A statement as written: its id, its rule text and what breaking it does.

    A policy file's ``BehaviorStatement`` is one; the language needs nothing else of the policy.
    """

    @property
    def id(self) -> str: ...

    @property
    def rule(self) -> str: ...

    @property
    def enforce(self) -> Enforce: ...


Locate = Callable[[int], tuple[str, str, int, int] | None]


class BehaviorSet:
    """An immutable set of compiled statements; ``monitor()`` gives per-run state."""

    def __init__(self, statements: Sequence[CompiledStatement]) -> None:
        self._statements = tuple(statements)
        self._index = ActionIndex(self._statements)

    @property
    def statements(self) -> tuple[CompiledStatement, ...]:
        """The compiled statements, in policy order."""
        return self._statements

    def __len__(self) -> int:
        return len(self._statements)

    def monitor(self) -> Monitor:
        """Fresh incremental state for one run."""
        return Monitor(self._statements, self._index)

    def check_trace(
        self,
        events: Sequence[Event],
        *,
        engine: Engine = "incremental",
        timeout_ms: int = 10_000,
    ) -> list[Violation]:
        """Judge a finished trace; events are numbered by position from 1.

        ``incremental`` equals feeding every event through ``monitor()`` (``check_pending``
        then ``commit``) and calling ``finish()``, merged per statement. ``smt`` asks Z3 once
        per statement, with ``timeout_ms`` per query.
        """
        numbered = [
            ev if ev.seq == i else dataclasses.replace(ev, seq=i)
            for i, ev in enumerate(events, start=1)
        ]
        if engine == "smt":
            check_statement = _smt_engine()
            found = [check_statement(s, numbered, timeout_ms=timeout_ms)
                     for s in self._statements]
            return [v for v in found if v is not None]
        if engine != "incremental":
            raise TemporalError([Problem(f"unknown engine {engine!r}", "<check>")])
        monitor = self.monitor()
        violations: list[Violation] = []
        for ev in numbered:
            violations.extend(monitor.check_pending(ev))
            monitor.commit(ev)
        violations.extend(monitor.finish())
        return merge_violations(violations, [s.id for s in self._statements])


def _smt_engine() -> Callable[..., Violation | None]:
    try:  # z3 is an optional extra; only the smt module imports it
        from callgate.temporal._smt import check_statement
    except ImportError as exc:
        raise TemporalError(
            [Problem("the smt engine needs z3-solver (install callgate[temporal])", "<check>")]
        ) from exc
    return check_statement


def merge_violations(violations: Sequence[Violation], order: Sequence[str]) -> list[Violation]:
    """One violation per statement (events united, sorted), in ``order``.

    An ``unknown`` of a statement wins over its violations: the statement was not decided.
    Linear in the number of violations: each statement's events and distinct messages are
    gathered first and joined once.
    """
    firsts: dict[str, Violation] = {}
    unknowns: dict[str, Violation] = {}
    events: dict[str, set[int]] = {}
    messages: dict[str, dict[str, None]] = {}
    for v in violations:
        firsts.setdefault(v.statement, v)
        if v.kind == "unknown":
            unknowns.setdefault(v.statement, v)
        events.setdefault(v.statement, set()).update(v.events)
        if v.kind != "unknown":
            messages.setdefault(v.statement, {}).setdefault(v.message, None)
    merged: list[Violation] = []
    for statement, first in firsts.items():
        united = tuple(sorted(events[statement]))
        unknown = unknowns.get(statement)
        if unknown is not None:
            merged.append(dataclasses.replace(unknown, events=united))
            continue
        texts = list(messages.get(statement, {}))
        message = texts[0] if len(texts) == 1 else _joined(texts)
        merged.append(dataclasses.replace(first, events=united, message=message))
    rank = {ident: i for i, ident in enumerate(order)}
    return sorted(merged, key=lambda v: rank.get(v.statement, len(rank)))


#: Distinct messages quoted in one merged violation; the rest are counted.
MAX_MERGED_MESSAGES = 20


def _joined(texts: list[str]) -> str:
    shown = "; ".join(texts[:MAX_MERGED_MESSAGES])
    extra = len(texts) - MAX_MERGED_MESSAGES
    return shown if extra <= 0 else f"{shown}; … and {extra} more"


def compile_behavior(
    statements: Sequence[StatementText], *, locate: Locate | None = None
) -> BehaviorSet:
    """Parse and scope-check every statement; ``TemporalError`` lists all problems.

    ``locate(i)`` gives ``(source_file, raw_text, line, column)`` of statement ``i``'s rule text
    in its file so problems name file:line:column; without it they name the statement id.
    """
    compiled: list[CompiledStatement] = []
    problems: list[Problem] = []
    for index, item in enumerate(statements):
        try:
            parsed = parse_with(item.rule, _placer(index, item, locate))
        except TemporalError as exc:
            problems.extend(exc.problems)
            continue
        compiled.append(CompiledStatement(item.id, item.enforce, parsed))
    if problems:
        raise TemporalError(problems)
    return BehaviorSet(compiled)


def _placer(index: int, item: StatementText, locate: Locate | None) -> Placer:
    where = locate(index) if locate is not None else None
    if where is None:
        return Placer(item.rule, f"<behavior {item.id}>", 1, 1)
    source, raw, line, column = where
    return Placer(item.rule, source, line, column, raw=raw)


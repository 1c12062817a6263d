"""Incremental monitors for the six preset forms: state updated once per event.

Each monitor answers two questions about an event at position ``pos`` (1-based):
``pending(ev, pos)`` returns the events whose requirement this event makes fail for good (empty
when none) together with a *plan*, the state change the event would cause; ``apply(plan, pos)``
makes that change. ``pending`` never mutates, so the kernel can ask about a call and still
refuse it. ``finish()`` returns the events whose requirements fail when the run ends (open
obligations). Reported positions are exactly the events whose requirement fails — the trigger
for ``resp``, ``bresp``, ``rslv`` and ``until``, the event itself for ``abs`` and ``prec``.

Open triggers are kept per binding (a hash of the bound values), with secondary indexes by
the values each later pattern compares with ``=``, so a lookup costs the same however long the
run is. A ``contains`` use cannot be hashed: it is checked against the candidates the indexes
leave (all open triggers when the pattern compares no variable with ``=``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from callgate._model import Event
from callgate.temporal._patterns import CompiledPattern, value_key

Env = tuple[Any, ...]
Key = tuple[Hashable, ...]
NO_EVENTS: tuple[int, ...] = ()
_Plan = tuple[list[Key], Env | None]


@dataclass(slots=True)
class _Entry:
    env: Env
    seqs: dict[int, None] = field(default_factory=dict)


class OpenTriggers:
    """Open triggers by binding, indexed for the patterns that look them up."""

    def __init__(self, lookups: Iterable[CompiledPattern]) -> None:
        self.entries: dict[Key, _Entry] = {}
        self._lookups = {id(p): p for p in lookups}
        self._indexes: dict[int, dict[Key, set[Key]]] = {
            id(p): {} for p in self._lookups.values() if p.eq_vars
        }

    def add(self, env: Env, seq: int, *, replace: bool = False) -> Key:
        """Open a trigger at ``seq`` bound to ``env``; ``replace`` drops older ones of the key."""
        key = tuple(value_key(v) for v in env)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(env)
            for ident, index in self._indexes.items():
                index.setdefault(self._lookups[ident].env_projection(env), set()).add(key)
        elif replace:
            entry.seqs.clear()
        entry.seqs[seq] = None
        return key

    def matching(self, pattern: CompiledPattern, ev: Event) -> list[Key]:
        """Keys of open triggers whose binding satisfies ``pattern``'s uses on ``ev``."""
        if not self.entries:
            return []
        candidates: Iterable[Key]
        if pattern.eq_vars:
            projected = pattern.project(ev)
            if projected is None:
                return []
            candidates = self._indexes[id(pattern)].get(projected, ())
        else:
            candidates = self.entries
        if not pattern.has_contains:
            return list(candidates)
        haystacks = pattern.haystacks(ev)
        if haystacks is None:
            return []
        return [k for k in candidates if pattern.contained_in(haystacks, self.entries[k].env)]

    def seqs_of(self, keys: Iterable[Key]) -> tuple[int, ...]:
        """The sorted trigger positions under ``keys``."""
        return tuple(sorted(s for k in keys for s in self.entries[k].seqs))

    def remove(self, key: Key) -> _Entry | None:
        """Close every trigger under ``key``."""
        entry = self.entries.pop(key, None)
        if entry is not None:
            for ident, index in self._indexes.items():
                projected = self._lookups[ident].env_projection(entry.env)
                bucket = index.get(projected)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del index[projected]
        return entry

    def all_seqs(self) -> tuple[int, ...]:
        """Every open trigger position, sorted."""
        return self.seqs_of(self.entries)


class _Form:
    """Shared shape: the trigger pattern ``first`` binds the statement's variables."""

    def __init__(self, patterns: tuple[CompiledPattern, ...], size: int) -> None:
        self.first = patterns[0]
        self.size = size

    def trigger(self, ev: Event) -> Env | None:
        if not self.first.ground(ev):
            return None
        return self.first.bind(ev, self.size)

    def finish(self) -> tuple[int, ...]:
        return NO_EVENTS


class AbsMonitor(_Form):
    """``abs(ψ)``: every event matching ψ fails."""

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        return ((pos,) if self.trigger(ev) is not None else NO_EVENTS), None

    def apply(self, plan: object, pos: int) -> None:
        """Nothing to remember."""


class PrecMonitor(_Form):
    """``prec(ψ, ψ')``: an event matching ψ fails unless an earlier one matched ψ'."""

    def __init__(self, patterns: tuple[CompiledPattern, ...], size: int) -> None:
        super().__init__(patterns, size)
        self.need = patterns[1]
        self._seen: dict[Key, list[tuple[str, ...]]] = {}

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        failing = NO_EVENTS
        env = self.trigger(ev)
        if env is not None and not self._has_earlier(env):
            failing = (pos,)
        if not self.need.ground(ev):
            return failing, None
        projected = self.need.project(ev)
        haystacks = self.need.haystacks(ev)
        if projected is None or haystacks is None:
            return failing, None
        return failing, (projected, haystacks)

    def _has_earlier(self, env: Env) -> bool:
        found = self._seen.get(self.need.env_projection(env))
        if found is None:
            return False
        if not self.need.has_contains:
            return True
        return any(self.need.contained_in(h, env) for h in found)

    def apply(self, plan: object, pos: int) -> None:
        if plan is None:
            return
        projected, haystacks = cast(tuple[Key, tuple[str, ...]], plan)
        texts = self._seen.setdefault(projected, [])
        if self.need.has_contains:
            texts.append(haystacks)


class RespMonitor(_Form):
    """``resp(ψ, ψ')``: a trigger fails unless a later event matches ψ' (judged at run end)."""

    def __init__(self, patterns: tuple[CompiledPattern, ...], size: int) -> None:
        super().__init__(patterns, size)
        self.answer = patterns[1]
        self.open = OpenTriggers([self.answer])

    def _resolved(self, ev: Event) -> list[Key]:
        return self.open.matching(self.answer, ev) if self.answer.ground(ev) else []

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        return NO_EVENTS, (self._resolved(ev), self.trigger(ev))

    def apply(self, plan: object, pos: int) -> None:
        resolved, env = cast(_Plan, plan)
        for key in resolved:
            self.open.remove(key)
        if env is not None:
            self.open.add(env, pos)

    def finish(self) -> tuple[int, ...]:
        return self.open.all_seqs()


class BrespMonitor(RespMonitor):
    """``bresp[l](ψ, ψ')``: the response must come within the next l events."""

    def __init__(self, patterns: tuple[CompiledPattern, ...], size: int, bound: int) -> None:
        super().__init__(patterns, size)
        self.bound = bound
        self._key_of: dict[int, Key] = {}

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        expiring = pos - self.bound
        if not self.open.entries:
            return NO_EVENTS, ([], self.trigger(ev))
        resolved = self._resolved(ev)
        key = self._key_of.get(expiring)
        failing = (expiring,) if key is not None and key not in resolved else NO_EVENTS
        return failing, (resolved, self.trigger(ev))

    def apply(self, plan: object, pos: int) -> None:
        resolved, env = cast(_Plan, plan)
        for key in resolved:
            entry = self.open.remove(key)
            for seq in entry.seqs if entry is not None else ():
                del self._key_of[seq]
        expired = self._key_of.pop(pos - self.bound, None)
        if expired is not None:
            left = self.open.entries[expired].seqs
            del left[pos - self.bound]
            if not left:
                self.open.remove(expired)
        if env is not None:
            self._key_of[pos] = self.open.add(env, pos)


class RslvMonitor(RespMonitor):
    """``rslv(ψ, ψ')``: the last trigger of each binding must be resolved by the end."""

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        env = self.trigger(ev)
        settled = env is not None and self.answer.matches(ev, env)
        return NO_EVENTS, (self._resolved(ev), env, settled)

    def apply(self, plan: object, pos: int) -> None:
        resolved, env, settled = cast(tuple[list[Key], Env | None, bool], plan)
        for key in resolved:
            self.open.remove(key)
        if env is not None:
            # A later trigger of the same binding supersedes the earlier one.
            key = tuple(value_key(v) for v in env)
            self.open.remove(key)
            if not settled:
                self.open.add(env, pos)


class UntilMonitor(_Form):
    """``until(ψ, ψ', ψb)``: after a trigger, ψb is forbidden until ψ' resolves it."""

    def __init__(self, patterns: tuple[CompiledPattern, ...], size: int) -> None:
        super().__init__(patterns, size)
        self.resolver, self.bad = patterns[1], patterns[2]
        self.open = OpenTriggers([self.resolver, self.bad])

    def pending(self, ev: Event, pos: int) -> tuple[tuple[int, ...], object]:
        failing = NO_EVENTS
        if self.bad.ground(ev):
            failing = self.open.seqs_of(self.open.matching(self.bad, ev))
        resolved = self.open.matching(self.resolver, ev) if self.resolver.ground(ev) else []
        return failing, (resolved, self.trigger(ev))

    def apply(self, plan: object, pos: int) -> None:
        resolved, env = cast(_Plan, plan)
        for key in resolved:
            self.open.remove(key)
        if env is not None:
            self.open.add(env, pos)

    def finish(self) -> tuple[int, ...]:
        return NO_EVENTS

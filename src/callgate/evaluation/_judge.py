"""Judging one run as the monitor would have judged it online.

Each step of the run (``agentdojo_steps``) is decided when the agent took it: the prompts and
answers as they are written, every tool call when the assistant asks for it (before its result
exists), each result indexed when it arrives. A run is **flagged** when a ``block`` or
``quarantine`` statement would have refused one of its events, or an obligation is still open at
its end. The events are then committed as they really happened, so every statement that would
have fired is known, not only the first.

With ``engine="smt"`` the whole trace is judged at once by the reference engine (Z3); the
statements' meaning is the same, so the flags are too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from callgate._model import Event
from callgate.abstraction import (
    Abstractor,
    DeclaredOutput,
    abstract_agentdojo_run,
    agentdojo_steps,
)
from callgate.abstraction._agentdojo import source_of
from callgate.policy._loader import LoadedPolicy
from callgate.policy._schema import Policy
from callgate.temporal import BehaviorSet, Violation, compile_behavior

__all__ = ["Engine", "Flag", "Judge", "Judgement", "declared_outputs"]

Engine = Literal["incremental", "smt"]
_BLOCKING = frozenset({"block", "quarantine"})


@dataclass(frozen=True, slots=True)
class Flag:
    """A statement that would have refused an event (``at_end``: an obligation left open)."""

    statement: str
    event: int
    line: int | None
    action: str
    args: str
    at_end: bool
    message: str


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the monitor says of one run: every flag in order, and the time it took."""

    flags: tuple[Flag, ...]
    events: int
    seconds: float

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    @property
    def witness(self) -> Flag | None:
        """The first flag: the call that would have been refused first."""
        return self.flags[0] if self.flags else None

    @property
    def statements(self) -> frozenset[str]:
        return frozenset(f.statement for f in self.flags)


def declared_outputs(policy: Policy) -> dict[str, DeclaredOutput]:
    """The policy's ``tools.NAME.output`` declarations, as the abstraction takes them."""
    return policy.declared_outputs()


class Judge:
    """Judges runs against one policy's statements (one suite's policy)."""

    def __init__(self, policy: Policy | LoadedPolicy, *, engine: Engine = "incremental"
                 ) -> None:
        loaded = policy if isinstance(policy, LoadedPolicy) else None
        policy = policy.policy if isinstance(policy, LoadedPolicy) else policy
        self.policy = policy
        self.engine = engine
        # a loaded file's statements are reported where they are written
        self.behaviors: BehaviorSet = compile_behavior(
            policy.behavior, locate=loaded.rule_place if loaded is not None else None)
        self.outputs = declared_outputs(policy)
        self.output_bound = policy.run_state.observation_chars

    def judge(self, run: Mapping[str, Any]) -> Judgement:
        """The monitor's verdict on one run (``TraceError`` for a run that cannot be read)."""
        started = time.perf_counter()
        if self.engine == "smt":
            flags, count = self._offline(run)
        else:
            flags, count = self._online(run)
        return Judgement(tuple(flags), count, time.perf_counter() - started)

    def _abstractor(self) -> Abstractor:
        return Abstractor(resolve_scripts=False, outputs=self.outputs, provenance=True,
                          output_bound=self.output_bound)

    def _online(self, run: Mapping[str, Any]) -> tuple[list[Flag], int]:
        monitor = self.behaviors.monitor()
        abstractor = self._abstractor()
        events: dict[int, Event] = {}
        flags: list[Flag] = []
        seq_of: dict[int, int] = {}
        for step in agentdojo_steps(run, self.outputs):
            if step.raw is None:
                if step.result_of in seq_of:
                    source = source_of(step.tool, self.outputs)
                    abstractor.index_output(seq_of[step.result_of], step.output, source,
                                            source=source, tool=step.tool)
                continue
            made = abstractor.preview(step.raw, line=step.line)
            for event in made:
                events[event.seq] = event
                flags.extend(self._flags(monitor.check_pending(event), events, at_end=False))
                monitor.commit(event)
            abstractor.accept(made, output=str(step.raw.get("output", "")))
            if "tool" in step.raw and made:
                seq_of[len(seq_of)] = made[-1].seq
        flags.extend(self._flags(monitor.finish(), events, at_end=True))
        return flags, len(events)

    def _offline(self, run: Mapping[str, Any]) -> tuple[list[Flag], int]:
        trace = abstract_agentdojo_run(run, outputs=self.outputs, abstractor=self._abstractor())
        by_seq = {e.seq: e for e in trace}
        found = self.behaviors.check_trace(trace, engine="smt")
        return self._flags(found, by_seq, at_end=False), len(trace)

    @staticmethod
    def _flags(found: list[Violation], events: Mapping[int, Event], *, at_end: bool
               ) -> list[Flag]:
        out: list[Flag] = []
        for violation in found:
            if violation.enforce not in _BLOCKING and violation.kind != "unknown":
                continue
            seq = violation.events[0] if violation.events else 0
            event = events.get(seq)
            out.append(Flag(
                statement=violation.statement, event=seq,
                line=event.line if event is not None else None,
                action=event.action if event is not None else "",
                args=_short(event.args) if event is not None else "",
                at_end=at_end, message=violation.message))
        return out


def _short(args: Mapping[str, Any], limit: int = 300) -> str:
    text = json.dumps(dict(args), ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "…"

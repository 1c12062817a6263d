"""The kernel's behavioral layer: calls become typed events, checked by temporal monitors.

At each pending call the kernel asks ``RunBehavior.check`` what the call's events would break
(prohibitions, preconditions, open intervals, bounded responses, ``always`` bodies over the past);
once the call is decided or has run, ``commit`` appends its events with their real status and
output. ``finish`` judges the obligations still open when the run ends. The six sequence rules
of the Ari Kernel design ship as a statement pack (``packs/sequences.yaml``) in the same
language, so there is one behavioral engine.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from callgate._model import DeclaredOutput, Event, ToolCall
from callgate.matchers._hosts import check_host, host_of
from callgate.policy._schema import BehaviorStatement, Capability, Policy, ToolPolicy
from callgate.temporal import BehaviorSet, Monitor, Violation, compile_behavior

if TYPE_CHECKING:
    from callgate.abstraction import Abstractor

#: Risk of a tool class, for "denied, then asked for something riskier" (data for the pack).
CLASS_RISK: dict[str, int] = {"http": 1, "database": 2, "file": 3, "shell": 5}
PACK = "sequences.yaml"
#: The HTTP actions that send data out (the only ones ``granted_host`` is computed for).
EGRESS_WRITES = frozenset({"post", "put", "patch", "delete"})


@functools.cache
def builtin_pack() -> tuple[BehaviorStatement, ...]:
    """The built-in statements (the six sequence rules), parsed once."""
    from callgate.policy._loader import parse_policy

    text = resources.files("callgate.policy.packs").joinpath(PACK).read_text(encoding="utf-8")
    return parse_policy(text, source=f"callgate/policy/packs/{PACK}").policy.behavior


@functools.cache
def _compiled(statements: tuple[BehaviorStatement, ...]) -> BehaviorSet:
    return compile_behavior(statements)


def flow_statements(policy: Policy) -> frozenset[str]:
    """The ids of the policy's statements that read ``flow_taint`` or ``flow_from``."""
    return frozenset(s.id for s in policy.behavior
                     if "flow_taint" in s.rule or "flow_from" in s.rule)


_PROVENANCE = re.compile(r"\bfrom\b|\blinks\s*\(")


def uses_provenance(policy: Policy) -> bool:
    """Whether a statement of the policy reads provenance (``from``, ``links(…)``): only then
    does each argument's provenance cost a lookup."""
    return any(_PROVENANCE.search(s.rule) for s in policy.behavior)


def descriptions_for(policy: Policy) -> dict[str, str]:
    """Statement id -> description, for the statements ``compile_for`` compiles."""
    pack = builtin_pack() if policy.run_state.behavioral_rules else ()
    return {s.id: s.description for s in (*policy.behavior, *pack) if s.description}


def compile_for(policy: Policy, loaded: Any = None) -> BehaviorSet:
    """The policy's statements (errors at file:line:col when ``loaded`` knows the places) plus
    the built-in pack when ``run_state.behavioral_rules`` is on."""
    own = tuple(policy.behavior)
    if own and loaded is not None and hasattr(loaded, "rule_place"):
        # Compiled once more with places, so a bad statement is reported where it is written.
        compile_behavior(own, locate=loaded.rule_place)
    pack = builtin_pack() if policy.run_state.behavioral_rules else ()
    return _compiled(own + pack)


def _command_text(params: Mapping[str, Any]) -> str | None:
    command = params.get("command")
    if isinstance(command, str):
        return command
    argv = params.get("argv")
    if isinstance(argv, list):
        return " ".join(str(a) for a in argv)
    return None


def granted_host(call: ToolCall, grants: Sequence[Capability]) -> str | None:
    """The call's host when a grant for its action lists that host by name (an explicit,
    human-made allow-list entry, not a grant of every host)."""
    url = call.parameters.get("url")
    if call.tool_class != "http" or call.action not in EGRESS_WRITES or not isinstance(url, str):
        return None
    for grant in grants:
        hosts = grant.constraints.allowed_hosts
        if (grant.tool_class == "http" and grant.covers_action(call.action) and hosts
                and check_host(url, hosts) is None):
            return host_of(url)
    return None


def call_args(call: ToolCall, declared: ToolPolicy | None,
              grants: Sequence[Capability] = ()) -> dict[str, Any]:
    """Arguments the kernel adds to a call's own event (beyond its parameters)."""
    extra: dict[str, Any] = {
        "tool_class": call.tool_class,
        "tool_action": call.action,
        "class_risk": CLASS_RISK.get(call.tool_class, 0),
    }
    if declared is not None:
        extra["risk"] = declared.risk
    host = granted_host(call, grants)
    if host is not None:
        extra["granted_host"] = host
    text = _command_text(call.parameters)
    if text is not None:
        extra["command_text"] = text
        extra["command_length"] = len(text)
    return extra


class RunBehavior:
    """Events and monitor state of one run."""

    def __init__(self, behaviors: BehaviorSet, *, working_dir: str,
                 descriptions: Mapping[str, str] | None = None,
                 flow_statements: frozenset[str] = frozenset(),
                 outputs: Mapping[str, DeclaredOutput] | None = None,
                 provenance: bool = False, observation_chars: int = 65_536) -> None:
        self._monitor: Monitor = behaviors.monitor()
        # statements about value flow: their witness also names where the values came from
        self._flow_statements = flow_statements
        # With no statement there is nothing to judge: calls are not even abstracted.
        self._idle = len(behaviors) == 0
        self._descriptions = dict(descriptions or {})
        self._abstractor = _abstractor(working_dir, outputs or {}, provenance,
                                       observation_chars)
        self._next = 1
        # The events of the last pending call as checked: committed as they are when nothing
        # about the call changed, so neither the abstraction nor the monitors redo the work.
        self._pending: tuple[Mapping[str, Any], list[Event], list[Event]] | None = None

    @property
    def length(self) -> int:
        return self._next - 1

    @property
    def idle(self) -> bool:
        """True when no statement applies: calls need not become events at all."""
        return self._idle

    def check(self, raw: Mapping[str, Any], extra: Mapping[str, Any],
              taint: frozenset[str]) -> list[Violation]:
        """What the pending call's events would break; no state changes."""
        if self._idle:
            return []
        plain = self._abstract(raw, preview=True)
        events = _augment(plain, extra, taint)
        violations: list[Violation] = []
        for event in events:
            for found in self._monitor.check_pending(event):
                if found.statement in self._flow_statements and event.flows:
                    sources = {f.source_event for f in event.flows} - set(found.events)
                    found = dataclasses.replace(  # noqa: PLW2901 - the same violation, named fully
                        found, events=(*found.events, *sorted(sources)))
                violations.append(found)
        self._pending = (raw, plain, events)
        return violations

    def commit(self, raw: Mapping[str, Any], extra: Mapping[str, Any],
               taint: frozenset[str]) -> None:
        """Append the decided (or executed) call's events, with its status and output."""
        if self._idle:
            return
        events = self._reuse(raw, extra, taint)
        if events is None:
            events = _augment(self._abstract(raw, preview=False), extra, taint)
        for event in events:
            self._monitor.commit(event)
            self._next = event.seq + 1

    def _reuse(self, raw: Mapping[str, Any], extra: Mapping[str, Any],
               taint: frozenset[str]) -> list[Event] | None:
        """The checked events, when the committed call is the checked one with no output."""
        pending, self._pending = self._pending, None
        if (pending is None or "output" in raw or self._abstractor is None
                or pending[0].get("parameters") is not raw.get("parameters")
                or pending[0].get("tool") != raw.get("tool")):
            return None
        _, plain, checked = pending
        status = raw.get("status", "ok")
        self._abstractor.accept(plain)
        if status == "ok" and all(e.taint == taint for e in checked) and not extra.keys() - (
                checked[0].args.keys() if checked else set()):
            return checked  # the very objects the monitors checked: their plans are reused
        return _augment([dataclasses.replace(e, status=status) for e in plain], extra, taint)

    def attach_output(self, seq: int, output: str, taint: frozenset[str], *,
                      source: frozenset[str] | None = None, tool: str | None = None) -> None:
        """The output of event ``seq``, reported after it was committed: indexed for value
        flow (a later argument copied from it carries ``taint`` and names it) and provenance
        (``source``: who wrote it; ``tool``: whose declared fields it has)."""
        if not self._idle and self._abstractor is not None:
            self._abstractor.index_output(seq, output, taint, source=source, tool=tool)

    def finish(self) -> list[Violation]:
        return self._monitor.finish()

    def explain(self, v: Violation) -> str:
        """The statement's description (when it has one) and where it broke."""
        described = self._descriptions.get(v.statement)
        return f"{described} ({v.message})" if described else v.message

    def _abstract(self, raw: Mapping[str, Any], *, preview: bool) -> list[Event]:
        if self._abstractor is None:
            return [_plain_event(raw, self._next)]
        return self._abstractor.preview(raw) if preview else self._abstractor.abstract(raw)


def _augment(events: list[Event], extra: Mapping[str, Any], taint: frozenset[str]) -> list[Event]:
    # The kernel knows the real taint: the run's, plus the output's once the call has run (a
    # denied fetch brought nothing in, whatever its tool would have returned), plus the taint of
    # earlier outputs an argument's value was copied from (value flow).
    # An event with value flows also names them: ``flow_taint`` (the taint its arguments
    # brought from earlier outputs, apart from the run's) and ``flow_from`` (those events).
    out = []
    for i, ev in enumerate(events):
        args = {**ev.args, **extra} if i == 0 else ev.args
        flowed = taint
        if ev.flows:
            carried = frozenset().union(*(f.taint for f in ev.flows))
            flowed = taint | carried
            args = {**args, "flow_taint": sorted(carried),
                    "flow_from": sorted({f.source_event for f in ev.flows})}
        # (``Event`` built field by field: ``dataclasses.replace`` costs several times more)
        out.append(Event(ev.action, args, ev.status, ev.output, flowed, ev.seq, ev.line,
                         ev.derived, ev.flows, ev.provenance, ev.source))
    return out


def _abstractor(working_dir: str, outputs: Mapping[str, DeclaredOutput], provenance: bool,
                observation_chars: int) -> Abstractor | None:
    try:
        from callgate.abstraction import Abstractor
    except ImportError:  # the abstraction extra is optional: calls then map to one event each
        return None
    return Abstractor(working_dir=working_dir, outputs=outputs, provenance=provenance,
                      output_bound=observation_chars)


def _plain_event(raw: Mapping[str, Any], seq: int) -> Event:
    if "action" in raw and "tool" not in raw:
        args = dict(raw.get("args", {}))
        action = str(raw["action"])
    else:
        args = dict(raw.get("parameters", {}))
        action = str(raw.get("tool", ""))
    return Event(action=action, args=args, status=raw.get("status", "ok"),
                 output=str(raw.get("output", ""))[:65_536], seq=seq)


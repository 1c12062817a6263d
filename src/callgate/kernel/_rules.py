"""Priority rules: evaluated by ascending priority (then file order); the first match decides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from callgate._model import Reason, ToolCall, Verdict
from callgate.matchers._regex import PolicyPattern, compile_policy_pattern
from callgate.policy._schema import ParamMatch, Rule


@dataclass(frozen=True, slots=True)
class _CompiledParam:
    name: str
    pattern: PolicyPattern | None
    in_: frozenset[str] | None
    not_in: frozenset[str] | None

    def matches(self, params: Mapping[str, Any]) -> bool:
        # A condition on a parameter the call does not carry is false, negations included.
        if self.name not in params:
            return False
        value = params[self.name]
        text = value if isinstance(value, str) else str(value)
        # Raises SubjectError for text RE2 cannot read (a lone surrogate): the decision denies.
        if self.pattern is not None and not self.pattern.matches(text):
            return False
        if self.in_ is not None and text not in self.in_:
            return False
        return not (self.not_in is not None and text in self.not_in)


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    rule: Rule
    tools: frozenset[str] | None
    classes: frozenset[str] | None
    actions: frozenset[str] | None
    taints: frozenset[str] | None
    params: tuple[_CompiledParam, ...]
    #: the rule's verdict and the reasons a decision by it gives (built once)
    decision: Verdict
    reasons: tuple[Reason, ...]

    def admits(self, tool: str, tool_class: str, action: str) -> bool:
        """Whether the rule's name, class and action conditions hold."""
        return ((self.tools is None or tool in self.tools)
                and (self.classes is None or tool_class in self.classes)
                and (self.actions is None or action in self.actions))

    def matches(self, call: ToolCall, taint: frozenset[str]) -> bool:
        if not self.admits(call.tool, call.tool_class, call.action):
            return False
        return self.matches_rest(call, taint)

    def matches_rest(self, call: ToolCall, taint: frozenset[str]) -> bool:
        """The taint and parameter conditions (the rest, once ``admits`` holds)."""
        if self.taints is not None and not (self.taints & taint):
            return False
        for param in self.params:  # noqa: SIM110 - a plain loop: this runs on every call
            if not param.matches(call.parameters):
                return False
        return True


def _opt(values: Sequence[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def _compile_param(name: str, m: ParamMatch) -> _CompiledParam:
    # Linear-time (RE2) with Python's meaning; a pattern that cannot be kept raises PatternError,
    # so a policy built in code without the loader is refused too.
    pattern = compile_policy_pattern(m.pattern) if m.pattern is not None else None
    return _CompiledParam(name, pattern, _opt(m.in_), _opt(m.not_in))


#: Distinct (tool, class, action) triples whose candidate rules are remembered.
_MAX_PLANS = 4096


class RuleSet:
    """Compiled rules in evaluation order.

    For each (tool, class, action) the rules whose name, class and action conditions admit it
    are found once and remembered (up to ``_MAX_PLANS`` triples); a call then tests only their
    taint and parameter conditions.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        ordered = sorted(enumerate(rules), key=lambda pair: (pair[1].priority, pair[0]))
        self._rules = tuple(
            _CompiledRule(
                rule=r,
                tools=_opt(r.match.tool),
                classes=_opt(r.match.tool_class),
                actions=_opt(r.match.action),
                taints=_opt(r.match.taint_sources),
                params=tuple(_compile_param(n, m) for n, m in r.match.parameters.items()),
                decision=r.decision,
                reasons=(Reason(id=r.id, check="rule", message=r.reason or r.decision),),
            )
            for _, r in ordered
        )
        self._plans: dict[tuple[str, str, str], tuple[_CompiledRule, ...]] = {}

    def first_match(self, call: ToolCall, taint: frozenset[str]) -> Rule | None:
        """The rule that decides the call, or None (which means deny)."""
        found = self.first(call, taint)
        return None if found is None else found.rule

    def first(self, call: ToolCall, taint: frozenset[str]) -> _CompiledRule | None:
        """The compiled rule that decides the call (its verdict and reasons), or None."""
        key = (call.tool, call.tool_class, call.action)
        plan = self._plans.get(key)
        if plan is None:
            plan = tuple(r for r in self._rules if r.admits(*key))
            if len(self._plans) < _MAX_PLANS:
                self._plans[key] = plan
        for compiled in plan:
            if compiled.matches_rest(call, taint):
                return compiled
        return None

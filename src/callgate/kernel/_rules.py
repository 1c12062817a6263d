"""Priority rules: evaluated by ascending priority (then file order); the first match decides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from callgate._model import ToolCall
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

    def matches(self, call: ToolCall, taint: frozenset[str]) -> bool:
        if self.tools is not None and call.tool not in self.tools:
            return False
        if self.classes is not None and call.tool_class not in self.classes:
            return False
        if self.actions is not None and call.action not in self.actions:
            return False
        if self.taints is not None and not (self.taints & taint):
            return False
        return all(p.matches(call.parameters) for p in self.params)


def _opt(values: Sequence[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def _compile_param(name: str, m: ParamMatch) -> _CompiledParam:
    # Linear-time (RE2) with Python's meaning; a pattern that cannot be kept raises PatternError,
    # so a policy built in code without the loader is refused too.
    pattern = compile_policy_pattern(m.pattern) if m.pattern is not None else None
    return _CompiledParam(name, pattern, _opt(m.in_), _opt(m.not_in))


class RuleSet:
    """Compiled rules in evaluation order."""

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
            )
            for _, r in ordered
        )

    def first_match(self, call: ToolCall, taint: frozenset[str]) -> Rule | None:
        """The rule that decides the call, or None (which means deny)."""
        for compiled in self._rules:
            if compiled.matches(call, taint):
                return compiled.rule
        return None

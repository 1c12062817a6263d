"""Warnings for policies that load but are probably not what their author meant."""

from __future__ import annotations

from callgate._model import KNOWN_TAINT_SOURCES
from callgate.policy._schema import Policy, Rule


def _is_catch_all(rule: Rule) -> bool:
    m = rule.match
    return (m.tool is None and m.tool_class is None and m.action is None
            and m.taint_sources is None and not m.parameters)


def lint_policy(policy: Policy) -> list[str]:
    """Human-readable warnings; an empty list means nothing looked risky."""
    out: list[str] = []
    if policy.principal is not None:
        for i, cap in enumerate(policy.principal.capabilities):
            c = cap.constraints
            if all(getattr(c, f) is None for f in type(c).model_fields):
                acts = ", ".join(cap.actions) or "every action"
                out.append(f"principal.capabilities[{i}]: grants {cap.tool_class} ({acts}) "
                           "without any constraint")
    ordered = sorted(enumerate(policy.rules), key=lambda p: (p[1].priority, p[0]))
    for pos, (_, rule) in enumerate(ordered):
        if _is_catch_all(rule):
            if rule.decision == "allow":
                out.append(f"rule {rule.id}: allows every call that passes the capabilities")
            for _, later in ordered[pos + 1:]:
                out.append(f"rule {later.id}: never reached, rule {rule.id} matches everything "
                           "before it")
            break
        for src in rule.match.taint_sources or ():
            if src not in KNOWN_TAINT_SOURCES:
                out.append(f"rule {rule.id}: taint source {src!r} is not one callgate attaches")
    for name, tool in policy.tools.items():
        # a declaration that only says what the tool's output is has no stance to forget
        if tool.filesystem is None and tool.model_fields_set - {"output", "risk"}:
            out.append(f"tools.{name}: filesystem stance unspecified (the path gate is off)")
    return out

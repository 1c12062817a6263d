"""Warnings for policies that load but are probably not what their author meant."""

from __future__ import annotations

import re

from callgate._errors import Problem
from callgate._model import KNOWN_TAINT_SOURCES
from callgate.policy._loader import LoadedPolicy
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


def dead_rules(loaded: LoadedPolicy) -> list[Problem]:
    """Rules and statements that can never decide anything, each at its file:line:col.

    Only what can be proven is reported: a rule whose every condition is implied by an earlier
    rule's (the earlier one always matches first: same or broader name, class, action and taint
    sets, and parameter conditions it repeats exactly), a rule naming a class and action no
    capability grants (the capability step denies such calls before any rule), a rule with an
    empty list in its match, and statements naming actions no declared tool has.
    """
    policy = loaded.policy
    ordered = sorted(enumerate(policy.rules), key=lambda p: (p[1].priority, p[0]))
    out: list[Problem] = []
    live: list[Rule] = []
    for index, rule in ordered:
        why = _never_holds(rule, policy)
        if why is None:
            cover = next((earlier for earlier in live if covers(earlier, rule)), None)
            if cover is not None:
                why = f"rule {rule.id} is shadowed by rule {cover.id}, which matches every " \
                      "call it matches and is tried first"
            else:
                live.append(rule)
        if why is not None:
            out.append(_at(loaded, ("rules", index), why))
    out += _unknown_actions(loaded)
    return out


def covers(earlier: Rule, later: Rule) -> bool:
    """Whether every call (and taint) ``later`` matches is also matched by ``earlier``."""
    a, b = earlier.match, later.match
    for mine, theirs in ((a.tool, b.tool), (a.tool_class, b.tool_class), (a.action, b.action),
                         (a.taint_sources, b.taint_sources)):
        if mine is not None and (theirs is None or not set(theirs) <= set(mine)):
            return False
    return all(name in b.parameters and b.parameters[name] == condition
               for name, condition in a.parameters.items())


def _never_holds(rule: Rule, policy: Policy) -> str | None:
    m = rule.match
    for key, values in (("tool", m.tool), ("tool_class", m.tool_class), ("action", m.action),
                        ("taint_sources", m.taint_sources)):
        if values is not None and not values:
            return f"rule {rule.id} can never match: its {key} list is empty"
    grants = policy.principal.capabilities if policy.principal else ()
    granted = any((m.tool_class is None or g.tool_class in m.tool_class)
                  and (m.action is None or not g.actions or set(g.actions) & set(m.action))
                  for g in grants)
    if not granted:
        what = "/".join(m.tool_class or ["any class"]) + "." + "/".join(m.action or ["any action"])
        return f"rule {rule.id} can never decide: no capability grants {what}"
    return None


#: events the integrations record that are not tool calls (``Kernel.note``)
NOTE_ACTIONS = frozenset({"user_prompt", "system_prompt", "answer", "session_start",
                          "subagent_call", "unmatched_result"})

_ACTION_IS = re.compile(r"(?<![\w.])action\s*(?:=\s*(\"[^\"]*\"|[\w.-]+)|in\s*\{([^}]*)\})")


def _unknown_actions(loaded: LoadedPolicy) -> list[Problem]:
    """Statements comparing ``action`` with a name no declared tool has (if tools are declared)."""
    if not loaded.policy.tools:
        return []
    declared = set(loaded.policy.tools) | NOTE_ACTIONS
    out = []
    for i, statement in enumerate(loaded.policy.behavior):
        span = loaded.raw_span(("behavior", i, "rule"))
        text, line, column = span if span is not None else (statement.rule, None, None)
        for found in _ACTION_IS.finditer(text):
            names = [found.group(1)] if found.group(1) else found.group(2).split(",")
            for name in (n.strip().strip('"') for n in names):
                if name and name not in declared:
                    where = _offset(text, found.start(), line, column)
                    out.append(Problem(f"statement {statement.id} names action {name!r}, which "
                                       "no declared tool has", loaded.source, *where,
                                       f"behavior[{i}].rule"))
    return out


def _offset(text: str, at: int, line: int | None, column: int | None
            ) -> tuple[int | None, int | None]:
    if line is None or column is None:
        return line, column
    before = text[:at]
    newlines = before.count("\n")
    if not newlines:
        return line, column + at
    return line + newlines, at - before.rfind("\n")


def _at(loaded: LoadedPolicy, path: tuple[str | int, ...], message: str) -> Problem:
    place = loaded.locate(path)
    line, column = place if place is not None else (None, None)
    return Problem(message, loaded.source, line, column, f"{path[0]}[{path[1]}]")

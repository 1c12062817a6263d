"""``dead_rules``: shadowed rules, rules that can never decide, statements over unknown actions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._model import ToolCall
from callgate.kernel._rules import RuleSet
from callgate.policy import Rule, parse_policy
from callgate.policy._lint import covers, dead_rules

HEAD = """name: t
version: 1
principal:
  name: a
  capabilities:
    - {tool_class: http, actions: [get]}
"""


def _warnings(text: str) -> list[str]:
    return [str(p) for p in dead_rules(parse_policy(HEAD + text, "p.yaml"))]


def test_a_rule_under_a_broader_earlier_rule_is_reported_shadowed_at_its_place() -> None:
    assert _warnings("""rules:
  - {id: all-http, priority: 1, match: {tool_class: http}, decision: allow}
  - {id: example, match: {tool_class: http, action: get, parameters: {url: {in: [x]}}},
     decision: deny}
""") == ["p.yaml:9:5: rule example is shadowed by rule all-http, which matches every call it "
         "matches and is tried first (rules[1])"]


def test_a_rule_for_a_class_no_capability_grants_can_never_decide() -> None:
    assert _warnings("""rules:
  - {id: shell, match: {tool_class: shell}, decision: deny}
""") == ["p.yaml:8:5: rule shell can never decide: no capability grants shell.any action "
         "(rules[0])"]


def test_a_statement_over_an_action_no_declared_tool_has_is_reported_at_the_name() -> None:
    assert _warnings("""tools:
  fetch: {output: {}}
behavior:
  - id: s
    rule: always(not (action = fetch and once(action = mail)))
""") == ["p.yaml:11:47: statement s names action 'mail', which no declared tool has "
         "(behavior[0].rule)"]


def test_a_policy_without_dead_rules_has_no_warning() -> None:
    assert _warnings("""rules:
  - {id: deny-x, priority: 1, match: {parameters: {url: {pattern: x}}}, decision: deny}
  - {id: allow-get, match: {tool_class: http, action: get}, decision: allow}
tools:
  fetch: {output: {}}
behavior:
  - {id: s, rule: "always(not (action = fetch and once(action = user_prompt)))"}
""") == []


NAMES = st.sampled_from(["a", "b", "c"])
LISTS = st.none() | st.lists(NAMES, min_size=1, max_size=2, unique=True)
PARAMS = st.dictionaries(st.sampled_from(["p", "q"]),
                         st.fixed_dictionaries({"in": st.lists(NAMES, min_size=1, max_size=2)}),
                         max_size=2)
RULES = st.lists(st.builds(
    lambda i, tool, cls, act, taint, params, prio: Rule.model_validate({
        "id": f"r{i}", "priority": prio, "decision": "allow",
        "match": {"tool": tool, "tool_class": cls, "action": act, "taint_sources": taint,
                  "parameters": params}}),
    st.integers(0, 10**6), LISTS, LISTS, LISTS, LISTS, PARAMS, st.integers(0, 3)),
    min_size=1, max_size=5, unique_by=lambda r: r.id)
CALLS = st.builds(lambda t, c, a, p: ToolCall(tool=t, tool_class=c, action=a, parameters=p),
                  NAMES, NAMES, NAMES, st.dictionaries(st.sampled_from(["p", "q"]), NAMES))


@settings(max_examples=300, deadline=None)
@given(RULES, CALLS, st.frozensets(NAMES))
def test_a_rule_reported_shadowed_is_never_the_first_match(rules: list[Rule], call: ToolCall,
                                                          taint: frozenset[str]) -> None:
    ordered = [r for _, r in sorted(enumerate(rules), key=lambda p: (p[1].priority, p[0]))]
    shadowed = {later.id for i, later in enumerate(ordered)
                if any(covers(earlier, later) for earlier in ordered[:i])}
    first = RuleSet(rules).first_match(call, taint)
    assert first is None or first.id not in shadowed

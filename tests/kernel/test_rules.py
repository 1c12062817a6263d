"""Priority rules: parameter patterns run in linear time with Python's meaning, failing closed."""

from __future__ import annotations

from functools import partial

import pytest

from callgate._errors import PolicyError
from callgate._model import Verdict
from callgate.kernel._kernel import Kernel
from callgate.kernel._rules import RuleSet
from callgate.matchers._regex import PatternError, SubjectError
from callgate.policy._loader import parse_policy
from callgate.policy._schema import ParamMatch, Rule, RuleMatch
from callgate.testing import tool_call

#: a call of an MCP tool with one parameter, ``q``
mcp_call = partial(tool_call, "mcp", "invoke", "t")

_BIG = 64 * 1024


def _rules(pattern: str, decision: Verdict = "deny") -> RuleSet:
    match = RuleMatch(parameters={"q": ParamMatch(pattern=pattern)})
    return RuleSet([Rule(id="r", match=match, decision=decision)])


@pytest.mark.parametrize(
    ("pattern", "value", "decides"),
    [
        (r"(?:[\w-]+\.)+[\w-]+@example\.com", "a." * (_BIG // 2), False),
        (r".*.*=.*;", "=" * _BIG, False),
        (r"(a|ab)*c", "ab" * (_BIG // 2) + "c", True),
        (r"\d*\d*\d*x", "1" * _BIG, False),
    ],
)
def test_a_super_linear_pattern_decides_on_a_64k_parameter(
    pattern: str, value: str, decides: bool
) -> None:
    found = _rules(pattern).first_match(mcp_call(q=value), frozenset())
    assert (found is not None) is decides


def test_a_deny_rule_on_word_characters_still_matches_non_ascii_text() -> None:
    rules = _rules(r"^\w+$")
    assert rules.first_match(mcp_call(q="\u043f\u0430\u0440\u043e\u043b\u044c"), frozenset())
    assert rules.first_match(mcp_call(q="a b"), frozenset()) is None


def test_a_case_insensitive_deny_rule_matches_the_long_s_and_the_kelvin_sign() -> None:
    rules = _rules(r"(?i)^ask$")
    assert rules.first_match(mcp_call(q="a\u017f\u212a"), frozenset()) is not None


def test_a_rule_set_built_in_code_refuses_a_pattern_without_a_linear_meaning() -> None:
    # A policy object that never went through the loader is refused too.
    with pytest.raises(PatternError, match="lookbehind"):
        _rules(r"(?<=a)b")


def test_a_lone_surrogate_in_a_matched_parameter_raises_rather_than_answering() -> None:
    with pytest.raises(SubjectError):
        _rules(".*", "allow").first_match(mcp_call(q="ok\udc80"), frozenset())


def test_the_kernel_denies_a_call_whose_matched_parameter_holds_a_lone_surrogate() -> None:
    policy = parse_policy(
        "name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n    - tool_class: mcp\n"
        "rules:\n  - id: any-q\n    match: {parameters: {q: {pattern: '.*'}}}\n"
        "    decision: allow\n"
    )
    kernel = Kernel(policy)
    call = {"tool": "t", "tool_class": "mcp", "action": "invoke"}
    assert kernel.check({**call, "parameters": {"q": "fine"}}).verdict == "allow"
    denied = kernel.check({**call, "parameters": {"q": "fine\ud800"}})
    assert denied.verdict == "deny"
    assert "lone surrogate" in " ".join(r.message for r in denied.reasons)


def test_the_loader_reports_a_refused_pattern_at_its_place() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(
            "name: p\nversion: 1\nrules:\n  - id: r\n"
            "    match: {parameters: {q: {pattern: '(?<!x)y'}}}\n    decision: deny\n",
            "policy.yaml",
        )
    [problem] = caught.value.problems
    assert (problem.line, problem.column) == (5, 39)
    assert problem.field == "rules[0].match.parameters.q.pattern"
    assert problem.message.startswith("refused regex: negative lookahead and lookbehind")

"""The shipped policy sets: they load, say what each statement requires, declare every tool of
their environment, and name nothing an attack of the benchmark uses."""

from __future__ import annotations

import importlib.util
from importlib import resources

import pytest

from callgate import PolicyError
from callgate.policy._lint import lint_policy
from callgate.policy.packs import load_policy_set, policy_set_names

SUITES = {"banking", "slack", "travel", "workspace"}
#: values that appear only in AgentDojo's injection tasks: a pack written from the tools'
#: documentation never needs one
ATTACK_VALUES = ("US133000000121212121212", "mark.black", "Riverside", "secure-systems",
                 "true-informations", "fred9246", "my-website-234", "jay@google",
                 "janeLong", "new_password", "<INFORMATION>")


def test_the_agentdojo_set_has_one_policy_per_suite_and_every_statement_is_described() -> None:
    assert "agentdojo" in policy_set_names()
    policies = load_policy_set("agentdojo")
    assert set(policies) == SUITES
    for suite, loaded in policies.items():
        assert loaded.policy.behavior, suite
        for statement in loaded.policy.behavior:
            assert statement.description and statement.enforce == "block", statement.id
        warnings = lint_policy(loaded.policy)
        assert all("without any constraint" in w or "allows every call" in w
                   for w in warnings), warnings


def test_an_unknown_set_is_refused_naming_the_ones_there_are() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_set("nosuch")
    assert "agentdojo" in str(caught.value)


def test_the_pack_names_nothing_the_benchmarks_attacks_use() -> None:
    folder = resources.files("callgate.policy.packs").joinpath("agentdojo")
    for item in folder.iterdir():
        if item.name.endswith(".yaml"):
            text = item.read_text(encoding="utf-8")
            for value in ATTACK_VALUES:
                assert value.lower() not in text.lower(), (item.name, value)


@pytest.mark.skipif(importlib.util.find_spec("agentdojo") is None,
                    reason="the agentdojo extra is not installed")
def test_every_tool_of_every_suite_declares_what_its_output_is() -> None:
    from agentdojo.task_suite.load_suites import get_suites

    policies = load_policy_set("agentdojo")
    for name, suite in get_suites("v1").items():
        declared = policies[name].policy.declared_outputs()
        missing = sorted(t.name for t in suite.tools if t.name not in declared)
        assert missing == [], (name, missing)

"""Shipped presets: each one loads and validates, and is found by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from callgate import PolicyError
from callgate.matchers._regex import check_pattern
from callgate.policy._schema import RuleMatch
from callgate.policy.presets import load_preset, preset_names

PRESETS = ["coding-agent", "deny-all", "safe-research", "strict", "workspace-assistant"]


def test_preset_names_lists_every_shipped_preset_sorted() -> None:
    assert preset_names() == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_and_validates_under_its_own_name(name: str) -> None:
    loaded = load_preset(name)
    assert loaded.policy.name == name
    assert loaded.source == f"callgate/policy/presets/{name}.yaml"
    assert loaded.locate(("name",)) is not None
    assert loaded.policy.working_dir is None


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_pattern_passes_the_regex_check(name: str) -> None:
    for rule in load_preset(name).policy.rules:
        for condition in rule.match.parameters.values():
            if condition.pattern is not None:
                assert check_pattern(condition.pattern) is None, rule.id


def test_deny_all_grants_nothing() -> None:
    policy = load_preset("deny-all").policy
    assert policy.principal is None and policy.rules == () and policy.tools == {}


def test_strict_quarantines_after_two_denials_and_allows_no_host() -> None:
    policy = load_preset("strict").policy
    assert policy.run_state.quarantine_after_denials == 2
    assert policy.principal is not None
    grants = {c.tool_class: c for c in policy.principal.capabilities}
    assert set(grants) == {"file", "http"}
    assert grants["http"].constraints.allowed_hosts == ()
    assert grants["file"].constraints.allowed_paths == ("./data/**",)
    assert grants["file"].actions == ("read",)


def test_workspace_assistant_grants_the_small_command_list_and_approves_writes() -> None:
    policy = load_preset("workspace-assistant").policy
    assert policy.principal is not None
    grants = {c.tool_class: c for c in policy.principal.capabilities}
    assert grants["shell"].constraints.allowed_commands == ("ls", "cat", "grep", "git")
    writes = [r for r in policy.rules if r.match.action == ("write",)]
    assert [r.decision for r in writes] == ["require-approval"]


def test_safe_research_grants_no_shell_and_no_writes() -> None:
    policy = load_preset("safe-research").policy
    assert policy.principal is not None
    grants = {c.tool_class: c.actions for c in policy.principal.capabilities}
    assert grants == {"http": ("get", "head"), "file": ("read",)}


@pytest.mark.parametrize(
    "path",
    ["/home/u/.ssh/id_ed25519", ".ssh/config", "./.env", "app/.env.local", "x/.aws/credentials",
     "id_rsa", "keys/id_rsa.pub", "home/.netrc"],
)
def test_safe_research_secret_rules_catch_secret_paths(path: str) -> None:
    rules = load_preset("safe-research").policy.rules
    hits = [r.id for r in rules if r.decision == "deny" and _path_rule_matches(r.match, path)]
    assert hits, path


@pytest.mark.parametrize("path", ["./data/report.txt", "notes/environment.md", "src/ssh.py"])
def test_safe_research_secret_rules_leave_ordinary_paths_alone(path: str) -> None:
    rules = load_preset("safe-research").policy.rules
    assert not [r.id for r in rules if _path_rule_matches(r.match, path)]


def _path_rule_matches(match: RuleMatch, path: str) -> bool:
    """Whether the rule's ``path`` pattern finds ``path`` (rules with no pattern do not count)."""
    condition = match.parameters.get("path")
    if condition is None or condition.pattern is None:
        return False
    return re.search(condition.pattern, path) is not None


def test_working_dir_is_set_resolved_when_given(tmp_path: Path) -> None:
    loaded = load_preset("strict", working_dir=tmp_path / "w" / "..")
    assert loaded.policy.working_dir == str(tmp_path.resolve())
    assert loaded.policy.name == "strict"


@pytest.mark.parametrize("name", ["nope", "../_loader", "strict.yaml", ""])
def test_unknown_preset_names_are_refused_listing_the_available_ones(name: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_preset(name)
    (problem,) = info.value.problems
    assert f"available: {', '.join(PRESETS)}" in problem.message

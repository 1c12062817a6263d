"""The widening verifier: every widening rule fires, and its narrowing counterpart passes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate import Capability, Policy, Principal, Rule, ToolPolicy
from callgate.manifest import ManifestError, build_manifest, verify_manifest
from callgate.manifest._verify import match_covers


def tool_manifest(**tools: dict[str, Any]) -> dict[str, Any]:
    return build_manifest(None, {name: ToolPolicy.model_validate(spec)
                                 for name, spec in tools.items()})


def rule_ids(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [f.rule_id for f in verify_manifest(
        tool_manifest(t=old), tool_manifest(t=new))]


# Each case: (baseline tool policy, widened policy, expected rule id, narrowed policy).
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, dict[str, Any]]] = [
    ("risk", {"risk": "medium"}, {"risk": "high"}, "tool.risk.raised", {"risk": "low"}),
    ("write glob replaced by /**",
     {"filesystem": {"write": ["/srv/uploads/**"]}}, {"filesystem": {"write": ["/**"]}},
     "tool.filesystem.write.widened", {"filesystem": {"write": ["/srv/uploads/a/**"]}}),
    ("write glob beside the old one",
     {"filesystem": {"write": ["/srv/uploads/**"]}},
     {"filesystem": {"write": ["/srv/uploads/**", "/srv/other/*.txt"]}},
     "tool.filesystem.write.widened", {"filesystem": {"write": ["/srv/uploads/*.txt"]}}),
    ("write globs from none",
     {"filesystem": {"write": []}}, {"filesystem": {"write": ["./out/**"]}},
     "tool.filesystem.write.widened", {"filesystem": {"write": []}}),
    ("write moved to unspecified",
     {"filesystem": {"write": ["./out/**"]}}, {"filesystem": {"read": []}},
     "tool.filesystem.write.unspecified", {"filesystem": {"write": ["./out/reports/**"]}}),
    ("read glob widened",
     {"filesystem": {"read": ["./data/**"]}}, {"filesystem": {"read": ["./**"]}},
     "tool.filesystem.read.widened", {"filesystem": {"read": ["./data/*.csv"]}}),
    ("read moved to unspecified",
     {"filesystem": {"read": ["./data/**"]}}, {},
     "tool.filesystem.read.unspecified", {"filesystem": {"read": []}}),
    ("network opened", {"network": "deny"}, {"network": "allow"}, "tool.network.widened",
     {"network": "deny"}),
    ("network hosts from deny", {"network": "deny"},
     {"network": {"hosts": ["api.example.org"], "proxy": "http://127.0.0.1:3128"}},
     "tool.network.widened", {"network": "deny"}),
    ("network hosts extended",
     {"network": {"hosts": ["*.example.org"], "proxy": "http://127.0.0.1:3128"}},
     {"network": {"hosts": ["*.example.org", "evil.com"], "proxy": "http://127.0.0.1:3128"}},
     "tool.network.widened",
     {"network": {"hosts": ["api.example.org", "*.eu.example.org"],
                  "proxy": "http://127.0.0.1:3128"}}),
    ("network moved to unspecified", {"network": "allow"}, {}, "tool.network.unspecified",
     {"network": "deny"}),
    ("environment opened", {"environment": "deny"}, {"environment": {"allow": ["HOME"]}},
     "tool.environment.widened", {"environment": "deny"}),
    ("environment extended", {"environment": {"allow": ["HOME"]}},
     {"environment": {"allow": ["HOME", "AWS_SECRET_ACCESS_KEY"]}}, "tool.environment.widened",
     {"environment": {"allow": []}}),
    ("environment moved to unspecified", {"environment": {"allow": ["HOME"]}}, {},
     "tool.environment.unspecified", {"environment": "deny"}),
    ("exec opened from deny", {"exec": "deny"}, {"exec": "allow"}, "tool.exec.widened",
     {"exec": "deny"}),
    ("exec opened from unspecified", {}, {"exec": "allow"}, "tool.exec.widened",
     {"exec": "deny"}),
    ("exec moved to unspecified", {"exec": "allow"}, {}, "tool.exec.unspecified",
     {"exec": "deny"}),
    ("max invocations raised", {"constraints": {"max_invocations": 3}},
     {"constraints": {"max_invocations": 10}}, "tool.constraints.loosened",
     {"constraints": {"max_invocations": 1}}),
    ("max invocations removed", {"constraints": {"max_invocations": 3}}, {},
     "tool.constraints.loosened", {"constraints": {"max_invocations": 0}}),
    ("prerequisite dropped", {"constraints": {"only_after": ["fetch"]}}, {},
     "tool.constraints.loosened", {"constraints": {"only_after": ["fetch", "review"]}}),
    ("no longer forbidden", {"constraints": {"forbidden": True}}, {},
     "tool.constraints.loosened", {"constraints": {"forbidden": True}}),
    ("limit raised", {"limits": {"cpu_seconds": 10}}, {"limits": {"cpu_seconds": 60}},
     "tool.limits.loosened", {"limits": {"cpu_seconds": 5}}),
    ("limit removed", {"limits": {"memory_mb": 256}}, {}, "tool.limits.loosened",
     {"limits": {"memory_mb": 128, "processes": 4}}),
    ("scratch enabled", {}, {"scratch": True}, "tool.scratch.enabled", {}),
    ("path parameter dropped", {"path_params": ["dest"]}, {}, "tool.path_params.removed",
     {"path_params": ["dest", "src"]}),
    ("path parameter demoted from write to read",
     {"filesystem": {"write": ["./out/**"]}, "path_params": {"dest": "write"}},
     {"filesystem": {"write": ["./out/**"]}, "path_params": {"dest": "read"}},
     "tool.path_params.loosened",
     {"filesystem": {"write": ["./out/**"]}, "path_params": {"dest": "write", "src": "read"}}),
    ("root now followed through a symlink",
     {"filesystem": {"read": ["./data/**"]}},
     {"filesystem": {"read": ["./data/**"], "follow_symlinks": ["./data/**"]}},
     "tool.filesystem.follow_added", {"filesystem": {"read": ["./data/*.csv"]}}),
    ("tool class changed", {"tool_class": "file"}, {"tool_class": "shell"},
     "tool.class.changed", {"tool_class": "file"}),
]


@pytest.mark.parametrize(("old", "wide", "rule", "narrow"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_widening_is_reported_and_its_narrowing_passes(
        old: dict[str, Any], wide: dict[str, Any], rule: str, narrow: dict[str, Any]) -> None:
    assert rule in rule_ids(old, wide)
    assert rule_ids(old, narrow) == []


def test_unchanged_manifest_has_no_findings(example_manifest: dict[str, Any]) -> None:
    assert verify_manifest(example_manifest, example_manifest) == []


def test_new_tool_of_any_risk_is_a_finding_with_its_risk_as_severity() -> None:
    for risk in ("low", "medium", "high", "critical"):
        findings = verify_manifest(tool_manifest(), tool_manifest(extra={"risk": risk}))
        assert [(f.severity, f.rule_id, f.tool) for f in findings] == [
            (risk, "tool.added", "extra")]
        assert str(findings[0]) == f"[{risk}] tool.added extra: new tool (risk {risk})"


def test_removing_a_tool_is_narrowing() -> None:
    assert verify_manifest(tool_manifest(a={}, b={"exec": "allow"}), tool_manifest(a={})) == []


def test_write_glob_widening_also_widens_reads_when_reads_are_enforced() -> None:
    ids = rule_ids({"filesystem": {"read": [], "write": ["./out/**"]}},
                   {"filesystem": {"read": [], "write": ["./**"]}})
    assert ids == ["tool.filesystem.write.widened", "tool.filesystem.read.widened"]


def test_moving_a_write_glob_into_reads_is_not_a_read_widening() -> None:
    # Write globs already admitted reads, so reading the same area is no wider.
    assert rule_ids({"filesystem": {"read": [], "write": ["./out/**"]}},
                    {"filesystem": {"read": ["./out/**"], "write": []}}) == []


def test_changed_working_dir_makes_relative_globs_unproven() -> None:
    old = {"working_dir": "/srv/a", "filesystem": {"write": ["./out/**"]}}
    new = {"working_dir": "/srv/b", "filesystem": {"write": ["./out/**"]}}
    assert rule_ids(old, new) == ["tool.filesystem.write.widened"]


def test_proxy_change_is_reported() -> None:
    old = {"network": {"hosts": ["a.example.org"], "proxy": "http://127.0.0.1:3128"}}
    new = {"network": {"hosts": ["a.example.org"], "proxy": "http://10.0.0.9:3128"}}
    assert rule_ids(old, new) == ["tool.network.proxy_changed"]


def test_findings_print_one_line_each_in_the_documented_form() -> None:
    findings = verify_manifest(tool_manifest(t={"risk": "high", "exec": "deny"}),
                               tool_manifest(t={"risk": "high", "exec": "allow"}))
    assert [str(f) for f in findings] == ["[high] tool.exec.widened t: exec opened from deny "
                                          "to allow"]


# ------------------------------------------------------------------ principal and rules


def policy_manifest(capabilities: list[dict[str, Any]] | None = None,
                    rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    policy = Policy(
        name="p", version=1,
        principal=None if capabilities is None else Principal(
            name="agent", capabilities=tuple(Capability.model_validate(c)
                                             for c in capabilities)),
        rules=tuple(Rule.model_validate(r) for r in rules or []))
    return build_manifest(policy, {})


def policy_ids(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [f.rule_id for f in verify_manifest(old, new)]


HTTP = {"tool_class": "http", "actions": ["get"],
        "constraints": {"allowed_hosts": ["*.example.org"], "max_calls_per_minute": 30}}
FILES = {"tool_class": "file", "actions": ["read"],
         "constraints": {"allowed_paths": ["/srv/data/**"]}}

CAPABILITY_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("new tool class", {"tool_class": "shell"}, {"tool_class": "http", "actions": ["get"],
                                                 "constraints": {"allowed_hosts": [],
                                                                 "max_calls_per_minute": 1}}),
    ("more actions", {**HTTP, "actions": ["get", "post"]}, {**HTTP, "actions": ["get"]}),
    ("every action", {**HTTP, "actions": []}, HTTP),
    ("host outside", {**HTTP, "constraints": {"allowed_hosts": ["evil.com"]}},
     {**HTTP, "constraints": {"allowed_hosts": ["api.example.org"],
                              "max_calls_per_minute": 30}}),
    ("host limit removed", {**HTTP, "constraints": {"max_calls_per_minute": 30}},
     {**HTTP, "constraints": {"allowed_hosts": ["*.eu.example.org"],
                              "max_calls_per_minute": 30}}),
    ("rate raised", {**HTTP, "constraints": {"allowed_hosts": ["*.example.org"],
                                             "max_calls_per_minute": 300}},
     {**HTTP, "constraints": {"allowed_hosts": ["*.example.org"], "max_calls_per_minute": 3}}),
    ("path outside", {**FILES, "constraints": {"allowed_paths": ["/**"]}},
     {**FILES, "constraints": {"allowed_paths": ["/srv/data/2024/*.csv"]}}),
    ("root followed through a symlink",
     {**FILES, "constraints": {"allowed_paths": ["/srv/data/**"],
                               "follow_symlinks": ["/srv/data/**"]}},
     {**FILES, "constraints": {"allowed_paths": ["/srv/data/2024/*.csv"]}}),
]


@pytest.mark.parametrize(("wide", "narrow"), [c[1:] for c in CAPABILITY_CASES],
                         ids=[c[0] for c in CAPABILITY_CASES])
def test_capability_that_allows_more_is_reported_and_a_narrower_one_passes(
        wide: dict[str, Any], narrow: dict[str, Any]) -> None:
    base = policy_manifest([HTTP, FILES])
    found = verify_manifest(base, policy_manifest([HTTP, FILES, wide]))
    assert [(f.rule_id, f.tool) for f in found] == [("principal.capability.widened",
                                                      "principal")]
    assert verify_manifest(base, policy_manifest([narrow, FILES])) == []


def test_principal_added_where_there_was_none_widens_every_grant() -> None:
    assert policy_ids(policy_manifest(None), policy_manifest([HTTP])) == [
        "principal.capability.widened"]
    assert policy_ids(policy_manifest([HTTP]), policy_manifest(None)) == []


ALLOW_GET = {"id": "allow-get", "priority": 100, "match": {"action": ["get"]},
             "decision": "allow"}
DENY_TAINT = {"id": "deny-taint", "priority": 10, "decision": "deny",
              "match": {"taint_sources": ["web", "email"]}}
APPROVE = {"id": "approve-writes", "priority": 50, "decision": "require-approval",
           "match": {"tool_class": ["file"], "action": ["write"]}}
BASE_RULES = [DENY_TAINT, APPROVE, ALLOW_GET]

RULE_CASES: list[tuple[str, list[dict[str, Any]], str, list[dict[str, Any]]]] = [
    ("allow rule added",
     [*BASE_RULES, {"id": "allow-all", "decision": "allow"}], "rule.added",
     [*BASE_RULES, {"id": "deny-post", "priority": 5, "decision": "deny",
                    "match": {"action": "post"}}]),
    ("approval rule added",
     [*BASE_RULES, {"id": "ask-shell", "decision": "require-approval",
                    "match": {"tool_class": "shell"}}], "rule.added", BASE_RULES),
    ("deny rule removed", [APPROVE, ALLOW_GET], "rule.removed", [DENY_TAINT, APPROVE]),
    ("decision loosened",
     [{**DENY_TAINT, "decision": "require-approval"}, APPROVE, ALLOW_GET],
     "rule.decision.loosened",
     [DENY_TAINT, {**APPROVE, "decision": "deny"}, {**ALLOW_GET, "decision": "deny"}]),
    ("allow rule matches more",
     [DENY_TAINT, APPROVE, {**ALLOW_GET, "match": {"action": ["get", "post"]}}],
     "rule.match.widened",
     [DENY_TAINT, APPROVE, {**ALLOW_GET, "match": {"action": ["get"], "tool": ["fetch"]}}]),
    ("deny rule matches less",
     [{**DENY_TAINT, "match": {"taint_sources": ["web"]}}, APPROVE, ALLOW_GET],
     "rule.match.narrowed",
     [{**DENY_TAINT, "match": {}}, APPROVE, ALLOW_GET]),
    ("approval rule matches other calls",
     [DENY_TAINT, {**APPROVE, "match": {"tool_class": ["file"]}}, ALLOW_GET],
     "rule.match.changed", [DENY_TAINT, APPROVE, ALLOW_GET]),
    ("allow rule moved before a deny rule",
     [DENY_TAINT, APPROVE, {**ALLOW_GET, "priority": 1}], "rule.reordered",
     [{**DENY_TAINT, "priority": 0}, APPROVE, ALLOW_GET]),
]


@pytest.mark.parametrize(("wide", "rule", "narrow"), [c[1:] for c in RULE_CASES],
                         ids=[c[0] for c in RULE_CASES])
def test_rule_that_allows_more_is_reported_and_its_narrowing_passes(
        wide: list[dict[str, Any]], rule: str, narrow: list[dict[str, Any]]) -> None:
    base = policy_manifest(rules=BASE_RULES)
    assert rule in policy_ids(base, policy_manifest(rules=wide))
    assert policy_ids(base, policy_manifest(rules=narrow)) == []


def test_allow_rule_that_loses_a_parameter_condition_widens() -> None:
    guarded = {**ALLOW_GET, "match": {"action": ["get"], "parameters": {
        "url": {"pattern": "^https://", "not_in": ["https://x"]}}}}
    base = policy_manifest(rules=[guarded])
    assert policy_ids(base, policy_manifest(rules=[ALLOW_GET])) == ["rule.match.widened"]
    stricter = {**ALLOW_GET, "match": {"action": ["get"], "parameters": {
        "url": {"pattern": "^https://", "not_in": ["https://x", "https://y"]},
        "method": {"in": ["GET"]}}}}
    assert policy_ids(base, policy_manifest(rules=[stricter])) == []
    other_pattern = {**ALLOW_GET, "match": {"action": ["get"], "parameters": {
        "url": {"pattern": "^https?://", "not_in": ["https://x"]}}}}
    assert policy_ids(base, policy_manifest(rules=[other_pattern])) == ["rule.match.widened"]


def test_parameter_condition_coverage_follows_the_sets() -> None:
    outer = {"parameters": {"db": {"in": ["a", "b"], "not_in": None, "pattern": None}}}
    inner = {"parameters": {"db": {"in": ["a"], "not_in": None, "pattern": None}}}
    assert match_covers(outer, inner)
    assert not match_covers(inner, outer)
    assert not match_covers(outer, {})


def test_malformed_manifest_is_an_error_not_a_pass() -> None:
    good = tool_manifest(t={})
    broken = {**good, "tools": {"t": {"risk": "medium"}}}
    with pytest.raises(ManifestError, match="unexpected shape"):
        verify_manifest(good, broken)


GLOBS = st.lists(st.sampled_from(["/srv/a/**", "/srv/*.txt", "./out/**", "~/x/*", "/**"]),
                 max_size=3)
TOOL_SPECS = st.fixed_dictionaries({}, optional={
    "risk": st.sampled_from(["low", "medium", "high", "critical"]),
    "filesystem": st.fixed_dictionaries({}, optional={"read": GLOBS, "write": GLOBS}),
    "network": st.sampled_from(["deny", "allow"]),
    "environment": st.one_of(st.just("deny"), st.fixed_dictionaries(
        {"allow": st.lists(st.sampled_from(["HOME", "PATH"]), max_size=2)})),
    "exec": st.sampled_from(["deny", "allow"]),
    "constraints": st.fixed_dictionaries({}, optional={
        "max_invocations": st.integers(0, 5), "forbidden": st.booleans(),
        "only_after": st.lists(st.sampled_from(["a", "b"]), max_size=2)}),
    "limits": st.fixed_dictionaries({}, optional={"cpu_seconds": st.integers(1, 9)}),
})


@given(specs=st.dictionaries(st.sampled_from(["a", "b", "c"]), TOOL_SPECS, max_size=3))
def test_a_manifest_never_widens_itself(specs: dict[str, dict[str, Any]]) -> None:
    manifest = tool_manifest(**specs)
    assert verify_manifest(manifest, manifest) == []


@given(old=TOOL_SPECS, new=TOOL_SPECS)
def test_an_unreported_change_back_and_forth_means_nothing_changed_that_matters(
        old: dict[str, Any], new: dict[str, Any]) -> None:
    # If neither direction widens, the two declarations admit the same: only order, duplicates
    # or equivalent spellings differ, so the manifests' stances agree exactly.
    forward, backward = rule_ids(old, new), rule_ids(new, old)
    if not forward and not backward:
        a, b = tool_manifest(t=old)["tools"]["t"], tool_manifest(t=new)["tools"]["t"]
        for key in ("risk", "network", "exec", "constraints", "limits"):
            assert a[key] == b[key]


def behavior_manifest(statements: list[dict[str, str]], **run_state: Any) -> dict[str, Any]:
    policy = Policy.model_validate({"name": "p", "version": 1, "behavior": statements,
                                    "run_state": run_state})
    return build_manifest(policy, {})


NO_SEND = {"id": "no-send", "rule": "abs(send_email)", "enforce": "block"}


@pytest.mark.parametrize(("wide", "rule", "narrow"), [
    ([], "behavior.removed", [NO_SEND, {"id": "more", "rule": "abs(delete)"}]),
    ([{**NO_SEND, "rule": "abs(send_sms)"}], "behavior.changed", [NO_SEND]),
    ([{**NO_SEND, "enforce": "alert"}], "behavior.loosened", [NO_SEND]),
], ids=["removed", "rewritten", "alert-only"])
def test_behavior_statement_weakened_is_reported(wide: list[dict[str, str]], rule: str,
                                                  narrow: list[dict[str, str]]) -> None:
    base = behavior_manifest([NO_SEND])
    assert policy_ids(base, behavior_manifest(wide)) == [rule]
    assert policy_ids(base, behavior_manifest(narrow)) == []
    assert policy_ids(behavior_manifest([{**NO_SEND, "enforce": "alert"}]), base) == []


def test_run_state_loosened_is_reported_and_tightened_passes() -> None:
    base = behavior_manifest([], quarantine_after_denials=5)
    loose = behavior_manifest([], quarantine_after_denials=9, behavioral_rules=False)
    assert [str(f) for f in verify_manifest(base, loose)] == [
        "[high] run_state.loosened run_state: quarantine_after_denials raised from 5 to 9",
        "[high] run_state.loosened run_state: behavioral_rules turned off",
    ]
    tight = behavior_manifest([], quarantine_after_denials=2)
    assert verify_manifest(base, tight) == []

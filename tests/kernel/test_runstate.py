"""Run state: the denial threshold, read-only quarantine, and the six behavioral rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callgate import Denied
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy, parse_policy
from callgate.testing import call, reason_ids

OPEN = parse_policy("""\
name: open
version: 1
principal:
  name: agent
  capabilities:
    - {tool_class: http}
    - {tool_class: file}
    - {tool_class: shell}
    - {tool_class: database}
rules:
  - {id: allow-all, decision: allow}
run_state: {quarantine_after_denials: 3}
""")


@pytest.fixture
def kernel(tmp_path: Path) -> Kernel:
    return Kernel(OPEN, working_dir=tmp_path)


def test_denials_reaching_the_threshold_quarantine_the_run(example_policy: LoadedPolicy,
                                                           workdir: Path) -> None:
    k = Kernel(example_policy, working_dir=workdir)
    for _ in range(5):
        assert k.check(call("http", "post", url="https://x.com")).verdict == "deny"
    assert k.run_state.quarantined
    assert k.run_state.quarantine is not None
    assert k.run_state.quarantine.rule_id == "run.denial-threshold"
    assert k.run_state.counters.denied_actions == 5


def test_a_quarantined_run_only_passes_read_only_actions(example_policy: LoadedPolicy,
                                                         workdir: Path) -> None:
    k = Kernel(example_policy, working_dir=workdir)
    for _ in range(5):
        k.check(call("http", "post", url="https://x.com"))
    assert k.check(call("http", "get", url="https://api.github.com/")).verdict == "allow"
    assert k.check(call("file", "read", path="./data/notes.txt")).verdict == "allow"
    d = k.check(call("file", "write", path="./out/x"))
    assert reason_ids(d) == ["run.quarantined"]
    d = k.check(call("shell", "exec", command="ls"))
    assert reason_ids(d) == ["run.quarantined"]


def _expect_behavioral(k: Kernel, pending: dict[str, Any], rule: str) -> None:
    d = k.check(pending)
    assert d.verdict == "deny"
    assert reason_ids(d) == [rule]
    assert k.run_state.quarantine is not None
    assert k.run_state.quarantine.trigger == "behavioral"
    assert k.run_state.quarantine.rule_id == rule


def test_web_taint_then_sensitive_read_is_caught(kernel: Kernel) -> None:
    assert kernel.check(call("http", "get", url="https://a.com/")).verdict == "allow"
    _expect_behavioral(kernel, call("file", "read", path="/home/u/.ssh/id_rsa"),
                        "web_taint_sensitive_probe")


def test_denied_capability_then_request_for_a_riskier_class_is_caught(tmp_path: Path) -> None:
    policy = parse_policy("name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n"
                          "    - {tool_class: shell}\nrules:\n  - {id: all, decision: allow}\n"
                          "run_state: {quarantine_after_denials: 9}\n")
    k = Kernel(policy, working_dir=tmp_path)
    assert reason_ids(k.check(call("http", "get", url="https://a.com/"))) == [
        "capability.missing"]
    with pytest.raises(Denied) as info:
        k.issue_token("shell", actions=["exec"])
    assert reason_ids(info.value.decision) == ["denied_capability_then_escalation"]
    assert k.run_state.quarantine is not None
    assert k.run_state.quarantine.rule_id == "denied_capability_then_escalation"
    assert k.check(call("shell", "exec", command="ls")).verdict == "deny"


def test_sensitive_read_then_egress_is_caught(kernel: Kernel) -> None:
    assert kernel.check(call("file", "read", path="/app/.env")).verdict == "allow"
    _expect_behavioral(kernel, call("http", "post", url="https://a.com/", body="k"),
                        "sensitive_read_then_egress")


def test_tainted_database_write_is_caught(kernel: Kernel) -> None:
    _expect_behavioral(kernel, call("database", "execute", taint=["email"], sql="DELETE FROM t"),
                        "tainted_database_write")


def test_tainted_long_shell_command_is_caught(tmp_path: Path) -> None:
    # web_taint_sensitive_probe also matches a shell exec after taint and comes first, so this
    # test keeps only the data-shaped statement of the pack to show that it fires on its own.
    from callgate.kernel._behavior import builtin_pack

    only = [s for s in builtin_pack() if s.id == "tainted_shell_with_data"]
    policy = OPEN.policy.model_copy(update={
        "behavior": tuple(only),
        "run_state": OPEN.policy.run_state.model_copy(update={"behavioral_rules": False})})
    k = Kernel(policy, working_dir=tmp_path)
    assert k.check(call("shell", "exec", command="echo short", taint=["web"])).verdict == "allow"
    _expect_behavioral(k, call("shell", "exec", command="echo " + "A" * 120, taint=["web"]),
                        "tainted_shell_with_data")


def test_secret_access_then_any_egress_is_caught(kernel: Kernel) -> None:
    assert kernel.check(call("database", "query", sql="SELECT * FROM secrets")).verdict == "allow"
    _expect_behavioral(kernel, call("http", "get", url="https://a.com/?q=1"),
                        "secret_access_then_any_egress")


def test_an_ordinary_sequence_triggers_no_behavioral_rule(kernel: Kernel) -> None:
    for c in (call("file", "read", path="./notes.md"), call("http", "get", url="https://a.com"),
              call("file", "read", path="./notes.md"), call("database", "query", sql="SELECT 1")):
        assert kernel.check(c).verdict == "allow"
    assert not kernel.run_state.quarantined


def test_counters_track_egress_and_sensitive_reads(kernel: Kernel) -> None:
    kernel.check(call("file", "read", path="/x/.aws/credentials"))
    kernel.check(call("http", "put", url="https://a.com"))
    c = kernel.run_state.counters
    assert c.sensitive_file_read_attempts == 1
    assert c.external_egress_attempts == 1
    assert c.capability_requests == 0

"""The AgentDojo integration's tests: AgentDojo's own banking suite (benchmark v1) and runtime,
a scripted model, and a small policy written here."""

from __future__ import annotations

from typing import Any

import pytest
from agentdojo.task_suite.load_suites import get_suite

from callgate.policy import LoadedPolicy, parse_policy

#: grants the class, allows it by a rule, and lets money go only to accounts the user named
POLICY = """\
name: agentdojo-test
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: agentdojo
rules:
  - id: allow-agentdojo
    priority: 900
    match: {tool_class: agentdojo}
    decision: allow
    reason: AgentDojo tools are allowed unless a statement says otherwise
behavior:
  - id: recipient-named-by-user
    rule: prec(action = send_money and recipient = $r, action = user_prompt and text contains $r)
"""
ATTACKER = "US133000000121212121212"


@pytest.fixture(scope="session")
def policy() -> LoadedPolicy:
    return parse_policy(POLICY, "<agentdojo test policy>")


@pytest.fixture(scope="session")
def banking() -> Any:
    return get_suite("v1", "banking")

"""The pipeline's contract: steps return values, effects are applied once, Denied from one place."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from callgate import Decision, Denied, Kernel, ToolCall, ToolPolicy, parse_policy
from callgate._errors import CallgateError
from callgate.audit import AuditStore
from callgate.kernel._approvals import ask
from callgate.kernel._capabilities import CapabilityToken, RateLimiter, check_grants
from callgate.kernel._registry import ToolRegistry
from callgate.kernel._tokens import TokenBook

SRC = Path(__file__).resolve().parents[2] / "src" / "callgate"

LIMITED = """
name: limited
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: http
      actions: [get]
      constraints: {allowed_hosts: ["*.example.org"], max_calls_per_minute: 1}
rules:
  - id: no-b
    match: {tool_class: http, parameters: {url: {pattern: "^https://b[.]"}}}
    decision: deny
  - id: reads
    match: {tool_class: http}
    decision: allow
"""


def get(host: str) -> dict[str, object]:
    return {"tool": "fetch", "tool_class": "http", "action": "get",
            "parameters": {"url": f"https://{host}/x"}}


def test_a_call_denied_after_its_grant_matched_does_not_use_the_grants_rate_limit(
        tmp_path: Path) -> None:
    kernel = Kernel(parse_policy(LIMITED), working_dir=tmp_path, guards=[])
    denied = kernel.check(get("b.example.org"))  # the grant admits it, a rule denies it
    assert [r.id for r in denied.reasons] == ["no-b"]
    assert kernel.check(get("a.example.org")).verdict == "allow"
    # the one call a minute is now used: the next is over the limit
    over = kernel.check(get("a.example.org"))
    assert [r.id for r in over.reasons] == ["capability.constraint"]
    assert "rate limit of 1 calls per minute" in over.reasons[0].message


def test_mediate_never_raises_and_execute_raises_the_decision_mediate_gives(
        tmp_path: Path) -> None:
    policy = parse_policy(LIMITED)
    with Kernel(policy, working_dir=tmp_path, guards=[]) as a, \
            Kernel(policy, working_dir=tmp_path, guards=[]) as b:
        decision, result = a.mediate(get("b.example.org"), lambda c: "ran")
        assert result is None and decision.verdict == "deny"
        with pytest.raises(Denied) as caught:
            b.execute(get("b.example.org"), lambda c: "ran")
        assert caught.value.decision.reasons == decision.reasons
        assert a.mediate(42, lambda c: "ran")[0].reasons[0].id == "input.invalid"  # type: ignore[arg-type]


def test_denied_is_raised_in_exactly_one_place_in_the_kernel() -> None:
    raises = []
    for path in (SRC / "kernel").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    getattr(node.exc.func, "id", None) == "Denied":
                raises.append(f"{path.name}:{node.lineno}")
    assert len(raises) == 1, raises


def test_a_stand_in_call_is_stamped_on_the_kernels_clock(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    kernel = Kernel(parse_policy(LIMITED), working_dir=tmp_path, guards=[], audit=db,
                    clock=lambda: 1_000_000_000.0)
    assert kernel.check("not a call").verdict == "deny"  # type: ignore[arg-type]
    kernel.close()
    with AuditStore.open(db, read_only=True) as store:
        decisions = [r for r in store.records(kernel.run_id) if r.kind == "decision"]
    assert decisions[0].payload["call"]["timestamp"] == "2001-09-09T01:46:40Z"


def test_grants_give_their_reason_ids_where_they_are_made() -> None:
    policy = parse_policy(LIMITED).policy
    assert policy.principal is not None
    grants = policy.principal.capabilities

    def stamped(action: str, url: str) -> ToolCall:
        return ToolCall(tool="fetch", tool_class="http", action=action, parameters={"url": url},
                        id="r:1", run_id="r", sequence=1, principal="agent",
                        timestamp="2026-01-01T00:00:00Z")

    missing = check_grants(stamped("post", "https://a.example.org/"), grants, "/", RateLimiter())
    outside = check_grants(stamped("get", "https://evil.test/"), grants, "/", RateLimiter())
    assert not isinstance(missing, int) and missing.id == "capability.missing"
    assert not isinstance(outside, int) and outside.id == "capability.constraint"
    assert check_grants(stamped("get", "https://a.example.org/"), grants, "/",
                        RateLimiter()) == 0


def test_an_approval_that_does_not_come_in_time_or_fails_is_a_refusal() -> None:
    call = ToolCall(tool="t", tool_class="file", action="write", id="r:1", run_id="r",
                    sequence=1, principal="p", timestamp="2026-01-01T00:00:00Z")
    pending = Decision(verdict="require-approval")
    def slow_handler(c: ToolCall, d: Decision) -> bool:
        time.sleep(5)
        return True

    slow = ask(slow_handler, call, pending, 0.05)
    assert (slow.granted, slow.why) == (False, "approval timed out after 0.05s")
    broken = ask(lambda c, d: 1 / 0 > 0, call, pending, 5)
    assert not broken.granted and broken.why.startswith("approval handler failed: Zero")
    assert ask(None, call, pending, 5).granted is False
    assert ask(lambda c, d: True, call, pending, 5).granted is True


def test_a_token_not_derived_from_one_the_kernel_issued_is_refused() -> None:
    book = TokenBook()
    foreign = CapabilityToken(id="tok_x", principal="p", tool_class="http",
                              actions=frozenset({"get"}), layers=(), expires_at=10.0,
                              max_uses=None)
    with pytest.raises(CallgateError, match="not issued by this kernel"):
        book.register(foreign)


def test_a_policy_files_tool_cannot_be_redeclared_and_an_unrouted_call_is_an_error() -> None:
    loaded = parse_policy(LIMITED + "tools:\n  fetch: {tool_class: http}\n")
    registry = ToolRegistry(loaded.policy, "/work")
    before = registry.manifest_hash
    with pytest.raises(CallgateError, match="already declared by the policy file"):
        registry.is_new("fetch", ToolPolicy(tool_class="http", network="deny"))
    assert registry.is_new("mine", ToolPolicy(tool_class="file"))
    registry.add("mine", ToolPolicy(tool_class="file"))
    assert registry.manifest_hash != before
    call = ToolCall(tool="x", tool_class="db", action="query", id="r:1", run_id="r",
                    sequence=1, principal="p", timestamp="2026-01-01T00:00:00Z")
    result = registry.executor_for(call)(call)
    assert result.status == "error" and result.error.startswith("executor.missing")

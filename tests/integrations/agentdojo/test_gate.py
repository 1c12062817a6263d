"""KernelGate inside AgentDojo's own pipeline: every call decided first, denied ones never run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime

from callgate import Kernel, Reason, ToolCall, ToolResult
from callgate.integrations.agentdojo import KernelGate, ScriptedModel, defended_pipeline
from callgate.integrations.agentdojo import _gate as gate_module
from callgate.policy import LoadedPolicy
from callgate.testing import AuditedKernel, reason_ids

from .conftest import ATTACKER, POLICY


def _run(suite: Any, gate: KernelGate, calls: Callable[[Any], list[Any]] | list[Any],
         prompt: str, answer: str = "") -> tuple[Any, Any, list[Any]]:
    """Run a scripted model through the defended pipeline; (pre env, post env, messages)."""
    env = suite.load_and_inject_default_environment({})
    pre = env.model_copy(deep=True)
    pipeline = defended_pipeline(ScriptedModel(calls, answer), gate, max_iters=50)
    _, _, post, messages, _ = pipeline.query(prompt, FunctionsRuntime(suite.tools), env)
    return pre, post, list(messages)


def _errors(messages: list[Any]) -> list[str | None]:
    return [m["error"] for m in messages if m["role"] == "tool"]


def _with(suite: Any, user: str, injection: str) -> Callable[[Any], list[Any]]:
    return lambda env: [*suite.user_tasks[user].ground_truth(env),
                        *suite.injection_tasks[injection].ground_truth(env)]


def test_a_benign_user_task_keeps_its_utility_and_every_call_is_allowed(
        banking: Any, policy: LoadedPolicy) -> None:
    for task_id in ("user_task_1", "user_task_3"):
        task = banking.user_tasks[task_id]
        gate = KernelGate(lambda: Kernel(policy, audit=None))
        model = ScriptedModel(task.ground_truth, task.GROUND_TRUTH_OUTPUT)
        utility, _ = banking.run_task_with_pipeline(defended_pipeline(model, gate), task, None,
                                                    {})
        assert utility, task_id
        assert gate.calls and all(c.decision.allowed and c.ran for c in gate.calls)
        assert [c.function for c in gate.calls] == [c.function for c in model.calls]
        assert gate.kernel is None and gate.violations == []  # the run was ended


def test_an_injected_transfer_is_denied_before_it_runs_and_the_model_reads_why(
        banking: Any, policy: LoadedPolicy) -> None:
    gate = KernelGate(lambda: Kernel(policy, audit=None))
    task = banking.injection_tasks["injection_task_0"]
    pre, post, messages = _run(banking, gate, _with(banking, "user_task_1", "injection_task_0"),
                               banking.user_tasks["user_task_1"].PROMPT)
    denied = gate.calls[-1]
    assert denied.function == "send_money" and denied.arguments["recipient"] == ATTACKER
    assert reason_ids(denied.decision) == ["recipient-named-by-user"] and not denied.ran
    assert post == pre  # the transfer never reached the bank account
    assert task.security("", pre, post) is False
    error = _errors(messages)[-1]
    assert error is not None
    assert "callgate denied the call to send_money; it was not run." in error
    assert "[recipient-named-by-user]" in error
    assert "witness: statement recipient-named-by-user; events #4 send_money" in error


def test_a_call_that_requires_approval_is_refused_as_nobody_can_approve_it(
        banking: Any) -> None:
    approval = POLICY.replace("rules:\n", """rules:
  - id: approve-password
    priority: 10
    match: {tool: update_password}
    decision: require-approval
    reason: a new password needs the user
""")
    with AuditedKernel(approval) as audited:
        gate = KernelGate(lambda: audited.kernel)
        pre, post, messages = _run(banking, gate,
                                   _with(banking, "user_task_1", "injection_task_7"), "q")
        results = audited.records("result")
    assert gate.calls[-1].decision.verdict == "require-approval" and not gate.calls[-1].ran
    assert post == pre
    assert results[-1].payload["result"]["status"] == "denied"
    assert results[-1].payload["result"]["error"].startswith("approval.denied")
    assert "callgate requires approval for the call to update_password" in str(
        _errors(messages)[-1])


def test_an_error_inside_the_gate_denies_the_call_and_nothing_runs(
        banking: Any, policy: LoadedPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(call: Any) -> dict[str, Any]:
        raise RuntimeError("translation failed")

    monkeypatch.setattr(gate_module, "call_of", broken)
    with AuditedKernel(policy) as audited:
        gate = KernelGate(lambda: audited.kernel)
        task = banking.user_tasks["user_task_3"]
        pre, post, messages = _run(banking, gate, task.ground_truth, task.PROMPT)
        decisions = audited.records("decision")
    assert post == pre
    assert [reason_ids(c.decision) for c in gate.calls] == [["internal.error"]] * 2
    assert not any(c.ran for c in gate.calls)
    assert all("translation failed" in str(e) for e in _errors(messages))
    assert [d.payload["decision"]["verdict"] for d in decisions] == ["deny", "deny"]


def test_a_kernel_that_cannot_be_built_refuses_every_call_of_the_run(banking: Any) -> None:
    def no_kernel() -> Kernel:
        raise OSError("audit store unavailable")

    gate = KernelGate(no_kernel)
    task = banking.user_tasks["user_task_3"]
    pre, post, messages = _run(banking, gate, task.ground_truth, task.PROMPT)
    assert post == pre and not any(c.ran for c in gate.calls) and len(gate.calls) == 2
    assert all("could not start this run: OSError: audit store unavailable" in str(e)
               for e in _errors(messages))


def test_a_tool_call_given_as_an_argument_is_refused_and_neither_call_runs(
        banking: Any, policy: LoadedPolicy) -> None:
    nested = FunctionCall(function="send_money", args={
        "recipient": FunctionCall(function="get_iban", args={}), "amount": 1.0,
        "subject": "x", "date": "2022-01-01"})
    gate = KernelGate(lambda: Kernel(policy, audit=None))
    pre, post, messages = _run(banking, gate, [nested], "q")
    assert reason_ids(gate.calls[0].decision) == ["agentdojo.nested-call"]
    assert gate.calls[0].arguments["recipient"] == {"function": "get_iban", "args": {},
                                                     "id": None, "placeholder_args": None}
    assert post == pre and "[agentdojo.nested-call]" in str(_errors(messages)[0])


def test_outputs_are_reported_so_statements_see_values_copied_from_them(banking: Any) -> None:
    # the bill's IBAN is only in the file: the transfer copies it from the reported output, and
    # the witness names the read that output came from
    copied = POLICY.replace(
        "prec(action = send_money and recipient = $r, action = user_prompt and text contains $r)",
        'abs(action = send_money and flow_from ~ "*")')
    with AuditedKernel(copied) as audited:
        gate = KernelGate(lambda: audited.kernel)
        task = banking.user_tasks["user_task_0"]
        _, _, messages = _run(banking, gate, task.ground_truth, task.PROMPT)
        results = audited.records("result")
    assert "IBAN: UK12345678901234567890" in results[0].payload["result"]["output"]
    assert [c.decision.verdict for c in gate.calls] == ["allow", "deny"]
    assert gate.calls[1].decision.witness is not None
    assert gate.calls[1].decision.witness.events == (4, 3)
    assert "events #4 send_money, #3 read_file" in str(_errors(messages)[-1])


class _ObserveFails:
    """A guard that cannot inspect results: the kernel withholds them."""

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        return None

    def observe(self, call: ToolCall, result: ToolResult | None) -> None:
        if result is not None:
            raise RuntimeError("cannot inspect")


def test_an_output_the_kernel_withholds_is_not_shown_to_the_model(
        banking: Any, policy: LoadedPolicy) -> None:
    gate = KernelGate(lambda: Kernel(policy, audit=None, guards=[_ObserveFails()]))
    task = banking.user_tasks["user_task_1"]
    _, _, messages = _run(banking, gate, task.ground_truth, task.PROMPT)
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"][0]["content"] == ""
    assert tool["error"].startswith("guard.observe-failed")


def test_the_audit_log_holds_prompts_decisions_results_and_answer_in_order(
        banking: Any, policy: LoadedPolicy) -> None:
    with AuditedKernel(policy) as audited:
        gate = KernelGate(lambda: audited.kernel)
        _run(banking, gate, _with(banking, "user_task_3", "injection_task_0"),
             banking.user_tasks["user_task_3"].PROMPT, "the answer")
        records = audited.records()
        assert audited.verify().ok
    trail = []
    for r in records:
        if r.kind == "system" and r.payload["kind"] == "event":
            trail.append(r.payload["data"]["action"])
        elif r.kind == "decision":
            trail.append(f"{r.payload['call']['tool']}:{r.payload['decision']['verdict']}")
        elif r.kind == "result":
            trail.append(f"result:{r.payload['result']['status']}")
        else:
            trail.append(r.kind)
    assert trail == ["run-start", "system_prompt", "user_prompt",
                     "get_most_recent_transactions:allow", "result:ok",
                     "send_money:allow", "result:ok",
                     "send_money:deny", "answer", "run-end"]
    answer = next(r for r in records if r.kind == "system"
                  and r.payload["data"]["action"] == "answer")
    assert answer.payload["data"]["args"] == {"text": "the answer", "final": True}
    prompt = next(r for r in records if r.kind == "system"
                  and r.payload["data"]["action"] == "user_prompt")
    assert prompt.payload["data"]["taint"] == ["user-provided"]


def test_each_run_has_a_kernel_of_its_own(banking: Any, policy: LoadedPolicy) -> None:
    kernels: list[Kernel] = []

    def fresh() -> Kernel:
        kernels.append(Kernel(policy, audit=None))
        return kernels[-1]

    gate = KernelGate(fresh)
    task = banking.user_tasks["user_task_3"]
    pipeline = defended_pipeline(ScriptedModel(task.ground_truth), gate)
    for _ in range(2):
        banking.run_task_with_pipeline(pipeline, task, None, {})
    assert len(kernels) == 2 and kernels[0].run_id != kernels[1].run_id
    assert all(k.trace_length == 5 for k in kernels)  # prompts, two calls, answer... and no more

"""Suspend and resume: a run goes on in another kernel from its snapshot, never from a replay."""

from __future__ import annotations

import os
import pickle
import pickletools
from pathlib import Path

import pytest

from callgate import CallgateError, Kernel
from callgate.policy import load_preset, parse_policy

OBLIGED = """
name: obliged
version: 1
principal:
  name: p
  capabilities: [{tool_class: file}, {tool_class: http}]
rules:
  - {id: all, match: {}, decision: allow}
run_state: {behavioral_rules: false}
behavior:
  - id: save-after-edit
    rule: resp(action = edit and path = $p, action = save and path = $p)
"""


def _call(tool: str, tool_class: str, action: str, **params: object) -> dict[str, object]:
    return {"tool": tool, "tool_class": tool_class, "action": action, "parameters": params}


def test_an_open_obligation_and_the_taint_survive_a_resume(tmp_path: Path) -> None:
    policy = parse_policy(OBLIGED)
    first = Kernel(policy, working_dir=tmp_path, run_id="r", audit=tmp_path / "a.db")
    first.check(_call("edit", "file", "write", path="x.txt"))
    first.check(_call("fetch", "http", "get", url="https://example.org/"))
    blob = first.suspend()
    second = Kernel(policy, working_dir=tmp_path, run_id="r", audit=tmp_path / "a.db",
                    resume=blob)
    assert "web" in second.taint
    assert [v.statement for v in second.open_obligations()] == ["save-after-edit"]
    second.check(_call("save", "file", "write", path="x.txt"))
    assert second.open_obligations() == []
    assert second.end_run() == []


def test_report_records_the_result_of_a_checked_call(tmp_path: Path) -> None:
    kernel = Kernel(load_preset("workspace-assistant"), working_dir=tmp_path,
                    audit=tmp_path / "a.db")
    decision = kernel.check(_call("fetch", "http", "get", url="https://example.org/"))
    result = kernel.report(decision.call_id or "", output="hello", taint=["email"])
    assert result.status == "ok" and {"web", "email"} <= {t.source for t in result.taint}
    with pytest.raises(CallgateError, match="awaits a result"):
        kernel.report(decision.call_id or "")  # once only


def test_a_snapshot_of_another_policy_or_run_is_refused(tmp_path: Path) -> None:
    blob = Kernel(parse_policy(OBLIGED), working_dir=tmp_path, run_id="r").suspend()
    with pytest.raises(CallgateError, match="another policy"):
        Kernel(load_preset("strict"), working_dir=tmp_path, run_id="r", resume=blob)
    with pytest.raises(CallgateError, match="belongs to run"):
        Kernel(parse_policy(OBLIGED), working_dir=tmp_path, run_id="other", resume=blob)


def test_a_snapshot_cannot_name_code(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    with pytest.raises(CallgateError, match="may not name"):
        Kernel(parse_policy(OBLIGED), working_dir=tmp_path, run_id="r",
               resume=pickle.dumps({"format": 1, "x": Evil()}))
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(CallgateError, match="unreadable"):
        Kernel(parse_policy(OBLIGED), working_dir=tmp_path, run_id="r", resume=b"garbage")


STATEFUL = """
name: stateful
version: 1
principal:
  name: p
  capabilities:
    - {tool_class: file}
    - {tool_class: http, constraints: {allowed_hosts: [example.org]}}
rules:
  - {id: all, match: {}, decision: allow}
run_state: {quarantine_after_denials: 2}
"""


def _stateful_run(tmp_path: Path) -> Kernel:
    """A run with a token and its narrowed child, an indexed output and a quarantine."""
    kernel = Kernel(parse_policy(STATEFUL), working_dir=tmp_path, run_id="r")
    parent = kernel.issue_token("http", actions=["get"], max_uses=5)
    kernel.register_token(parent.narrow(max_uses=3))
    decision = kernel.check(_call("read", "file", "read", path="notes.txt"))
    kernel.report(decision.call_id or "", output="the code is ZEBRA-7731-QUOKKA, keep it")
    for _ in range(2):
        kernel.check(_call("fetch", "http", "get", url="https://evil.example/"))
    assert kernel.run_state.quarantine is not None
    return kernel


def test_a_snapshot_is_plain_values_naming_no_class_of_callgate(tmp_path: Path) -> None:
    blob = _stateful_run(tmp_path).suspend()
    named = {str(arg) for op, arg, _ in pickletools.genops(blob)
             if op.name in ("GLOBAL", "STACK_GLOBAL", "SHORT_BINUNICODE") and arg}
    assert not any(name.startswith("callgate") for name in named)  # no module of callgate


def test_a_quarantined_run_with_tokens_and_indexed_outputs_resumes_as_it_was(
    tmp_path: Path,
) -> None:
    first = _stateful_run(tmp_path)
    second = Kernel(parse_policy(STATEFUL), working_dir=tmp_path, run_id="r",
                    resume=first.suspend())
    assert second.run_state.quarantine == first.run_state.quarantine
    assert second.run_state.counters == first.run_state.counters
    tokens = second._tokens._tokens
    child = next(t for t in tokens.values() if t.parent is not None)
    assert child.parent is tokens[child.parent.id]  # one parent object: uses stay shared
    child.use()
    assert (child.remaining(), child.parent.remaining()) == (2, 4)
    assert second._behavior._abstractor is not None and first._behavior._abstractor is not None
    assert second._behavior._abstractor._index.state() == \
        first._behavior._abstractor._index.state()
    assert second._behavior._abstractor._index.sources("ZEBRA-7731-QUOKKA")

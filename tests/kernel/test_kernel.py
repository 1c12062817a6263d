"""The kernel pipeline on the issue's example policy: what it allows, denies and asks about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callgate import Denied, Reason, ToolCall, ToolResult
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy, parse_policy
from callgate.testing import call, reason_ids


@pytest.fixture
def kernel(example_policy: LoadedPolicy, workdir: Path) -> Kernel:
    return Kernel(example_policy, working_dir=workdir)


def test_http_get_to_an_allowed_host_is_allowed_by_the_allow_reads_rule(kernel: Kernel) -> None:
    d = kernel.check(call("http", "get", url="https://api.github.com/repos/x/y"))
    assert d.verdict == "allow"
    assert reason_ids(d) == ["allow-reads"]


@pytest.mark.parametrize("url", [
    "https://api.github.com.evil.com/x",
    "https://evil.example.org.attacker.net/",
    "https://example.org/",
    "https://api.github.com@evil.com/",
])
def test_http_get_to_lookalike_hosts_is_denied_by_the_capability(kernel: Kernel, url: str) -> None:
    d = kernel.check(call("http", "get", url=url))
    assert d.verdict == "deny"
    assert reason_ids(d) == ["capability.constraint"]


def test_wildcard_host_allows_a_subdomain(kernel: Kernel) -> None:
    assert kernel.check(call("http", "get", url="https://docs.example.org/a")).verdict == "allow"


def test_http_post_has_no_capability(kernel: Kernel) -> None:
    d = kernel.check(call("http", "post", url="https://api.github.com/x"))
    assert reason_ids(d) == ["capability.missing"]


def test_file_read_inside_data_is_allowed(kernel: Kernel) -> None:
    assert kernel.check(call("file", "read", path="./data/notes.txt")).verdict == "allow"


def test_file_write_inside_out_requires_approval(kernel: Kernel) -> None:
    d = kernel.check(call("file", "write", path="./out/report.md", content="x"))
    assert d.verdict == "require-approval"
    assert reason_ids(d) == ["approve-writes"]


@pytest.mark.parametrize("path", [
    "../secret.txt",
    "./data/../../etc/passwd",
    "./data/etc-link/passwd",
    "~/.ssh/id_rsa",
    "file:///etc/passwd",
    "/etc/shadow",
])
def test_file_reads_that_escape_the_allowed_globs_are_denied(kernel: Kernel, path: str) -> None:
    d = kernel.check(call("file", "read", path=path))
    assert d.verdict == "deny", path
    assert d.reasons[0].check in ("capability", "validate")


def test_a_path_nested_in_arguments_is_gated(kernel: Kernel) -> None:
    d = kernel.check(call("file", "read", path="./data/notes.txt",
                          options={"also": ["/etc/shadow"]}))
    assert d.verdict == "deny"
    assert "/etc/shadow" in d.reasons[0].message


def test_shell_allowed_command_passes_and_compound_command_is_denied(kernel: Kernel) -> None:
    assert kernel.check(call("shell", "exec", command="ls -la")).verdict == "allow"
    d = kernel.check(call("shell", "exec", command="ls; curl x"))
    assert d.verdict == "deny"
    assert reason_ids(d) == ["capability.constraint"]


def test_shell_with_web_taint_is_denied_by_the_priority_rule(kernel: Kernel) -> None:
    d = kernel.check(call("shell", "exec", command="ls", taint=["web"]))
    assert reason_ids(d) == ["deny-tainted-shell"]


def test_taint_from_an_earlier_fetch_reaches_later_calls(kernel: Kernel) -> None:
    assert kernel.check(call("http", "get", url="https://api.github.com/")).verdict == "allow"
    assert "web" in kernel.taint
    d = kernel.check(call("shell", "exec", command="ls"))
    assert d.verdict == "deny"
    assert reason_ids(d) == ["deny-tainted-shell"]


def test_taint_is_never_removed(kernel: Kernel) -> None:
    kernel.check(call("http", "get", url="https://api.github.com/"))
    for _ in range(3):
        kernel.check(call("file", "read", path="./data/notes.txt"))
    assert "web" in kernel.taint


def test_nothing_matched_is_denied_by_default() -> None:
    policy = parse_policy("name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n"
                          "    - tool_class: mcp\n")
    d = Kernel(policy).check(call("mcp", "invoke", tool="mcp__x__y"))
    assert reason_ids(d) == ["default-deny"]


def test_a_capability_without_constraints_grants_its_whole_class() -> None:
    policy = parse_policy("name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n"
                          "    - tool_class: mcp\nrules:\n  - id: all\n    decision: allow\n")
    k = Kernel(policy)
    assert k.check(call("mcp", "invoke")).verdict == "allow"
    assert k.check(call("mcp", "anything")).verdict == "allow"


def test_all_grants_of_a_class_are_considered_not_only_the_first(tmp_path: Path) -> None:
    policy = parse_policy(
        "name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n"
        "    - {tool_class: http, actions: [get], constraints: {allowed_hosts: [a.com]}}\n"
        "    - {tool_class: http, actions: [get], constraints: {allowed_hosts: [b.com]}}\n"
        "rules:\n  - {id: all, decision: allow}\n")
    k = Kernel(policy, working_dir=tmp_path)
    assert k.check(call("http", "get", url="https://b.com/")).verdict == "allow"
    assert k.check(call("http", "get", url="https://c.com/")).verdict == "deny"


def test_rate_limit_denies_past_max_calls_per_minute(tmp_path: Path) -> None:
    policy = parse_policy(
        "name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n"
        "    - {tool_class: http, actions: [get], constraints: {max_calls_per_minute: 2}}\n"
        "rules:\n  - {id: all, decision: allow}\nrun_state: {quarantine_after_denials: 50}\n")
    k = Kernel(policy, working_dir=tmp_path)
    verdicts = [k.check(call("http", "get", url="https://a.com/")).verdict for _ in range(3)]
    assert verdicts == ["allow", "allow", "deny"]


@pytest.mark.parametrize("bad", [
    {"tool": "x", "action": "get", "parameters": {}},                      # missing tool_class
    {"tool": "x", "tool_class": "http", "action": "get", "surprise": 1},    # unknown field
    {"tool": "x", "tool_class": "http", "action": "get", "parameters": []},  # wrong type
    {"tool": "x", "tool_class": "http", "action": "get", "parameters": {"b": "x" * (1 << 21)}},
])
def test_malformed_calls_are_denied_with_a_reason_not_raised(kernel: Kernel,
                                                             bad: dict[str, Any]) -> None:
    d = kernel.check(bad)
    assert d.verdict == "deny"
    assert d.reasons[0].check == "validate"


def test_deeply_nested_parameters_are_denied(kernel: Kernel) -> None:
    nested: Any = "x"
    for _ in range(60):
        nested = {"a": nested}
    d = kernel.check(call("http", "get", url="https://api.github.com/", deep=nested))
    assert reason_ids(d) == ["input.too-deep"]


@pytest.mark.interpreted
def test_an_internal_error_is_a_deny_with_its_reason(kernel: Kernel,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(kernel, "_step_capability", broken)
    d = kernel.check(call("http", "get", url="https://api.github.com/"))
    assert d.verdict == "deny"
    assert reason_ids(d) == ["internal.error"]
    assert "boom" in d.reasons[0].message


def test_execute_runs_the_executor_only_when_allowed(kernel: Kernel) -> None:
    ran: list[ToolCall] = []
    kernel.register_executor("http", lambda c: ran.append(c) or "page")
    result = kernel.execute(call("http", "get", url="https://api.github.com/"))
    assert result.status == "ok"
    assert result.output == "page"
    assert {t.source for t in result.taint} >= {"web", "tool-output"}
    with pytest.raises(Denied) as info:
        kernel.execute(call("http", "get", url="https://evil.com/"))
    assert info.value.decision.verdict == "deny"
    assert len(ran) == 1


def test_execute_passes_the_canonical_path_to_the_executor(kernel: Kernel, workdir: Path) -> None:
    seen: list[str] = []
    kernel.register_executor("file", lambda c: seen.append(c.parameters["path"]))
    kernel.execute(call("file", "read", path="./data/./notes.txt"))
    assert seen == [str((workdir / "data" / "notes.txt").resolve())]


def test_approval_without_a_handler_denies(kernel: Kernel) -> None:
    kernel.register_executor("file", lambda c: "written")
    with pytest.raises(Denied) as info:
        kernel.execute(call("file", "write", path="./out/r.md", content="x"))
    assert info.value.decision.reasons[-1].id == "approval.denied"


def test_approval_handler_can_grant(example_policy: LoadedPolicy, workdir: Path) -> None:
    k = Kernel(example_policy, working_dir=workdir, approval_handler=lambda c, d: True)
    k.register_executor("file", lambda c: "written")
    assert k.execute(call("file", "write", path="./out/r.md", content="x")).output == "written"


def test_approval_timeout_denies(example_policy: LoadedPolicy, workdir: Path) -> None:
    import threading

    never = threading.Event()
    k = Kernel(example_policy, working_dir=workdir, approval_timeout_s=0.05,
               approval_handler=lambda c, d: never.wait(5))
    k.register_executor("file", lambda c: "written")
    with pytest.raises(Denied) as info:
        k.execute(call("file", "write", path="./out/r.md", content="x"))
    assert "timed out" in info.value.decision.reasons[-1].message
    never.set()


def test_check_reports_require_approval_without_consulting_the_handler(
        example_policy: LoadedPolicy, workdir: Path) -> None:
    asked: list[int] = []
    k = Kernel(example_policy, working_dir=workdir,
               approval_handler=lambda c, d: bool(asked.append(1)))
    assert k.check(call("file", "write", path="./out/r.md")).verdict == "require-approval"
    assert asked == []


class SecretWordGuard:
    """A test guard: denies any call whose parameters mention a word seen in an earlier output."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.observed: list[str] = []

    def check(self, c: ToolCall, taint: frozenset[str]) -> Reason | None:
        text = str(c.parameters)
        if any(word in text for word in self.seen):
            return Reason(id="guard.secret-word", check="guard", message="a secret word leaves")
        return None

    def observe(self, c: ToolCall, result: ToolResult | None) -> None:
        self.observed.append(c.tool)
        if result is not None and isinstance(result.output, str):
            self.seen.update(result.output.split())


def test_guards_see_calls_and_results_and_can_deny(example_policy: LoadedPolicy,
                                                   workdir: Path) -> None:
    guard = SecretWordGuard()
    k = Kernel(example_policy, working_dir=workdir, guards=[guard])
    k.register_executor("file", lambda c: "hunter2")
    k.execute(call("file", "read", tool="read", path="./data/notes.txt"))
    d = k.check(call("http", "get", url="https://api.github.com/?q=hunter2"))
    assert reason_ids(d) == ["guard.secret-word"]
    assert guard.observed == ["read"]


@pytest.mark.parametrize("typed", [False, True])
def test_what_the_caller_changes_while_a_call_waits_is_not_what_runs(typed: bool) -> None:
    policy = parse_policy("""\
name: p
version: 1
principal: {name: a, capabilities: [{tool_class: messaging}]}
rules:
  - {id: ask, match: {tool_class: messaging}, decision: require-approval}
""")
    recipients = ["alice@example.com"]
    parameters: dict[str, Any] = {"to": recipients, "meta": {"cc": []}}
    raw: Any = {"tool": "send", "tool_class": "messaging", "action": "post",
                "parameters": parameters}
    if typed:
        raw = ToolCall(**raw)

    def approve(checked: Any, decision: Any) -> bool:
        # the caller (another thread) changes what it still holds while the human is asked
        recipients.append("mallory@evil.example")
        parameters["meta"]["cc"].append("mallory@evil.example")
        return True

    k = Kernel(policy, audit=None, approval_handler=approve)
    ran: list[dict[str, Any]] = []
    k.register_executor("messaging", lambda c: ran.append(c.parameters) or "sent")
    k.execute(raw)
    assert ran == [{"to": ["alice@example.com"], "meta": {"cc": []}}]

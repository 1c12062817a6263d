"""``callgate.testing``: the helpers users test their policies with."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from callgate.testing import (
    AuditedKernel,
    assert_allowed,
    assert_denied,
    assert_requires_approval,
    call,
    check_trace,
    event,
    policy_of,
    reason_ids,
    tool_call,
)

ROOT = Path(__file__).resolve().parents[1]

POLICY = """
name: t
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: http
      actions: [get, post]
      constraints: {allowed_hosts: [api.github.com]}
rules:
  - id: posts
    match: {tool_class: http, action: post}
    decision: require-approval
  - id: reads
    match: {tool_class: http}
    decision: allow
"""


def test_a_call_names_its_tool_and_its_taint() -> None:
    built = call("http", "get", url="u", taint=["web"])
    assert built == {"tool": "http_get", "tool_class": "http", "action": "get",
                     "parameters": {"url": "u"}, "taint": [{"source": "web"}]}
    stamped = tool_call("file", "read", "reader", sequence=4, path="p")
    assert (stamped.tool, stamped.id, stamped.sequence) == ("reader", "test-run:4", 4)


def test_the_assertions_pass_on_the_right_verdict_and_name_everything_when_wrong(
        tmp_path: Path) -> None:
    with AuditedKernel(POLICY, working_dir=tmp_path) as run:
        allowed = run.check(call("http", "get", url="https://api.github.com/x"))
        denied = run.check(call("http", "get", url="https://evil.example/x"))
        pending = run.check(call("http", "post", url="https://api.github.com/x"))
    assert_allowed(allowed, "reads")
    assert_denied(denied, "capability.constraint", check="capability")
    assert_requires_approval(pending, "posts")
    assert reason_ids(denied) == ["capability.constraint"]
    with pytest.raises(AssertionError, match=r"expected allow, got deny with reasons "
                       r"\[\('capability.constraint', 'capability'\)\]: host evil.example"):
        assert_allowed(denied)
    with pytest.raises(AssertionError, match="expected allow for 'posts', got allow"):
        assert_allowed(allowed, "posts")
    with pytest.raises(AssertionError, match="expected deny by the 'rule' check"):
        assert_denied(denied, check="rule")


def test_the_private_audit_log_is_readable_verifiable_and_removed_on_close(
        tmp_path: Path) -> None:
    run = AuditedKernel(POLICY, working_dir=tmp_path)
    run.check(call("http", "get", url="https://api.github.com/x"))
    assert [r.kind for r in run.records()] == ["run-start", "decision"]
    assert run.verify().ok
    # the chain is really checked: a rewritten decision is found
    log = Path(f"{run.audit_path}.log")  # an attacker with the file rewrites the decision
    text = log.read_text("utf-8")
    assert '"verdict":"allow"' in text
    log.write_text(text.replace('"verdict":"allow"', '"verdict":"deny"'), "utf-8")
    assert not run.verify().ok
    where = run.audit_path.parent
    run.close()
    assert not where.exists()


def test_a_policy_that_does_not_load_leaves_no_directory_behind(tmp_path: Path) -> None:
    before = set(Path(tmp_path).iterdir())
    with pytest.raises(Exception, match="missing required key"):
        AuditedKernel("name: x\n", working_dir=tmp_path)
    assert set(Path(tmp_path).iterdir()) == before


def test_a_trace_is_numbered_and_judged_by_the_policys_statements() -> None:
    policy = POLICY + ("behavior:\n  - id: no-post-after-secret\n"
                       "    rule: always(not (action = post and once(action = read_secret)))\n")
    assert check_trace(policy, [event("post"), event("read_secret")]) == []
    broken = check_trace(policy, [event("read_secret"), event("get"), event("post")])
    assert [(v.statement, v.events) for v in broken] == [("no-post-after-secret", (3,))]


def test_a_preset_name_is_a_policy() -> None:
    assert policy_of("deny-all").name == "deny-all"


def test_the_example_on_the_docs_page_runs(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.S)
    assert code is not None
    done = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_it_decides_a_call_with_every_extra_missing(tmp_path: Path) -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'z3', 'tree_sitter', 'tree_sitter_bash', 'httpx',\n"
        "                'sqlglot', 'starlette', 'uvicorn', 'psycopg'}:\n"
        "            raise ImportError(name + ' is blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from callgate.testing import AuditedKernel, assert_allowed, call\n"
        f"with AuditedKernel({POLICY!r}, working_dir='.') as run:\n"
        "    assert_allowed(run.check(call('http', 'get', url='https://api.github.com/')))\n"
        "    assert run.verify().ok\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], cwd=tmp_path, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr

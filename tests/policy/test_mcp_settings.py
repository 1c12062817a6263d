"""The policy's ``mcp:`` section: server names that keep ``mcp__SERVER__TOOL`` one tool, and
shapes refused at their place."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate import PolicyError
from callgate.integrations.mcp._gate import kernel_tool
from callgate.policy._loader import parse_policy
from callgate.policy._settings import SERVER_NAME


def _servers(body: str) -> str:
    return f"name: p\nversion: 1\nmcp:\n  servers:\n{body}"


@pytest.mark.parametrize("name", ["a__b", "git_", "_git", "-x", "a" * 64, "has space"])
def test_a_server_name_that_could_make_a_policy_name_ambiguous_is_refused_at_the_name(
        name: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(_servers(f"    '{name}': {{command: x}}\n"), "p.yaml")
    problem = caught.value.problems[0]
    assert (problem.line, problem.column) == (5, 5)
    assert "server name" in problem.message


@pytest.mark.parametrize(("body", "words"), [
    ("    s: {command: x, url: 'http://h/mcp'}\n", "not both"),
    ("    s: {command: x, headers: {A: b}}\n", "headers apply to a url server only"),
    ("    s: {url: 'http://h/mcp', args: [a]}\n", "apply to a command server only"),
    ("    s: {command: x, bogus: 1}\n", "bogus"),
    ("    s: {url: 'ftp://h/mcp'}\n", "url"),
])
def test_wrong_server_shapes_are_refused_with_their_reason(body: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(_servers(body), "p.yaml")
    assert words in str(caught.value)
    assert caught.value.problems[0].line == 5


def test_a_server_may_name_its_own_policy() -> None:
    loaded = parse_policy(_servers("    s: {command: x, policy: other.yaml, source: web}\n"))
    assert loaded.policy.mcp is not None
    assert loaded.policy.mcp.servers["s"].policy == "other.yaml"


_NAMES = st.from_regex(SERVER_NAME, fullmatch=True)


def _readings(name: str, pattern: re.Pattern[str]) -> set[tuple[str, str]]:
    """Every (server, tool) that spells ``name`` as mcp__SERVER__TOOL with a valid server."""
    body = name.removeprefix("mcp__")
    return {(body[:i], body[i + 2:]) for i in range(len(body) - 1)
            if body[i:i + 2] == "__" and pattern.match(body[:i]) and body[i + 2:]}


@given(_NAMES, st.text(alphabet="_a-", min_size=1, max_size=8) | st.text(min_size=1))
def test_one_policy_name_never_means_two_tools(server: str, tool: str) -> None:
    assert _readings(kernel_tool(server, tool), SERVER_NAME) == {(server, tool)}


def test_the_readings_check_finds_the_ambiguity_a_looser_name_rule_allows() -> None:
    looser = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    assert _readings(kernel_tool("a_", "b"), looser) == {("a_", "b"), ("a", "_b")}

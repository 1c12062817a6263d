"""Capability tokens: scoped, expiring, use-limited, and only ever narrower."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate import CapabilityConstraints, Denied
from callgate.kernel._capabilities import CapabilityToken
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import parse_policy
from callgate.testing import call, reason_ids

POLICY = parse_policy("""\
name: tokens
version: 1
principal:
  name: agent
  capabilities:
    - {tool_class: http, actions: [get, head]}
    - {tool_class: file, actions: [read], constraints: {allowed_paths: ["./**"]}}
rules:
  - {id: allow-all, decision: allow}
run_state: {quarantine_after_denials: 1000}
""")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kernel(tmp_path: Path, clock: Clock) -> Kernel:
    return Kernel(POLICY, working_dir=tmp_path, clock=clock)


def with_token(c: dict[str, Any], token: CapabilityToken) -> dict[str, Any]:
    return {**c, "token": token.id}


def test_a_token_for_an_ungranted_class_is_refused_and_counted(kernel: Kernel) -> None:
    with pytest.raises(Denied):
        kernel.issue_token("shell", actions=["exec"])
    assert kernel.run_state.counters.denied_capability_requests == 1


def test_a_token_cannot_ask_for_more_actions_than_granted(kernel: Kernel) -> None:
    with pytest.raises(Denied):
        kernel.issue_token("http", actions=["get", "post"])


def test_a_token_scopes_calls_by_its_constraints(kernel: Kernel) -> None:
    tok = kernel.issue_token("http", actions=["get"],
                             constraints=CapabilityConstraints(allowed_hosts=("a.com",)))
    assert kernel.check(with_token(call("http", "get", url="https://a.com/"), tok)).allowed
    d = kernel.check(with_token(call("http", "get", url="https://b.com/"), tok))
    assert reason_ids(d) == ["capability.token"]


def test_a_token_expires(kernel: Kernel, clock: Clock) -> None:
    tok = kernel.issue_token("http", actions=["get"], ttl_s=10)
    clock.now += 11
    d = kernel.check(with_token(call("http", "get", url="https://a.com/"), tok))
    assert "expired" in d.reasons[0].message


def test_a_token_is_use_limited_and_children_spend_the_parent(kernel: Kernel) -> None:
    tok = kernel.issue_token("http", actions=["get"], max_uses=2)
    child = tok.narrow(max_uses=5)
    kernel.register_token(child)
    assert child.remaining() == 2
    assert kernel.check(with_token(call("http", "get", url="https://a/"), child)).allowed
    assert kernel.check(with_token(call("http", "get", url="https://a/"), tok)).allowed
    d = kernel.check(with_token(call("http", "get", url="https://a/"), child))
    assert "no uses left" in d.reasons[0].message


def test_an_unknown_or_foreign_token_is_refused(kernel: Kernel, tmp_path: Path) -> None:
    d = kernel.check({**call("http", "get", url="https://a/"), "token": "cap_forged"})
    assert reason_ids(d) == ["capability.token"]
    other = Kernel(POLICY, working_dir=tmp_path).issue_token("http", actions=["get"])
    with pytest.raises(Exception, match="not issued by this kernel"):
        kernel.register_token(other.narrow())


HOSTS = st.sampled_from(["a.com", "b.com", "*.c.com", "x.c.com"])
narrowing = st.fixed_dictionaries({
    "actions": st.one_of(st.none(), st.lists(st.sampled_from(["get", "head"]), max_size=2)),
    "hosts": st.one_of(st.none(), st.lists(HOSTS, max_size=3)),
    "ttl": st.one_of(st.none(), st.floats(min_value=0, max_value=100)),
    "uses": st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
})
probe = st.tuples(st.sampled_from(["get", "head"]),
                  st.sampled_from(["a.com", "b.com", "x.c.com", "y.c.com", "d.com"]),
                  st.floats(min_value=0, max_value=200))


@given(steps=st.lists(narrowing, min_size=1, max_size=5), probes=st.lists(probe, max_size=6))
def test_no_sequence_of_narrowing_ever_widens(tmp_path_factory: pytest.TempPathFactory,
                                              steps: list[dict[str, Any]],
                                              probes: list[tuple[str, str, float]]) -> None:
    clock = Clock()
    k = Kernel(POLICY, working_dir=tmp_path_factory.mktemp("w"), clock=clock)
    chain = [k.issue_token("http", actions=["get", "head"], ttl_s=150)]
    for s in steps:
        hosts = CapabilityConstraints(allowed_hosts=tuple(s["hosts"])) if s["hosts"] is not None \
            else None
        chain.append(chain[-1].narrow(actions=s["actions"], constraints=hosts, ttl_s=s["ttl"],
                                      max_uses=s["uses"], now=clock.now))
    for action, host, dt in probes:
        t = clock.now + dt
        c = k._validate(call("http", action, url=f"https://{host}/"))
        assert not isinstance(c, type(None))
        for parent, child in itertools.pairwise(chain):
            assert child.actions <= parent.actions
            assert child.expires_at <= parent.expires_at
            if child.admits(c, k.working_dir, t) is None:  # type: ignore[arg-type]
                assert parent.admits(c, k.working_dir, t) is None  # type: ignore[arg-type]


# --- grants whose root a symlink leads elsewhere ------------------------------------------


def _file_kernel(work: Path, constraints: str) -> Kernel:
    policy = parse_policy(
        "name: p\nversion: 1\nprincipal:\n  name: a\n  capabilities:\n"
        f"    - {{tool_class: file, constraints: {constraints}}}\n"
        "rules: [{id: ok, decision: allow, match: {tool_class: file}}]\n")
    return Kernel(policy, working_dir=work)


def test_a_grant_root_made_a_symlink_after_load_grants_nothing_through_it(tmp_path: Path) -> None:
    k = _file_kernel(tmp_path, '{allowed_paths: ["./data/**"]}')
    (tmp_path / "data").symlink_to("/etc")
    for action in ("read", "write"):
        d = k.check(call("file", action, path="./data/hostname"))
        assert d.verdict == "deny" and d.reasons[0].id == "capability.constraint", action


def test_a_grant_follows_a_symlinked_root_only_when_its_constraints_say_so(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "shared").symlink_to(outside)
    d = _file_kernel(work, '{allowed_paths: ["./shared/**"], follow_symlinks: ["./shared/**"]}'
                     ).check(call("file", "read", path="./shared/x"))
    assert d.verdict == "allow"

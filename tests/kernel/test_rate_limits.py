"""Rate limits: a grant's window counts its calls over a minute, and the memory it keeps is
bounded by the limits in force, however long the run."""

from __future__ import annotations

from pathlib import Path

from callgate.kernel._capabilities import RateLimiter
from callgate.kernel._kernel import Kernel
from callgate.policy import parse_policy

POLICY = """
name: limits
version: 1
principal:
  name: agent
  capabilities:
    - {tool_class: http, actions: [get], constraints: {max_calls_per_minute: 30}}
    - {tool_class: file, actions: [read]}
rules:
  - {id: all, match: {}, decision: allow}
run_state: {behavioral_rules: false, quarantine_after_denials: 1000000000}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_grant_without_a_limit_keeps_no_timestamps_however_many_calls(tmp_path: Path) -> None:
    kernel = Kernel(parse_policy(POLICY), audit=None, guards=[], working_dir=tmp_path)
    (tmp_path / "a").write_text("x")
    for _ in range(20_000):
        assert kernel.check({"tool": "r", "tool_class": "file", "action": "read",
                             "parameters": {"path": "a"}}).verdict == "allow"
    assert kernel._limiter.size() == 0
    kernel.close()


def test_a_limited_grants_window_never_holds_more_than_its_limit() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    allowed = 0
    for step in range(100_000):
        clock.now = step * 0.5  # two calls a second, four times the limit
        if not limiter.full(0, 30):
            limiter.hit(0, 30)
            allowed += 1
        assert limiter.size() <= 30
    minutes = -(-50_000 // 60)  # 50,000 seconds of calls, the last minute begun
    assert allowed == 30 * minutes  # 30 in every minute of the run, no more


def test_the_limit_refuses_the_thirty_first_call_of_a_minute_and_frees_it_after(
        tmp_path: Path) -> None:
    clock = Clock()
    kernel = Kernel(parse_policy(POLICY), audit=None, guards=[], working_dir=tmp_path)
    kernel._limiter = RateLimiter(clock)
    get = {"tool": "f", "tool_class": "http", "action": "get",
           "parameters": {"url": "https://example.org/"}}
    verdicts = [kernel.check(get).verdict for _ in range(31)]
    assert verdicts == ["allow"] * 30 + ["deny"]
    clock.now = 60.0
    assert kernel.check(get).verdict == "allow"
    kernel.close()

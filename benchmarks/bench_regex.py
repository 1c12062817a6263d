"""Per-match latency of policy patterns: Python's ``re`` against the RE2 wrapper.

Typical rule patterns on typical parameters (paths, URLs, commands), p50 per match, next to the
goal: the RE2 path costs no more than a few microseconds per typical match. One-off compile
time (including the one-time Unicode tables) is printed too.
Run: ``.venv/bin/python benchmarks/bench_regex.py``.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable

from callgate.matchers._regex import compile_policy_pattern

N = 20_000
GOAL_US = 5.0

CASES: list[tuple[str, str]] = [
    (r"(^|/)(\.ssh|\.gnupg)(/|$)", "/home/user/projects/app/src/main.py"),
    (r"(^|/)\.env[^/]*$", "/srv/app/.env.production"),
    (r"^https://(api\.github\.com|api\.openai\.com)/", "https://api.github.com/repos/a/b/pulls"),
    (r"(?i)drop\s+table", "SELECT name FROM users WHERE id = 42 ORDER BY name LIMIT 10"),
    (r"^[\w.-]+@example\.com$", "jane.doe@example.com"),
    (r"(?a)\brm\s+-rf\b", "ls -la /tmp && echo done"),
]


def p50_us(run: Callable[[str], object], text: str) -> float:
    samples = []
    for _ in range(N):
        start = time.perf_counter_ns()
        run(text)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def main() -> None:
    start = time.perf_counter()
    compiled = [compile_policy_pattern(p) for p, _ in CASES]
    print(f"compile {len(CASES)} patterns (first use, with Unicode tables): "
          f"{(time.perf_counter() - start) * 1000:.0f} ms")
    print(f"{'pattern':48} {'re p50 µs':>10} {'RE2 p50 µs':>11}  goal <= {GOAL_US} µs")
    worst = 0.0
    for (pattern, text), policy_pattern in zip(CASES, compiled, strict=True):
        re_us = p50_us(re.compile(pattern).search, text)
        re2_us = p50_us(policy_pattern.matches, text)
        worst = max(worst, re2_us)
        print(f"{pattern[:48]:48} {re_us:10.2f} {re2_us:11.2f}")
    print(f"worst RE2 p50: {worst:.2f} µs ({'meets' if worst <= GOAL_US else 'misses'} the goal)")


if __name__ == "__main__":
    main()

"""The attack and benign suites as a benchmark: block rate, false-block rate, mechanism per story.

Runs every scenario under ``tests/attacks/scenarios`` against the real executors (a local HTTP
server on 127.0.0.2, SQLite, the shell in its sandbox), once as shipped and once with every
content guard turned off, and writes benchmarks/out/attacks.json and attacks.md.
Run: ``.venv/bin/python benchmarks/bench_attacks.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.attacks.scenarios import (  # noqa: E402 - after the path setup
    Outcome,
    dumps,
    local_server,
    run_scenario,
    scenario_files,
    summary,
)

from callgate.guards import GuardSettings  # noqa: E402 - after the path setup

OUT = ROOT / "benchmarks" / "out"
GUARDS_OFF = GuardSettings.model_validate(
    {name: {"enabled": False} for name in ("egress", "secrets", "provenance", "injection")})


def run_all(guards: GuardSettings | None) -> tuple[list[Outcome], float]:
    """Every scenario once; the outcomes and the wall time in seconds."""
    outcomes = []
    started = time.perf_counter()
    with local_server() as server, tempfile.TemporaryDirectory() as tmp:
        for index, path in enumerate(scenario_files()):
            outcomes.append(run_scenario(path, Path(tmp) / str(index), server, guards=guards))
    return outcomes, time.perf_counter() - started


def markdown(shipped: dict[str, Any], off: dict[str, Any], seconds: float) -> str:
    """The report as a Markdown table."""
    lines = [
        "# Attack and benign suites",
        "",
        f"- attacks blocked: **{shipped['attacks_blocked']}/{shipped['attacks']}** "
        f"(block rate {shipped['block_rate']:.0%}); with the content guards off: "
        f"{off['attacks_blocked']}/{off['attacks']}",
        f"- benign scenarios blocked: **{shipped['benign_blocked']}/{shipped['benign']}** "
        f"(false-block rate {shipped['false_block_rate']:.0%})",
        f"- wall time for the whole suite: {seconds:.1f} s",
        "",
        "| story | kind | stopped by | check | where | guards off |",
        "|---|---|---|---|---|---|",
    ]
    off_by_name = {s["name"]: s for s in off["stories"]}
    for story in shipped["stories"]:
        other = off_by_name[story["name"]]
        without = other["mechanism"] if other["blocked"] else "**not blocked**"
        check = story["checks"][0] if story["checks"] else ""
        if other["kind"] != "attack":
            without = "-"
        lines.append(f"| {story['name']} | {story['kind']} | {story['mechanism'] or '-'} | "
                     f"{check} | {story['where'] or '-'} | {without} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    shipped_outcomes, seconds = run_all(None)
    off_outcomes, _ = run_all(GUARDS_OFF)
    shipped, off = summary(shipped_outcomes), summary(off_outcomes)
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"shipped": shipped, "guards_off": off, "seconds": round(seconds, 2)}
    (OUT / "attacks.json").write_text(dumps(report) + "\n")
    (OUT / "attacks.md").write_text(markdown(shipped, off, seconds))
    for story in shipped["stories"]:
        state = story["mechanism"] if story["blocked"] else "passed"
        print(f"{story['kind']:7} {story['name']:34} {state}")
    print(f"block rate {shipped['block_rate']:.0%} ({shipped['attacks_blocked']}/"
          f"{shipped['attacks']}); false-block rate {shipped['false_block_rate']:.0%} "
          f"({shipped['benign_blocked']}/{shipped['benign']}); guards off: "
          f"{off['attacks_blocked']}/{off['attacks']} blocked")
    wrong = [o.name for o in shipped_outcomes if not o.as_expected]
    if wrong:
        print("not as expected: " + ", ".join(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

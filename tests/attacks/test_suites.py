"""Every attack story is blocked for its stated reason; every benign scenario runs untouched.

The scenarios are YAML data under ``scenarios/`` and run against the real executors: files in a
temporary directory, SQLite databases, the shell in its OS sandbox, and an HTTP server on
127.0.0.2 reached through fake DNS names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attacks.scenarios import LocalServer, local_server, run_scenario, scenario_files


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with local_server() as running:
        yield running


@pytest.mark.parametrize("path", scenario_files("attack"), ids=lambda p: p.stem)
def test_attack_story_is_blocked_by_its_stated_mechanism(path: Path, tmp_path: Path,
                                                         server: LocalServer) -> None:
    outcome = run_scenario(path, tmp_path, server)
    assert outcome.blocked, f"{outcome.name} was not blocked: {outcome.errors}"
    assert outcome.as_expected, (
        f"{outcome.name} was blocked at {outcome.where} by {outcome.reasons}, "
        f"expected one of {outcome.expected_by}")


@pytest.mark.parametrize("path", scenario_files("benign"), ids=lambda p: p.stem)
def test_benign_scenario_runs_without_a_block(path: Path, tmp_path: Path,
                                              server: LocalServer) -> None:
    outcome = run_scenario(path, tmp_path, server)
    assert not outcome.blocked, f"{outcome.name} blocked at {outcome.where}: {outcome.reasons}"
    assert outcome.as_expected, f"{outcome.name} had failures: {outcome.errors}"


def test_suites_cover_at_least_sixteen_attack_stories_and_the_benign_kinds() -> None:
    attacks = {p.stem for p in scenario_files("attack")}
    assert len(attacks) >= 16
    assert {"read-docs", "fetch-public-pages", "query-database", "write-results",
            "get-then-post-api"} <= {p.stem for p in scenario_files("benign")}

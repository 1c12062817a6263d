"""Every attack story is blocked for its stated reason; every benign scenario runs untouched.

The scenarios are YAML data under ``scenarios/`` and run against the real executors: files in a
temporary directory, SQLite databases, the shell in its OS sandbox, and an HTTP server on
127.0.0.2 reached through fake DNS names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from callgate.guards import GuardSettings
from tests.attacks.scenarios import (
    SCENARIOS,
    LocalServer,
    local_server,
    run_scenario,
    scenario_files,
)


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


GUARDS_OFF = GuardSettings.model_validate({name: {"enabled": False} for name in
                                           ("egress", "secrets", "provenance", "injection")})


def _guard_stopped(path: Path) -> bool:
    by = yaml.safe_load(path.read_text()).get("by") or []
    return bool(by) and all(str(b).startswith("guard.") for b in by)


@pytest.mark.parametrize("path", [p for p in scenario_files("attack") if _guard_stopped(p)],
                         ids=lambda p: p.stem)
def test_story_stopped_by_a_guard_gets_through_with_the_guards_off(
        path: Path, tmp_path: Path, server: LocalServer) -> None:
    # The guard is the only layer stopping these stories under their policy: removing it
    # lets the attack run to the end, so the guard's protection is what the story tests.
    outcome = run_scenario(path, tmp_path, server, guards=GUARDS_OFF)
    assert not outcome.blocked, f"{outcome.name} blocked without guards by {outcome.reasons}"


def test_exfiltrated_records_reach_the_attacker_only_with_the_guards_off(
        tmp_path: Path, server: LocalServer) -> None:
    story = SCENARIOS / "attack" / "exfil-get-headers.yaml"
    server.received.clear()
    run_scenario(story, tmp_path / "on", server)
    assert not any("x-session" in {k.lower() for k in r.headers} for r in server.received)
    run_scenario(story, tmp_path / "off", server, guards=GUARDS_OFF)
    assert any("x-session" in {k.lower() for k in r.headers} for r in server.received)

"""Every shipped preset and policy set carries a test file, and each passes through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import callgate.policy.packs as packs
import callgate.policy.presets as presets
from callgate.cli._policy import policy

PRESETS = Path(presets.__file__).parent
PACKS = Path(packs.__file__).parent
SHIPPED = sorted([*PRESETS.glob("*.yaml"),
                  *(p for p in PACKS.glob("*/*.yaml") if p.parent.name != "tests")])


def _tests_of(policy_file: Path) -> Path:
    return policy_file.parent / "tests" / policy_file.name


@pytest.mark.parametrize("policy_file", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_shipped_policy_passes_its_shipped_tests(policy_file: Path) -> None:
    tests = _tests_of(policy_file)
    assert tests.is_file(), f"{policy_file.name} ships without {tests}"
    done = CliRunner().invoke(policy, ["test", str(policy_file), str(tests)])
    assert done.exit_code == 0, done.output
    assert " 0 failed" in done.output


def test_every_shipped_test_file_names_a_shipped_policy() -> None:
    files = sorted([*PRESETS.glob("tests/*.yaml"), *PACKS.glob("*/tests/*.yaml")])
    assert files
    for tests in files:
        assert (tests.parent.parent / tests.name).is_file(), f"{tests} tests no policy"


def test_the_sequences_pack_passes_its_shipped_tests_under_a_host_that_allows_all() -> None:
    # the pack is statements only; a host policy that allows every call leaves it the one
    # thing that refuses (it is on by default: run_state.behavioral_rules)
    host = Path(__file__).parents[1] / "data" / "policytest" / "sequences-host.yaml"
    tests = PACKS / "tests" / "sequences.yaml"
    done = CliRunner().invoke(policy, ["test", str(host), str(tests)])
    assert done.exit_code == 0, done.output
    assert "5 passed, 0 failed" in done.output

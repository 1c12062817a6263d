"""Shared fixtures: the issue's example policy in a throwaway working directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from callgate.policy._loader import LoadedPolicy, load_policy
from tests.postgres import Cluster, cluster

settings.register_profile("ci", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "research-agent.yaml"


@pytest.fixture
def example_policy() -> LoadedPolicy:
    return load_policy(EXAMPLE)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A working directory with ./data, ./out and a symlink in ./data pointing to /etc."""
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("hello")
    (tmp_path / "data" / "etc-link").symlink_to("/etc")
    return tmp_path


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """One throwaway PostgreSQL cluster for the whole session (tests make their own
    databases in it, or schemas, to stay apart)."""
    with cluster() as running:
        yield running

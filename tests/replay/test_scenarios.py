"""Replay reproduces every decision of every attack and benign scenario exactly.

Each scenario runs against the real executors with an audit log (every run of it recorded,
guards sharing one state file across runs), then every recorded run is replayed through a fresh
kernel from the log alone: no executor runs again, and each decision must be the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.audit import AuditStore
from callgate.replay import read_recording, render, replay
from tests.attacks.scenarios import LocalServer, local_server, run_scenario, scenario_files


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with local_server() as running:
        yield running


@pytest.mark.parametrize("path", scenario_files(), ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_replay_of_a_scenario_reproduces_every_decision(path: Path, tmp_path: Path,
                                                        server: LocalServer) -> None:
    db = tmp_path / "audit.db"
    run_scenario(path, tmp_path, server, audit=db)
    with AuditStore.open(db, read_only=True) as store:
        runs = store.run_ids()
    assert runs
    decided = 0
    for run_id in runs:
        outcome = replay(read_recording(db, run_id))
        assert outcome.identical, render(outcome)
        decided += outcome.calls
    assert decided > 0

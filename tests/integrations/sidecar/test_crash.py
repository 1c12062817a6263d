"""Nothing lost when a sidecar dies mid-decision or PostgreSQL restarts under load.

``make test`` kills a few dozen sidecars; ``make soak`` sets ``CALLGATE_CRASH_KILLS=200``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.integrations.sidecar.crashes import POLICY, Harness, check
from tests.integrations.sidecar.fleet import fleet
from tests.postgres import Cluster

KILLS = int(os.environ.get("CALLGATE_CRASH_KILLS", "36"))


def test_sigkilled_sidecars_lose_no_decision_and_run_no_unrecorded_call(
        tmp_path: Path, postgres: Cluster) -> None:
    with fleet(tmp_path, postgres, 3, POLICY) as f:
        with Harness(f) as harness:
            harness.kill_some(KILLS)
            time.sleep(0.5)  # the restarted sidecars serve again
        report = check(f, harness.outcome)
    print(json.dumps(report))
    assert report["kills"] == KILLS
    assert report["kills_mid_request"] >= KILLS // 2
    assert report["answers"] > KILLS  # the other sidecars went on deciding


def test_postgresql_restarting_under_load_gives_refusals_never_an_unaudited_allow(
        tmp_path: Path, postgres: Cluster) -> None:
    with fleet(tmp_path, postgres, 2, POLICY) as f:
        with Harness(f, clients=3) as harness:
            time.sleep(1.0)
            postgres.restart()
            time.sleep(1.0)
            postgres.restart()
            time.sleep(1.0)
        report = check(f, harness.outcome)
        for index in range(2):  # each sidecar decides again (a new run: the old ones may be
            with f.client(index) as client:  # quarantined for a decision the outage cut off)
                started = client.post("/v1/runs", json={})
                assert started.status_code == 201, started.text
                run_id = started.json()["run_id"]
                answer = client.post("/v1/execute", json={"run_id": run_id, "call": {
                    "tool": "save", "tool_class": "file", "action": "write",
                    "parameters": {"path": "data/after.txt", "content": "x"}}}).json()
                assert answer["verdict"] == "allow", answer
    print(json.dumps(report))
    assert report["unlogged_denials"] or report["failures"]  # the outage was seen, as refusals

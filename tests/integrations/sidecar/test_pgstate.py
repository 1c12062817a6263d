"""The sidecar's shared state in PostgreSQL: connections that died idle, and the server away."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate.integrations.sidecar._pgstate import PgStateDB, SharedStateError
from tests.integrations.sidecar.fleet import fleet
from tests.postgres import Cluster


def _count(db: PgStateDB) -> int:
    with db.transaction() as cur:
        row = cur.execute("SELECT count(*) FROM runs").fetchone()
    assert row is not None
    return int(row[0])


def test_pooled_connections_that_died_in_a_restart_are_replaced_before_a_request_sees_them(
        postgres: Cluster) -> None:
    db = PgStateDB(postgres.new_database("st"), pool_size=4)
    try:
        with db.connection() as a, db.connection() as b:  # two idle connections afterwards
            assert a is not b
        assert _count(db) == 0
        postgres.restart()
        assert _count(db) == 0  # the first request after the restart is served
        assert _count(db) == 0
    finally:
        db.close()


def test_the_server_away_is_a_shared_state_error_and_its_return_is_served(
        postgres: Cluster) -> None:
    db = PgStateDB(postgres.new_database("st"), pool_size=2, connect_timeout_s=1)
    try:
        assert _count(db) == 0
        postgres.stop()
        try:
            with pytest.raises(SharedStateError, match="cannot reach the shared state"):
                _count(db)
        finally:
            postgres.start()
        assert _count(db) == 0
    finally:
        db.close()


def test_starting_a_run_while_the_store_is_away_is_503_retry_then_201(
        tmp_path: Path, postgres: Cluster) -> None:
    with fleet(tmp_path, postgres, 1) as f, f.client(0) as client:
        again = client.post("/v1/runs", json={})
        assert again.status_code == 201, again.text
        postgres.stop()
        try:
            refused = client.post("/v1/runs", json={})
        finally:
            postgres.start()
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert "shared store is unavailable" in refused.json()["error"]["message"]
        again = client.post("/v1/runs", json={})
        assert again.status_code == 201, again.text


def test_a_password_in_the_url_never_reaches_a_message() -> None:
    for url in ("postgresql://app:hunter2-secret@db.example:5432/callgate",
                "postgresql://db.example/callgate?user=app&password=hunter2-secret",
                "host=db.example dbname=callgate password=hunter2-secret"):
        db = PgStateDB.__new__(PgStateDB)
        db.url = url
        assert "hunter2" not in db.redacted and "db.example" in db.redacted

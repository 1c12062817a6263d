"""Signed checkpoints close what a hash chain alone cannot: tail truncation and chain rewrites."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from callgate import AuditError
from callgate.audit import AuditStore, Checkpoint, generate_keypair, public_key_of
from callgate.audit import verify_file as verify_with_anchor
from callgate.audit._chain import runs_digest
from callgate.audit._checkpoint import key_id, sign_checkpoint, signature_problem

KEYS = generate_keypair()
OTHER = generate_keypair()


def verify_file(path: Path, **options: Any) -> Any:
    """verify_file for logs whose checkpoints the tests make by hand (no anchor file)."""
    return verify_with_anchor(path, require_anchor=False, **options)


def signed_log(path: Path, kit: Any, *, extra_checkpoint: bool = False) -> Checkpoint:
    """The populated log with a checkpoint after event 6 and (optionally) one at the head.

    The store's own checkpoints are off: these tests sign with an operator's key by hand.
    """
    with AuditStore.open(path, checkpoints=False) as store:
        kit.start(store, "a")
        kit.start(store, "b")
        for n in range(4):
            call = kit.make_call("a", n)
            store.record_decision("a", call, kit.allow(call))
        first = store.checkpoint(KEYS[0])
        for n in range(4, 6):
            call = kit.make_call("b", n)
            store.record_decision("b", call, kit.deny(call))
        last = store.checkpoint(KEYS[0]) if extra_checkpoint else first
        assert store.checkpoints()[-1] == last
    return first if not extra_checkpoint else last


def truncate(kit: Any, path: Path, keep: int) -> None:
    """Cut the chain after event ``keep`` and make the runs index agree (a careful attacker)."""
    kit.rewrite(path, kit.records(path)[:keep])


def test_keys_and_signatures_round_trip() -> None:
    private, public = KEYS
    assert len(private) == len(public) == 32
    assert public_key_of(private) == public
    digest = runs_digest([("a", 1, 5, None)])
    cp = sign_checkpoint(private, 5, "ab" * 32, "2026-01-01T00:00:00+00:00", runs=1,
                         runs_digest=digest)
    assert cp.key_id == key_id(public)
    assert signature_problem(cp, public) is None
    for moved in (
        Checkpoint(6, cp.head_hash, 1, digest, cp.created_at, cp.key_id, cp.signature),
        Checkpoint(5, cp.head_hash, 0, digest, cp.created_at, cp.key_id, cp.signature),
        Checkpoint(5, cp.head_hash, 1, "0" * 64, cp.created_at, cp.key_id, cp.signature),
    ):
        assert signature_problem(moved, public) == "checkpoint signature does not verify"
    assert "not the given key" in str(signature_problem(cp, OTHER[1]))
    with pytest.raises(AuditError, match="32 raw bytes"):
        sign_checkpoint(b"short", 1, "x", "t", runs=0, runs_digest="")


def test_a_checkpointed_log_verifies_with_the_public_key(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    anchor = signed_log(path, kit, extra_checkpoint=True)
    report = verify_file(path, public_key=KEYS[1], anchor=anchor)
    assert report.ok, str(report)
    assert anchor.seq == 8


def test_without_any_checkpoint_a_public_key_check_fails(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path, checkpoints=False) as store:
        kit.populate(store)
        assert store.verify().ok
        report = store.verify(public_key=KEYS[1])
    assert (report.ok, report.table) == (False, "checkpoints")
    assert "no signed checkpoint" in str(report.problem)


def test_a_checkpoint_from_another_key_is_rejected(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit)
    report = verify_file(path, public_key=OTHER[1])
    assert (report.table, report.row) == ("checkpoints", 1)
    assert "not the given key" in str(report.problem)


def test_a_truncated_tail_behind_a_checkpoint_is_detected(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit)  # checkpoint at 6
    truncate(kit, path, keep=4)
    report = verify_file(path)  # even without the key: the chain no longer reaches the checkpoint
    assert (report.ok, report.table, report.row) == (False, "checkpoints", 1)
    assert "tail was truncated" in str(report.problem)


def test_deleting_every_checkpoint_too_is_caught_by_the_public_key(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit)
    truncate(kit, path, keep=4)
    kit.execute(path, "DELETE FROM checkpoints")
    assert verify_file(path).ok  # the limit of a hash chain: a consistent prefix looks fine
    report = verify_file(path, public_key=KEYS[1])
    assert (report.ok, report.table) == (False, "checkpoints")


def test_an_external_anchor_catches_truncation_with_the_last_checkpoint_deleted(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    anchor = signed_log(path, kit, extra_checkpoint=True)  # checkpoints at 6 and 8
    truncate(kit, path, keep=6)
    kit.execute(path, "DELETE FROM checkpoints WHERE id = 2")
    assert verify_file(path, public_key=KEYS[1]).ok  # what stays in the file is consistent
    report = verify_file(path, public_key=KEYS[1], anchor=anchor)
    assert (report.ok, report.table, report.row) == (False, "checkpoints", "anchor")
    assert "truncated" in str(report.problem)


def test_a_deleted_middle_checkpoint_is_detected(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit, extra_checkpoint=True)
    kit.execute(path, "DELETE FROM checkpoints WHERE id = 1")
    report = verify_file(path)
    assert (report.table, report.row) == ("checkpoints", 2)


def test_a_rewritten_chain_is_detected_by_the_checkpoint(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit)
    records = kit.records(path)
    records[2]["payload"]["decision"]["verdict"] = "deny"  # hide that a call was allowed
    kit.rewrite(path, records)
    report = verify_file(path)
    assert (report.ok, report.table, report.row) == (False, "checkpoints", 1)
    assert "rewritten" in str(report.problem)


def test_a_rewritten_chain_with_forged_checkpoint_fails_the_signature(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit)
    records = kit.records(path)
    records[2]["payload"]["decision"]["verdict"] = "deny"
    kit.rewrite(path, records)
    new_hash = kit.events(path)[5][-1]
    kit.execute(path, "UPDATE checkpoints SET head_hash = ? WHERE id = 1", (new_hash,))
    assert verify_file(path).ok  # without the key the forgery is self-consistent
    report = verify_file(path, public_key=KEYS[1])
    assert (report.table, report.row) == ("checkpoints", 1)
    assert "does not verify" in str(report.problem)


def test_an_attacker_signing_with_their_own_key_is_rejected(tmp_path: Path, kit: Any) -> None:
    path = tmp_path / "a.db"
    signed_log(path, kit)
    with AuditStore.open(path, checkpoints=False) as store:
        store.checkpoint(OTHER[0])
    report = verify_file(path, public_key=KEYS[1])
    assert (report.table, report.row) == ("checkpoints", 2)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    which=st.sampled_from([1, 2]),
    column=st.sampled_from(
        ["seq", "head_hash", "runs", "runs_digest", "created_at", "key_id", "signature"]
    ),
    value=st.one_of(st.integers(-2, 12), st.text(max_size=6), st.sampled_from(["00" * 64])),
)
def test_editing_any_column_of_a_checkpoint_is_found_at_that_checkpoint(
    signed_template: Path, kit: Any, which: int, column: str, value: Any
) -> None:
    with kit.copy(signed_template) as path:
        conn = sqlite3.connect(path)
        before = conn.execute(f"SELECT {column} FROM checkpoints WHERE id = ?", (which,))
        old = before.fetchone()[0]
        conn.close()
        try:
            kit.execute(path, f"UPDATE checkpoints SET {column} = ? WHERE id = ?", (value, which))
        except sqlite3.Error:
            assume(False)
        conn = sqlite3.connect(path)
        new = conn.execute(f"SELECT {column} FROM checkpoints WHERE id = ?", (which,)).fetchone()[0]
        conn.close()
        assume(type(new) is not type(old) or new != old)
        report = verify_file(path, public_key=KEYS[1])
    assert (report.ok, report.table, report.row) == (False, "checkpoints", which), str(report)


@pytest.fixture(scope="module")
def signed_template(tmp_path_factory: pytest.TempPathFactory, kit: Any) -> Path:
    path = tmp_path_factory.mktemp("signed") / "audit.db"
    signed_log(path, kit, extra_checkpoint=True)
    return path

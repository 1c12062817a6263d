"""Reading a log for people (``callgate.audit._view``): runs summarised, calls paired with their
results, the segment followed; and that reading never writes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from callgate import Decision, Reason, TaintLabel, ToolCall, ToolResult, Witness
from callgate._errors import AuditError
from callgate.audit import AuditStore
from callgate.audit._chain import seal, segment_line
from callgate.audit._view import follow, list_runs, open_log, view_run


def _call(run_id: str, n: int, *, taint: tuple[str, ...] = ()) -> ToolCall:
    return ToolCall(tool="fetch", tool_class="http", action="get",
                    parameters={"url": f"https://example.org/{n}"},
                    taint=tuple(TaintLabel(source=s) for s in taint), id=f"{run_id}:{n}",
                    run_id=run_id, sequence=n, timestamp="2026-01-01T00:00:00Z")


def _write_run(store: AuditStore, run_id: str) -> None:
    store.start_run(run_id, principal="agent", policy_name="p", manifest_hash="m", config={})
    first = _call(run_id, 1)
    store.record_decision(run_id, first, Decision(verdict="allow", call_id=first.id, reasons=(
        Reason(id="allow-reads", check="rule", message="reads are fine"),)))
    store.record_result(run_id, ToolResult(call_id=first.id, status="ok", output="page",
                                           duration_ms=3.5,
                                           taint=(TaintLabel(source="web"),
                                                  TaintLabel(source="tool-output"))))
    second = _call(run_id, 2, taint=("web",))
    store.record_decision(run_id, second, Decision(
        verdict="deny", call_id=second.id,
        reasons=(Reason(id="no-egress", check="behavioral", message="read then sent"),),
        witness=Witness(statement="no-egress", events=(1, 2), detail="at event 2")))
    store.record_system(run_id, "quarantine", {"rule_id": "no-egress", "reason": "sent"})
    third = _call(run_id, 3)
    store.record_decision(run_id, third, Decision(verdict="require-approval", call_id=third.id))


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:
        _write_run(store, "r1")
        store.end_run("r1")
        store.start_run("r2", principal="other", policy_name="q", manifest_hash="m", config={})
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_runs_count_calls_denials_approvals_and_name_the_quarantine(log: Path) -> None:
    with open_log(log) as store:
        first, second = list_runs(store)
    assert (first.run_id, first.principal, first.policy) == ("r1", "agent", "p")
    assert (first.calls, first.allowed, first.denials, first.approvals) == (3, 1, 1, 1)
    assert first.quarantine == "no-egress" and first.ended_at is not None
    assert (second.run_id, second.calls, second.ended_at, second.quarantine) == \
        ("r2", 0, None, None)
    assert {"run_id", "calls", "denials"} <= set(first.to_json())


def test_show_pairs_each_decision_with_its_result_taint_witness_and_durations(log: Path) -> None:
    with open_log(log) as store:
        run = view_run(store, "r1")
    allowed, denied, pending = run.calls
    assert allowed.status == "ok" and allowed.ran_ms == 3.5
    assert allowed.taint_out == ["web"]  # tool-output says nothing and is left out
    assert allowed.decided_ms is not None and allowed.decided_ms > 0
    assert [r["id"] for r in denied.reasons] == ["no-egress"]
    assert denied.witness == {"statement": "no-egress", "events": [1, 2], "detail": "at event 2"}
    assert denied.taint_in == ["web"] and denied.result is None and denied.status is None
    assert pending.verdict == "require-approval"
    assert [r.payload["kind"] for r in run.system] == ["quarantine"]
    data = run.to_json()
    assert data["calls"][0]["result"]["output"] == "page"
    assert data["calls"][1]["hash"] == denied.decision.hash


def test_an_unknown_run_is_an_error_naming_the_runs_there_are(log: Path) -> None:
    with open_log(log) as store, pytest.raises(AuditError, match=r"no run 'nope'.*r1, r2"):
        view_run(store, "nope")


def test_a_missing_file_and_a_file_that_is_not_a_log_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="does not exist"):
        open_log(tmp_path / "none.db")
    (tmp_path / "text.db").write_text("hello")
    with pytest.raises(AuditError, match="not a callgate audit log"):
        open_log(tmp_path / "text.db")


def test_reading_never_changes_the_segment_or_cuts_a_torn_tail(log: Path) -> None:
    segment = Path(f"{log}.log")
    with segment.open("ab") as handle:
        handle.write(b'0123 {"torn":')  # a writer killed inside write()
    before = _digest(segment), _digest(Path(f"{log}.anchor"))
    with open_log(log) as store:
        list_runs(store)
        view_run(store, "r1")
    records = list(follow(log))
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert (_digest(segment), _digest(Path(f"{log}.anchor"))) == before


def test_follow_returns_records_appended_by_another_store_while_it_waits(log: Path) -> None:
    seen: list[int] = []
    writer = AuditStore.open(log)
    looks = 0

    def keep_going() -> bool:
        nonlocal looks
        looks += 1
        if looks == 1:  # caught up once: another writer appends now
            writer.record_system("r2", "note", {"n": 1})
        return looks < 3

    try:
        for record in follow(log, poll_s=0.01, keep_going=keep_going):
            seen.append(record.seq)
    finally:
        writer.close()
    assert seen == list(range(1, 10))  # the 8 events there were, then the note appended


def test_follow_refuses_a_line_that_does_not_continue_the_chain(log: Path) -> None:
    segment = Path(f"{log}.log")
    last = json.loads(segment.read_bytes().splitlines()[-1].partition(b" ")[2])
    forged = {**last, "seq": last["seq"] + 1, "run_seq": last["run_seq"] + 1, "prev": "0" * 64}
    text, digest = seal(forged)  # a well-formed line whose prev is not the head's hash
    with segment.open("ab") as handle:
        handle.write(segment_line(text, digest))
    with pytest.raises(AuditError, match="does not continue the chain"):
        list(follow(log))


def test_follow_refuses_a_segment_that_gets_shorter(log: Path) -> None:
    segment = Path(f"{log}.log")
    looks = 0

    def keep_going() -> bool:
        nonlocal looks
        looks += 1
        os.truncate(segment, 10)
        return looks < 3

    with pytest.raises(AuditError, match="got shorter"):
        list(follow(log, poll_s=0.01, keep_going=keep_going))

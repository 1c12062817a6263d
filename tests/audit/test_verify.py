"""verify(): any edited, deleted, inserted or reordered row or line is found, and named.

The populated log (see conftest) has 9 events in two runs; run "a" ended at event 8, run "b" is
open. Every test edits a private copy of it the way someone with write access to the files
(the database and its segment) could.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from callgate import AuditError, ToolResult
from callgate.audit import AuditStore, verify_file
from callgate.audit._chain import (
    EVENT_COLUMNS,
    META_ROWS,
    RUN_COLUMNS,
    canonical_json,
    event_row,
    seal,
    segment_line,
)
from callgate.audit._verify import VerifyReport, verify_rows

HEAD = 9
TAMPER = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-3, max_value=HEAD + 3),
    st.text(max_size=8),
    st.sampled_from(["allow", "deny", "a", "b", "run-end", "decision", "web", "0" * 64]),
    st.floats(allow_nan=False, allow_infinity=False),
)


def stored_value(path: Path, table: str, column: str, key: str, value: Any) -> Any:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(f"SELECT {column} FROM {table} WHERE {key} = ?", (value,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


def test_the_untouched_log_verifies(template: Path) -> None:
    report = verify_file(template)
    # meta, the segment's lines (each against its index row), runs, the index's position and
    # the checkpoints made at creation and at run "a"'s end; the anchor (that of run "a"'s end)
    # and the signatures with the key beside the log are checked too.
    assert report == VerifyReport(ok=True, checked=2 + HEAD + 2 + 1 + 2, anchor=8,
                                  signatures=True)
    assert "ok" in str(report)


@TAMPER
@given(seq=st.integers(1, HEAD), column=st.sampled_from(EVENT_COLUMNS), value=VALUES)
def test_editing_any_column_of_any_event_is_found_at_that_row(
    template: Path, kit: Any, seq: int, column: str, value: Any
) -> None:
    with kit.copy(template) as path:
        before = stored_value(path, "events", column, "seq", seq)
        event_id = stored_value(path, "events", "id", "seq", seq)
        try:
            kit.execute(path, f"UPDATE events SET {column} = ? WHERE seq = ?", (value, seq))
        except sqlite3.Error:
            assume(False)  # NOT NULL, or a sequence already taken: no edit happened
        if column == "seq":
            # SQLite converts what it can into the INTEGER PRIMARY KEY ('00…0' becomes 0):
            # the row moved to the sequence it actually stored.
            value = stored_value(path, "events", "seq", "id", event_id)
            assume(value != seq)
            # The edited row moved: the first row out of place is the one after the gap, or
            # the moved row itself when it went before the start or beyond the end.
            expected = value if value < 1 or seq == HEAD else seq + 1
        else:
            after = stored_value(path, "events", column, "seq", seq)
            assume(type(after) is not type(before) or after != before)
            expected = seq
        report = verify_file(path)
    assert not report.ok
    assert (report.table, report.row) == ("events", expected), str(report)


@TAMPER
@given(seq=st.integers(1, HEAD))
def test_deleting_an_event_is_found_at_the_next_row_or_in_the_runs_index(
    template: Path, kit: Any, seq: int
) -> None:
    with kit.copy(template) as path:
        run = stored_value(path, "events", "run_id", "seq", seq)
        kit.execute(path, "DELETE FROM events WHERE seq = ?", (seq,))
        report = verify_file(path)
    assert not report.ok
    if seq < HEAD:
        assert (report.table, report.row) == ("events", seq + 1)
        assert f"event {seq} is missing" in str(report.problem)
    else:
        # The last event has no successor: the runs index still counts it.
        assert (report.table, report.row) == ("runs", run)
        assert "event_count" in str(report.problem)


@TAMPER
@given(
    source=st.integers(1, HEAD),
    at=st.sampled_from([-1, 0, HEAD + 1, HEAD + 7]),
    column=st.sampled_from(["verdict", "hash", "id"]),
    value=st.text(max_size=4),
)
def test_inserting_a_forged_event_is_found_at_that_row(
    template: Path, kit: Any, source: int, at: int, column: str, value: str
) -> None:
    with kit.copy(template) as path:
        row = list(kit.events(path)[source - 1])
        row[0] = at
        row[EVENT_COLUMNS.index(column)] = value
        marks = ", ".join("?" * len(EVENT_COLUMNS))
        kit.execute(path, f"INSERT INTO events VALUES ({marks})", tuple(row))
        report = verify_file(path)
    assert not report.ok
    assert (report.table, report.row) == ("events", at), str(report)


@TAMPER
@given(pair=st.lists(st.integers(1, HEAD), min_size=2, max_size=2, unique=True))
def test_swapping_two_events_is_found_at_the_earlier_one(
    template: Path, kit: Any, pair: list[int]
) -> None:
    first, second = sorted(pair)
    with kit.copy(template) as path:
        rows = kit.events(path)
        sets = ", ".join(f"{name} = ?" for name in EVENT_COLUMNS[1:])
        with kit.connect(path) as conn:
            for seq, source in ((first, second), (second, first)):
                conn.execute(
                    f"UPDATE events SET {sets} WHERE seq = ?", (*rows[source - 1][1:], seq)
                )
        report = verify_file(path)
    assert not report.ok
    assert (report.table, report.row) == ("events", first), str(report)


@TAMPER
@given(run=st.sampled_from(["a", "b"]), column=st.sampled_from(RUN_COLUMNS), value=VALUES)
def test_editing_any_column_of_the_runs_index_is_found_at_that_run(
    template: Path, kit: Any, run: str, column: str, value: Any
) -> None:
    with kit.copy(template) as path:
        before = stored_value(path, "runs", column, "run_id", run)
        try:
            kit.execute(path, f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, run))
        except sqlite3.Error:
            assume(False)
        key = value if column == "run_id" else run
        after = stored_value(path, "runs", column, "run_id", key)
        assume(type(after) is not type(before) or after != before)
        report = verify_file(path)
    assert not report.ok
    assert (report.table, report.row) == ("runs", run), str(report)


def test_a_deleted_runs_row_is_found(template: Path, kit: Any) -> None:
    with kit.copy(template) as path:
        kit.execute(path, "DELETE FROM runs WHERE run_id = 'b'")
        report = verify_file(path)
    assert (report.table, report.row) == ("runs", "b")
    assert "missing from the runs index" in str(report.problem)


def test_an_invented_runs_row_is_found(template: Path, kit: Any) -> None:
    with kit.copy(template) as path:
        kit.execute(
            path,
            "INSERT INTO runs SELECT 'z', principal, policy_name, manifest_hash,"
            " config_hash, started_at, start_seq, ended_at, end_seq, event_count"
            " FROM runs WHERE run_id = 'a'",
        )
        report = verify_file(path)
    assert (report.table, report.row) == ("runs", "z")
    assert "no run-start event" in str(report.problem)


def _forge_tail(kit: Any, path: Path) -> tuple[dict[str, Any], str, int, int]:
    """A correctly chained event appended to the segment: (record, hash, offset, length)."""
    records = kit.records(path)
    forged = dict(records[-1], id="f" * 32, run_seq=records[-1]["run_seq"] + 1)
    forged.update(seq=HEAD + 1, prev=kit.events(path)[-1][EVENT_COLUMNS.index("hash")])
    text, digest = seal(forged)
    line = segment_line(text, digest)
    segment = Path(f"{path}.log")
    offset = segment.stat().st_size
    with segment.open("ab") as handle:
        handle.write(line)
    return forged, digest, offset, len(line)


def test_a_correctly_hashed_forged_tail_event_is_caught_by_the_runs_index(
    template: Path, kit: Any
) -> None:
    with kit.copy(template) as path:
        kit.rewrite(path, kit.records(path))  # a consistent rewrite of the chain changes nothing
        assert verify_file(path).ok
        forged, digest, offset, length = _forge_tail(kit, path)
        marks = ", ".join("?" * len(EVENT_COLUMNS))
        kit.execute(path, f"INSERT INTO events VALUES ({marks})",
                    event_row(forged, digest, offset, length))
        report = verify_file(path)
    assert (report.table, report.row) == ("runs", "b")


def test_an_index_that_says_more_than_the_segment_is_found(template: Path, kit: Any) -> None:
    with kit.copy(template) as path:
        segment = Path(f"{path}.log")
        lines = segment.read_bytes().splitlines(keepends=True)
        segment.write_bytes(b"".join(lines[:-2]))  # the last two lines cut off
        report = verify_file(path)
    assert (report.ok, report.table, report.row) == (False, "events", HEAD - 1)
    assert "truncated" in str(report.problem)


def test_a_missing_segment_is_found(template: Path, kit: Any) -> None:
    with kit.copy(template) as path:
        Path(f"{path}.log").unlink()
        report = verify_file(path)
    assert (report.ok, report.table, report.row) == (False, "events", 1)


@TAMPER
@given(seq=st.integers(1, HEAD), pair=st.lists(st.integers(1, HEAD), min_size=2, max_size=2,
                                                unique=True), how=st.sampled_from(
    ["delete", "duplicate", "swap", "blank", "not-utf8"]))
def test_editing_the_segment_alone_is_found_at_that_line(
    template: Path, kit: Any, seq: int, pair: list[int], how: str
) -> None:
    with kit.copy(template) as path:
        segment = Path(f"{path}.log")
        lines = segment.read_bytes().splitlines(keepends=True)
        at = seq
        if how == "delete":
            del lines[seq - 1]
        elif how == "duplicate":
            lines.insert(seq, lines[seq - 1])
            at = seq + 1
        elif how == "swap":
            first, second = sorted(pair)
            lines[first - 1], lines[second - 1] = lines[second - 1], lines[first - 1]
            at = first
        elif how == "blank":
            lines[seq - 1] = b"\n"
        else:
            lines[seq - 1] = lines[seq - 1][:5] + b"\xff" + lines[seq - 1][6:]
        segment.write_bytes(b"".join(lines))
        report = verify_file(path)
    assert not report.ok
    # the line itself, or its index row (which records where and what the line was)
    assert (report.table, report.row) in {("log", at), ("events", at)}, str(report)


def test_a_torn_tail_is_no_record_and_verifies(template: Path, kit: Any) -> None:
    with kit.copy(template) as path:
        with Path(f"{path}.log").open("ab") as handle:
            handle.write(b'{"id":"half a record')  # an append killed inside write()
        assert verify_file(path).ok


def test_a_forged_tail_past_the_last_checkpoint_is_what_checkpoints_bound(
    template: Path, kit: Any
) -> None:
    # Anyone who can write the segment can append a correctly chained event after the last
    # signed checkpoint (as anyone who could write the database could before): verify cannot
    # tell it from one not yet indexed. What a checkpoint signed is fixed.
    with kit.copy(template) as path:
        _forge_tail(kit, path)
        assert verify_file(path).ok
        kit.execute(path, "DELETE FROM checkpoints")
        report = verify_file(path)
    assert report.ok  # the anchor (run "a"'s end) still matches: the forged event is later


@pytest.mark.parametrize(
    ("sql", "table", "row"),
    [
        ("UPDATE meta SET value = '1' WHERE key = 'version'", None, None),
        ("INSERT INTO meta VALUES ('extra', 'x')", "meta", "extra"),
        ("DROP INDEX events_by_run", "sqlite_master", "events_by_run"),
        ("CREATE TABLE shadow (x)", "sqlite_master", "shadow"),
    ],
)
def test_edits_to_meta_and_schema_are_found(
    template: Path, kit: Any, sql: str, table: str | None, row: str | None
) -> None:
    with kit.copy(template) as path:
        kit.execute(path, sql)
        if table is None:
            # A foreign version is refused outright rather than misread.
            with pytest.raises(AuditError, match="version"):
                verify_file(path)
            return
        report = verify_file(path)
    assert not report.ok
    assert (report.table, report.row) == (table, row), str(report)


def test_a_dropped_trigger_is_found(template: Path, kit: Any) -> None:
    with kit.copy(template) as path:
        conn = sqlite3.connect(path)
        conn.execute("DROP TRIGGER events_no_delete")
        conn.close()
        report = verify_file(path)
    assert (report.table, report.row) == ("sqlite_master", "events_no_delete")


def test_an_edited_last_record_is_found_at_its_line_before_any_index_or_checkpoint(
    tmp_path: Path, kit: Any
) -> None:
    path = tmp_path / "a.db"
    with AuditStore.open(path) as store:  # no signing key: no checkpoint covers anything
        kit.start(store, "r1")
        store.record_result("r1", ToolResult(call_id="c", status="ok", output="allow"))
        assert kit.position(path)[0][1] == 0  # nothing indexed yet: the segment alone
        assert verify_file(path).ok
        lines = kit.lines(path)
        kit.write_lines(path, [*lines[:-1], lines[-1].replace('"allow"', '"deny"')])
        report = verify_file(path)
    assert (report.ok, report.table, report.row) == (False, "log", 2)
    assert "does not match the hash beside it" in str(report.problem)


def test_verify_rows_reports_a_non_json_record(template: Path, kit: Any) -> None:
    lines = kit.segment(template)
    start, end, _ = lines[3]
    lines[3] = (start, end, "0" * 64 + " {not json")
    report = verify_rows(
        meta=list(META_ROWS), lines=lines, events=kit.events(template), runs=[], position=[],
        checkpoints=[]
    )
    assert (report.ok, report.table, report.row, report.problem) == (
        False,
        "log",
        4,
        f"line at byte {start}: record is not JSON",
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["v", "seq", "id", "run_id", "run_seq", "kind", "ts", "prev", "payload", "extra"]
)


@settings(max_examples=80, deadline=None)
@given(seq=st.integers(1, HEAD), field=FIELDS, value=JSON, raw=st.booleans(),
       indexed=st.booleans())
def test_a_rehashed_record_of_any_shape_is_reported_never_crashes(
    template: Path, kit: Any, seq: int, field: str, value: Any, raw: bool, indexed: bool
) -> None:
    lines = kit.segment(template)
    record = kit.records(template)[seq - 1]
    assume(record.get(field) != value)
    record[field] = value
    if raw:
        text = json.dumps(value)  # any JSON text at all, NaN included
    else:
        try:
            text = canonical_json(record)
        except AuditError:
            text = json.dumps(record)
    start, end, _ = lines[seq - 1]
    lines[seq - 1] = (start, end, text)
    conn = sqlite3.connect(template)
    runs = list(conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"))
    conn.close()
    # the edited line under the index, or past it (the index stops just before it)
    events = kit.events(template) if indexed else kit.events(template)[: seq - 1]
    report = verify_rows(
        meta=list(META_ROWS),
        lines=lines,
        events=events,
        runs=runs,
        position=kit.position(template),
        checkpoints=[],
    )
    assert "cannot be checked" not in str(report.problem)  # found by a check, not a crash
    if seq < HEAD or indexed:
        # The line itself may be self-consistent after rehashing; then its index row or the
        # next line's previous hash no longer matches.
        assert not report.ok
        assert (report.table, report.row) in {("log", seq), ("events", seq),
                                              ("log", seq + 1)}, str(report)
    elif not report.ok:
        # A rehashed last event past the index is the tail rewrite only a checkpoint can
        # catch; when it is caught here it is at that line or in the index's other tables.
        assert report.table in {"log", "runs", "log_position"}, str(report)


def test_a_row_of_the_wrong_shape_is_reported_not_raised(template: Path, kit: Any) -> None:
    report = verify_rows(
        meta=list(META_ROWS),
        lines=kit.segment(template),
        events=kit.events(template),
        runs=[("a", "agent")],  # a store handing back a truncated row
        position=kit.position(template),
        checkpoints=[],
    )
    assert (report.ok, report.table, report.row) == (False, "runs", "a")
    assert "cannot be checked" in str(report.problem)


def test_a_log_written_with_orjson_verifies_with_the_reference_encoder_and_back(
        tmp_path: Path, kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from callgate.audit import _chain

    assert _chain._orjson is not None
    written = {}
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(_chain, "_orjson", None)
        path = tmp_path / f"{fast}.db"
        with AuditStore.open(path) as store:
            kit.start(store, "r")
            call = kit.make_call("r", 1).model_copy(update={"parameters": {
                "url": "https://example.org/é?q=1", "n": [1, 2.5, 1e-05, 2**70, None, True],
                "ctl": "\x00\x1f\u2028"}})
            store.record_decision("r", call, kit.allow(call))
            store.record_system("r", "note", {"small": 1e-7, "big": 1e16, "nan": float("nan")})
            store.end_run("r")
        written[fast] = path
        monkeypatch.undo()
    for path in written.values():  # each verified on both paths
        assert verify_file(path).ok
        monkeypatch.setattr(_chain, "_orjson", None)
        assert verify_file(path).ok
        monkeypatch.undo()
    # (read as bytes: U+2028 is a line end to str.splitlines, not to the segment)
    payloads = [[line[line.find(b'"payload":'):line.find(b',"prev":')].decode()
                 for line in Path(f"{p}.log").read_bytes().split(b"\n")[:-1]]
                for p in written.values()]
    assert payloads[0] == payloads[1] and len(payloads[0]) == 4  # the same text either way
    assert '"n":[1,2.5,1e-05,1180591620717411303424,null,true]' in payloads[0][1]

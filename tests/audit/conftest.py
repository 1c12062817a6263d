"""Audit test fixtures: a populated log, and an attacker who can write the SQLite file directly."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from callgate import Decision, Reason, TaintLabel, ToolCall, ToolResult
from callgate._text import lines_of
from callgate.audit import AuditStore
from callgate.audit._chain import (
    EVENT_COLUMNS,
    GENESIS_HASH,
    RUN_COLUMNS,
    event_row,
    run_row,
    seal,
    segment_line,
)
from callgate.audit._schema import DDL

#: The files a log has beside it by default: segment, signing key, public key, anchor.
SIDECARS = (".log", ".key", ".key.pub", ".anchor")


def make_call(run_id: str, n: int, *, tool: str = "fetch", taint: tuple[str, ...] = ()) -> ToolCall:
    return ToolCall(
        tool=tool,
        tool_class="http",
        action="get",
        parameters={"url": f"https://example.org/{n}", "n": n},
        taint=tuple(TaintLabel(source=s, origin=f"o{n}") for s in taint),
        id=f"{run_id}-c{n}",
        run_id=run_id,
        sequence=n,
    )


def allow(call: ToolCall) -> Decision:
    return Decision(
        verdict="allow", reasons=(Reason(id="r1", check="rules", message="ok"),), call_id=call.id
    )


def deny(call: ToolCall) -> Decision:
    return Decision(
        verdict="deny", reasons=(Reason(id="r9", check="taint", message="web"),), call_id=call.id
    )


def start(store: AuditStore, run_id: str, principal: str = "agent") -> None:
    store.start_run(
        run_id,
        principal=principal,
        policy_name="research",
        manifest_hash="m" * 8,
        config={"preset": "safe-research", "limits": [1, 2.5]},
    )


def populate(store: AuditStore) -> None:
    """Two interleaved runs with every kind of event; run "b" is left open."""
    start(store, "a")
    start(store, "b", principal="other")
    c1 = make_call("a", 1, taint=("web", "rag"))
    store.record_decision("a", c1, allow(c1))
    store.record_result(
        "a",
        ToolResult(
            call_id=c1.id, status="ok", output={"body": "é ü"}, taint=(TaintLabel(source="web"),)
        ),
    )
    c2 = make_call("b", 2, tool="send")
    store.record_decision("b", c2, deny(c2))
    store.record_system("a", "quarantine", {"rule": "web-then-shell", "events": [1, 2]})
    c3 = make_call("a", 3)
    store.record_decision("a", c3, allow(c3))
    store.end_run("a")
    c4 = make_call("b", 4)
    store.record_decision("b", c4, allow(c4))


class Kit:
    """Helpers for audit tests; the attacker part has write access to the file and bypasses
    the store and its triggers."""

    make_call = staticmethod(make_call)
    allow = staticmethod(allow)
    deny = staticmethod(deny)
    start = staticmethod(start)
    populate = staticmethod(populate)

    @staticmethod
    @contextmanager
    def copy(template: Path) -> Iterator[Path]:
        """A private copy of ``template`` (usable inside a hypothesis example)."""
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "audit.db"
            shutil.copyfile(template, target)
            for suffix in SIDECARS:
                source = Path(f"{template}{suffix}")
                if source.exists():
                    shutil.copyfile(source, f"{target}{suffix}")
            yield target

    @contextmanager
    def connect(self, path: Path) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            for name in (
                "events_no_update",
                "events_no_delete",
                "checkpoints_no_update",
                "checkpoints_no_delete",
            ):
                conn.execute(f"DROP TRIGGER IF EXISTS {name}")
            yield conn
        finally:
            # Put the triggers back exactly as they were so only the data differs.
            for sql in DDL:
                if sql.startswith("CREATE TRIGGER"):
                    conn.execute(sql)
            conn.close()

    def execute(self, path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
        with self.connect(path) as conn:
            conn.execute(sql, params)

    def events(self, path: Path) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path)
        try:
            return list(conn.execute(f"SELECT {', '.join(EVENT_COLUMNS)} FROM events ORDER BY seq"))
        finally:
            conn.close()

    def rewrite(self, path: Path, records: list[dict[str, Any]]) -> None:
        """Replace the whole chain (segment and index) with a consistent one built from
        ``records``: what an attacker with write access to every file can do."""
        prev = GENESIS_HASH
        rows: list[tuple[Any, ...]] = []
        starts: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}
        ends: dict[str, dict[str, Any]] = {}
        lines: list[bytes] = []
        offset = 0
        for seq, original in enumerate(records, start=1):
            record = dict(original, seq=seq, prev=prev)
            text, digest = seal(record)
            line = segment_line(text, digest)
            rows.append(event_row(record, digest, offset, len(line)))
            lines.append(line)
            offset += len(line)
            prev = digest
            run = record["run_id"]
            counts[run] = counts.get(run, 0) + 1
            if record["kind"] == "run-start":
                starts[run] = record
            if record["kind"] == "run-end":
                ends[run] = record
        Path(f"{path}.log").write_bytes(b"".join(lines))
        with self.connect(path) as conn:
            conn.execute("DELETE FROM events")
            conn.execute("DELETE FROM runs")
            marks = ", ".join("?" * len(EVENT_COLUMNS))
            conn.executemany(f"INSERT INTO events VALUES ({marks})", rows)
            for run, record in starts.items():
                row = run_row(record, counts[run], ends.get(run))
                conn.execute(f"INSERT INTO runs VALUES ({', '.join('?' * len(RUN_COLUMNS))})", row)
            conn.execute("UPDATE log_position SET seq = ?, offset = ?, hash = ?",
                         (len(rows), offset, prev))

    def lines(self, path: Path) -> list[str]:
        """The segment's lines (each a record's hash and text), in order."""
        return lines_of(Path(f"{path}.log").read_text(encoding="utf-8"))

    def write_lines(self, path: Path, lines: list[str]) -> None:
        """Replace the segment's lines (the index is left as it is)."""
        Path(f"{path}.log").write_text("".join(f"{line}\n" for line in lines),
                                       encoding="utf-8")

    def records(self, path: Path) -> list[dict[str, Any]]:
        return [json.loads(line.partition(" ")[2]) for line in self.lines(path)]

    @staticmethod
    def line(record: dict[str, Any]) -> str:
        """The segment's line for ``record`` (its hash, a space, its canonical JSON)."""
        text, digest = seal(record)
        return f"{digest} {text}"

    def segment(self, path: Path) -> list[tuple[int, int, str]]:
        """The segment's lines as ``verify_rows`` takes them: (start, end, text)."""
        out, at = [], 0
        for raw in Path(f"{path}.log").read_bytes().splitlines(keepends=True):
            out.append((at, at + len(raw), raw.rstrip(b"\n").decode("utf-8")))
            at += len(raw)
        return out

    def position(self, path: Path) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path)
        try:
            return list(conn.execute("SELECT id, seq, offset, hash FROM log_position"))
        finally:
            conn.close()


@pytest.fixture(scope="session")
def kit() -> Kit:
    return Kit()


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed, populated audit log that tests copy before changing."""
    path = tmp_path_factory.mktemp("template") / "audit.db"
    with AuditStore.open(path) as store:
        populate(store)
    return path

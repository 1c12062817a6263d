"""The SQLite schema of the audit log, and the checks that a file really is one.

Tables (column orders are those of :mod:`callgate.audit._chain` and :mod:`.verify`):

- ``meta``: the format marker (``format = callgate-audit``, ``version``);
- ``events``: the index of the chain: one row per event, ``seq`` is the primary key and the
  global order, every column derived from the event's record, the line of the segment
  (``<db>.log``) that ``log_offset`` and ``log_length`` locate;
- ``runs``: an index of runs derived from the chain (start, end, counts, config hash);
- ``checkpoints``: Ed25519-signed statements of (head sequence, head hash, runs, runs digest);
- ``log_position``: one row: how far into the segment the index reaches (events, bytes, the
  hash of the last indexed event).

The layout version (``meta`` row ``version``) is :data:`~callgate.audit._chain.LAYOUT_VERSION`;
docs/audit.md is its specification.

Triggers make ``events`` and ``checkpoints`` append-only for anyone using SQL normally; they
are a guard against accidents, not a security boundary (whoever can write the file can drop
them, which is why ``verify`` also compares the whole schema against this one).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Final

from callgate._errors import AuditError
from callgate.audit._chain import GENESIS_HASH, META_ROWS, RUN_COLUMNS
from callgate.audit._verify import CHECKPOINT_COLUMNS

RUN_ORDER: Final = RUN_COLUMNS
CHECKPOINT_ORDER: Final = CHECKPOINT_COLUMNS


def _append_only(table: str) -> tuple[str, str]:
    message = f"callgate audit {table} are append-only"
    return (
        f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}"
        f" BEGIN SELECT RAISE(ABORT, '{message}'); END",
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}"
        f" BEGIN SELECT RAISE(ABORT, '{message}'); END",
    )


#: Statements that create an empty audit log.
DDL: Final[tuple[str, ...]] = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE events ("
    " seq INTEGER PRIMARY KEY, id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " run_seq INTEGER NOT NULL, kind TEXT NOT NULL, timestamp TEXT NOT NULL,"
    " tool TEXT, tool_class TEXT, action TEXT, verdict TEXT, call_id TEXT, status TEXT,"
    " taint TEXT NOT NULL, log_offset INTEGER NOT NULL, log_length INTEGER NOT NULL,"
    " prev_hash TEXT NOT NULL, hash TEXT NOT NULL)",
    "CREATE INDEX events_by_run ON events (run_id, run_seq)",
    "CREATE TABLE runs ("
    " run_id TEXT PRIMARY KEY, principal TEXT NOT NULL, policy_name TEXT NOT NULL,"
    " manifest_hash TEXT NOT NULL, config_hash TEXT NOT NULL, started_at TEXT NOT NULL,"
    " start_seq INTEGER NOT NULL, ended_at TEXT, end_seq INTEGER, event_count INTEGER NOT NULL)",
    "CREATE TABLE checkpoints ("
    " id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, head_hash TEXT NOT NULL,"
    " runs INTEGER NOT NULL, runs_digest TEXT NOT NULL,"
    " created_at TEXT NOT NULL, key_id TEXT NOT NULL, signature TEXT NOT NULL)",
    "CREATE TABLE log_position ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL, offset INTEGER NOT NULL,"
    " hash TEXT NOT NULL)",
    *_append_only("events"),
    *_append_only("checkpoints"),
)

_MASTER: Final = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"


def meta_inserts() -> list[tuple[str, tuple[Any, ...]]]:
    """The statements that write the format marker and the empty index's position."""
    return [*(("INSERT INTO meta (key, value) VALUES (?, ?)", row) for row in META_ROWS),
            ("INSERT INTO log_position (id, seq, offset, hash) VALUES (1, ?, ?, ?)",
             (0, 0, GENESIS_HASH))]


def is_empty(conn: sqlite3.Connection) -> bool:
    """True when the database has no schema at all (a new file)."""
    count: int = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    return count == 0


def check_is_audit_log(conn: sqlite3.Connection, path: str) -> None:
    """Raise AuditError unless ``conn`` holds a callgate audit log of this version."""
    try:
        has_meta = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()[0]
        rows = dict(conn.execute("SELECT key, value FROM meta")) if has_meta else {}
    except sqlite3.DatabaseError as exc:
        raise AuditError(f"{path} is unreadable or corrupt: {exc}") from exc
    marker = dict(META_ROWS)
    if rows.get("format") != marker["format"]:
        raise AuditError(f"{path} is a SQLite database but not a callgate audit log")
    if rows.get("version") != marker["version"]:
        raise AuditError(
            f"{path} is a callgate audit log of version {rows.get('version')!r};"
            f" this callgate reads version {marker['version']}"
        )


@functools.cache
def expected_master() -> tuple[tuple[Any, ...], ...]:
    """The ``sqlite_master`` rows of a freshly created log (computed once, in memory)."""
    conn = sqlite3.connect(":memory:")
    try:
        for sql in DDL:
            conn.execute(sql)
        return tuple(tuple(row) for row in conn.execute(_MASTER))
    finally:
        conn.close()


def schema_problem(conn: sqlite3.Connection) -> tuple[str, str] | None:
    """``(object name, problem)`` when the file's schema differs from the audit schema."""
    found = {row[1]: tuple(row) for row in conn.execute(_MASTER)}
    for row in expected_master():
        have = found.pop(row[1], None)
        if have is None:
            return row[1], f"schema object {row[1]!r} is missing"
        if have != row:
            return row[1], f"schema object {row[1]!r} was altered"
    for name in found:
        return name, f"unexpected schema object {name!r}"
    return None


def parse_record(text: str) -> dict[str, Any]:
    """The envelope stored in an event's ``record`` column."""
    record = json.loads(text)
    if not isinstance(record, dict):
        raise TypeError("record is not a JSON object")
    return record

"""The files of an audit log: the SQLite database, its default neighbours, and ``verify_file``.

By default a log at ``audit.db`` has, next to it:

- ``audit.db.key``: the checkpoint signing key (PEM, mode 0600, created on first use);
- ``audit.db.key.pub``: its public key (PEM), to copy wherever logs are verified;
- ``audit.db.log``: the segment, every event's record one line each (the log's truth; the
  database indexes it);
- ``audit.db.anchor``: the latest signed checkpoint, outside the database (and
  ``audit.db.anchor.lock``, which writers and verifiers ``flock``).

Each path can be set explicitly (``AuditStore.open``, ``verify_file``, the CLI options).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from callgate._errors import AuditError
from callgate.audit import _schema as schema
from callgate.audit._anchor import locked, read_anchor
from callgate.audit._chain import EVENT_COLUMNS
from callgate.audit._checkpoint import Checkpoint
from callgate.audit._keys import display, public_path_for, read_public_key
from callgate.audit._log import Segment, log_path_for
from callgate.audit._verify import VerifyReport, verify_rows

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
#: Bytes of the segment read at a time by ``verify_file``.
_READ_BYTES: Final = 1 << 22
#: What a line that is not UTF-8 is handed to the verifier as (no record parses from it).
_NOT_TEXT: Final = "<line is not UTF-8 text>"


def default_key_path(db: str | os.PathLike[str]) -> Path:
    """The signing key of the log at ``db`` unless configured: ``<db>.key``."""
    return Path(os.fspath(db) + ".key")


def default_anchor_path(db: str | os.PathLike[str]) -> Path:
    """The anchor of the log at ``db`` unless configured: ``<db>.anchor``."""
    return Path(os.fspath(db) + ".anchor")


def check_file(path: str) -> None:
    """Reject files that are plainly not SQLite before sqlite3 gets a chance to be vague."""
    target = Path(path)
    if not target.exists():
        return
    try:
        with target.open("rb") as handle:
            header = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise AuditError(f"cannot read audit log {display(path)}: {exc}") from exc
    if header and header != _SQLITE_MAGIC:
        raise AuditError(f"{display(path)} is not a callgate audit log (not a SQLite database)")


def connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection to the database at ``path`` (any bytes in the path; autocommit mode)."""
    check_file(path)
    # as_uri percent-encodes the path's bytes, so a name that is not UTF-8 opens too.
    target = Path(path).resolve().as_uri() + ("?mode=ro" if read_only else "")
    try:
        return sqlite3.connect(target, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise AuditError(f"cannot open audit log {display(path)}: {exc}") from exc


def _snapshot(conn: sqlite3.Connection, where: str) -> None:
    conn.execute("BEGIN")  # one snapshot for every table, taken by the first read
    schema.check_is_audit_log(conn, where)


def verify_file(
    path: str | os.PathLike[str],
    *,
    public_key: bytes | None = None,
    anchor: Checkpoint | None = None,
    anchor_path: str | os.PathLike[str] | None = None,
    require_anchor: bool = True,
) -> VerifyReport:
    """Verify the audit log at ``path`` and its segment ``<path>.log`` (read-only; works while
    writers append).

    The anchor is ``anchor`` when given, else read from ``anchor_path`` (default
    ``<path>.anchor``); a missing anchor fails the check unless ``require_anchor`` is False.
    Signatures are checked with ``public_key``, else with ``<path>.key.pub`` when it exists.
    """
    where = os.fspath(path)
    if not Path(where).exists():
        raise AuditError(f"no audit log at {display(where)}")
    anchor_file = Path(anchor_path) if anchor_path is not None else default_anchor_path(where)
    if public_key is None and public_path_for(default_key_path(where)).exists():
        public_key = read_public_key(public_path_for(default_key_path(where)))
    conn = connect(where, read_only=True)
    segment: Segment | None = None
    try:
        with locked(anchor_file, exclusive=False):
            # The anchor and the snapshot are taken together: a writer's checkpoint commit and
            # its anchor update happen under the exclusive lock.
            if anchor is None:
                anchor = read_anchor(anchor_file)
            _snapshot(conn, where)
            # After the index's snapshot: the segment holds at least what it indexes.
            segment = _segment_of(where)
            size = 0
            if segment is not None:
                with segment.locked(exclusive=False):
                    size = segment.size()
        report = _verify_snapshot(conn, segment, size, public_key, anchor)
    except sqlite3.Error as exc:
        raise AuditError(f"cannot read audit log {display(where)}: {exc}") from exc
    finally:
        conn.close()
        if segment is not None:
            segment.close()
    if report.ok and anchor is None and require_anchor:
        return VerifyReport(
            False, report.checked,
            f"no anchor at {display(anchor_file)}: the latest checkpoint kept outside the log"
            " is missing (deleted, or checkpoints were turned off for this log)",
            "checkpoints", "anchor", None, report.signatures,
        )
    return report


def _segment_of(where: str) -> Segment | None:
    """The log's segment, or None when there is none (a log no writer has appended to)."""
    try:
        return Segment(log_path_for(where), read_only=True)
    except AuditError:
        if log_path_for(where).exists():
            raise
        return None


def _lines(segment: Segment | None, size: int) -> Iterator[tuple[int, int, str]]:
    """The segment's complete lines in its first ``size`` bytes, read a chunk at a time (a
    torn tail, an append never acknowledged, is left out). A line that is not UTF-8 comes as
    text that is no record, which the verifier refuses at that line."""
    if segment is None:
        return
    at, carry = 0, b""
    while at < size:
        chunk = segment.read(at, min(size, at + _READ_BYTES))
        if not chunk:
            return
        data, base = carry + chunk, at - len(carry)
        at += len(chunk)
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            try:
                text = data[start:end].decode("utf-8")
            except UnicodeDecodeError:
                text = _NOT_TEXT
            yield base + start, base + end + 1, text
            start = end + 1
        carry = data[start:]


def _verify_snapshot(
    conn: sqlite3.Connection, segment: Segment | None, size: int, public_key: bytes | None,
    anchor: Checkpoint | None
) -> VerifyReport:
    problem = schema.schema_problem(conn)
    if problem is not None:
        return VerifyReport(False, 0, problem[1], "sqlite_master", problem[0])
    order = ", ".join(EVENT_COLUMNS)
    return verify_rows(
        meta=conn.execute("SELECT key, value FROM meta"),
        lines=_lines(segment, size),
        events=conn.execute(f"SELECT {order} FROM events ORDER BY seq"),
        runs=conn.execute(f"SELECT {', '.join(schema.RUN_ORDER)} FROM runs"),
        position=conn.execute("SELECT id, seq, offset, hash FROM log_position"),
        checkpoints=conn.execute(
            f"SELECT {', '.join(schema.CHECKPOINT_ORDER)} FROM checkpoints ORDER BY id"
        ),
        public_key=public_key,
        anchor=anchor,
    )

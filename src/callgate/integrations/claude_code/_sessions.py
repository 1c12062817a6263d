"""Claude Code sessions kept across hook processes: one run per ``session_id``, in SQLite.

Each session row holds its run id, the policy it started under (the text itself, in the
``policies`` table, so an edited policy file applies to the next session and never changes one
that is running), the calls awaiting their results (``tool_use_id`` → call id), the subagents'
event ranges, and the kernel's snapshot (``Kernel.suspend``) after the session's latest event,
with a version number. A process that holds the session in memory at the row's version goes on
from memory; any other restores it from the one row: nothing is replayed, so the cost of an
event does not grow with the session's length.

Snapshots are signed (HMAC-SHA256) with a key kept beside the database (mode 0600): a row
changed by anyone but callgate is refused, with how to recover, rather than trusted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from callgate._errors import CallgateError

__all__ = ["SessionRow", "SessionStore", "StateError"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS policies (sha256 TEXT PRIMARY KEY, source TEXT NOT NULL,
                                     text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    policy_sha256 TEXT NOT NULL REFERENCES policies(sha256),
    working_dir TEXT NOT NULL,
    started REAL NOT NULL,
    updated REAL NOT NULL,
    ended INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL,
    pending TEXT NOT NULL,
    agents TEXT NOT NULL,
    snapshot BLOB,
    mac BLOB NOT NULL
);
"""


class StateError(CallgateError):
    """The session state cannot be read or trusted; the message says how to recover."""


@dataclass(slots=True)
class SessionRow:
    """One session as stored."""

    session_id: str
    run_id: str
    policy_sha256: str
    working_dir: str
    version: int = 0
    ended: bool = False
    pending: dict[str, str] = field(default_factory=dict)
    agents: dict[str, list[int]] = field(default_factory=dict)
    snapshot: bytes | None = None


class SessionStore:
    """The sessions of one state directory (``.callgate/`` of a project, by default)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "sessions.db"
        self._recover = (f"remove {self.path} to start the sessions over (the audit log "
                         f"{self.state_dir / 'audit.db'} is kept, and verifies on its own)")
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._key = _key(self.state_dir / "state.key")
            self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"the session state {self.path} cannot be opened ({exc}); "
                             f"{self._recover}") from exc

    def policy_text(self, sha256: str) -> str:
        """The text of a policy a session started under."""
        row = self._one("SELECT text FROM policies WHERE sha256 = ?", (sha256,))
        if row is None:
            raise StateError(f"the policy {sha256[:12]} of a session is missing; "
                             f"{self._recover}")
        return str(row[0])

    def keep_policy(self, sha256: str, source: str, text: str) -> None:
        with self._write():
            self._db.execute("INSERT OR IGNORE INTO policies VALUES (?, ?, ?)",
                             (sha256, source, text))

    def version(self, session_id: str) -> int | None:
        """The stored version of a session, or None when it is unknown."""
        row = self._one("SELECT version FROM sessions WHERE session_id = ?", (session_id,))
        return None if row is None else int(row[0])

    def load(self, session_id: str) -> SessionRow | None:
        """The stored session, checked against its signature; None when it is unknown."""
        row = self._one("SELECT session_id, run_id, policy_sha256, working_dir, version, ended,"
                        " pending, agents, snapshot, mac FROM sessions WHERE session_id = ?",
                        (session_id,))
        if row is None:
            return None
        try:
            found = SessionRow(str(row[0]), str(row[1]), str(row[2]), str(row[3]), int(row[4]),
                               bool(row[5]), json.loads(row[6]), json.loads(row[7]),
                               None if row[8] is None else bytes(row[8]))
            good = hmac.compare_digest(bytes(row[9]), self._mac(found))
        except (TypeError, ValueError) as exc:
            raise StateError(f"the state of session {session_id} is unreadable ({exc}); "
                             f"{self._recover}") from exc
        if not good:
            raise StateError(f"the state of session {session_id} was changed outside callgate "
                             f"(its signature does not match); {self._recover}")
        return found

    def save(self, row: SessionRow) -> None:
        """Store ``row`` as its next version (``row.version`` is raised by one)."""
        row.version += 1
        with self._write():
            self._db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET updated = excluded.updated, "
                "ended = excluded.ended, version = excluded.version, "
                "pending = excluded.pending, agents = excluded.agents, "
                "snapshot = excluded.snapshot, mac = excluded.mac",
                (row.session_id, row.run_id, row.policy_sha256, row.working_dir, time.time(),
                 time.time(), int(row.ended), row.version, json.dumps(row.pending),
                 json.dumps(row.agents), row.snapshot, self._mac(row)))

    def sessions(self) -> list[tuple[str, str, bool]]:
        """(session id, run id, ended) of every stored session."""
        return [(str(r[0]), str(r[1]), bool(r[2])) for r in self._db.execute(
            "SELECT session_id, run_id, ended FROM sessions ORDER BY started")]

    def close(self) -> None:
        self._db.close()

    def _mac(self, row: SessionRow) -> bytes:
        fields = [row.session_id, row.run_id, row.policy_sha256, row.working_dir,
                  str(row.version), str(int(row.ended)), json.dumps(row.pending),
                  json.dumps(row.agents)]
        body = json.dumps(fields).encode() + b"\0" + (row.snapshot or b"")
        return hmac.new(self._key, body, hashlib.sha256).digest()

    def _one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        try:
            row = self._db.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise StateError(f"the session state {self.path} cannot be read ({exc}); "
                             f"{self._recover}") from exc
        return None if row is None else tuple(row)

    @contextmanager
    def _write(self) -> Iterator[None]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StateError(f"the session state {self.path} cannot be written ({exc}); "
                             f"{self._recover}") from exc


def _key(path: Path) -> bytes:
    """The signing key of the state directory, made on first use (mode 0600)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) != 32:
            raise StateError(f"the state key {path} is damaged; remove it and "
                             f"{path.parent / 'sessions.db'} to start the sessions over") from None
        return key
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as out:
        out.write(key)
    return key

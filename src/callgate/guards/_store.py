"""Fingerprints of content the guards must recognise later, optionally kept in SQLite.

A fingerprint is a keyed set of hashes of every ``window``-character slice of a text (whitespace
removed, so a key split over lines still matches), or the hash of the whole text when it is
shorter than a window. A later string matches when any of its slices hashes to a stored value:
a few characters of a secret are enough, and re-wrapping or cutting it up does not hide it. The
texts themselves are never stored, only 64-bit BLAKE2b digests, so the state file is not a
second copy of the secrets.

With a ``path`` the store is a small SQLite file that survives the run: a secret read in one
run is recognised when a later run tries to send it out.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from callgate._errors import CallgateError

log = logging.getLogger("callgate.guards")

#: Characters scanned per call; beyond this a call is judged on its first part (see docs).
MAX_SCAN_CHARS = 1 << 20
#: Shortest value remembered on its own (shorter values match too much ordinary text).
MIN_VALUE_CHARS = 6

_SPACE = re.compile(r"\s+")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fingerprints (
    kind TEXT NOT NULL,
    length INTEGER NOT NULL,
    digest BLOB NOT NULL,
    origin TEXT NOT NULL,
    PRIMARY KEY (kind, length, digest)
)
"""


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def compact(text: str) -> str:
    """``text`` without whitespace: the form both stored and compared."""
    return _SPACE.sub("", text)


class FingerprintStore:
    """Fingerprints by kind (``secret``, ``planted`` …); in memory, or in a SQLite file."""

    def __init__(self, path: str | None = None, *, window: int = 12) -> None:
        if window < MIN_VALUE_CHARS:
            raise CallgateError(f"fingerprint window must be at least {MIN_VALUE_CHARS}")
        self.window = window
        self.path = path
        self.broken: str | None = None
        self._lock = threading.Lock()
        self._hashes: dict[str, dict[int, dict[bytes, str]]] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = self._open(path)

    def _open(self, path: str) -> sqlite3.Connection:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            rows = db.execute("SELECT kind, length, digest, origin FROM fingerprints").fetchall()
        except (sqlite3.Error, OSError) as exc:
            raise CallgateError(f"guard state {path} cannot be opened: {exc}") from exc
        for kind, length, digest, origin in rows:
            self._hashes.setdefault(kind, {}).setdefault(int(length), {})[bytes(digest)] = origin
        return db

    def close(self) -> None:
        """Close the SQLite file, if any."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def count(self, kind: str) -> int:
        """How many digests of ``kind`` are stored."""
        return sum(len(d) for d in self._hashes.get(kind, {}).values())

    def add(self, kind: str, text: str, origin: str) -> int:
        """Remember ``text`` under ``kind``; returns how many new digests were stored."""
        body = compact(text)
        if len(body) < MIN_VALUE_CHARS:
            return 0
        length = min(len(body), self.window)
        pieces = {body[i:i + length] for i in range(len(body) - length + 1)}
        table = self._hashes.setdefault(kind, {}).setdefault(length, {})
        fresh = [(d, origin) for d in map(_digest, pieces) if d not in table]
        with self._lock:
            for digest, why in fresh:
                table[digest] = why
            self._persist(kind, length, fresh)
        return len(fresh)

    def _persist(self, kind: str, length: int, rows: list[tuple[bytes, str]]) -> None:
        if self._db is None or not rows:
            return
        try:
            self._db.executemany(
                "INSERT OR IGNORE INTO fingerprints (kind, length, digest, origin) "
                "VALUES (?, ?, ?, ?)", [(kind, length, d, o) for d, o in rows])
        except sqlite3.Error as exc:
            # Guards observe after a call ran and must not raise there; a store that cannot
            # persist makes every later check deny instead (fail closed).
            self.broken = f"guard state {self.path} cannot be written: {exc}"
            log.error("%s", self.broken)

    def find(self, kind: str, texts: Iterable[str]) -> str | None:
        """The origin of the first stored fingerprint of ``kind`` found in ``texts``, or None."""
        by_length = self._hashes.get(kind)
        if not by_length:
            return None
        budget = MAX_SCAN_CHARS
        for text in texts:
            body = compact(text)[:budget]
            budget -= len(body)
            for length, table in by_length.items():
                for i in range(len(body) - length + 1):
                    origin = table.get(_digest(body[i:i + length]))
                    if origin is not None:
                        return origin
            if budget <= 0:
                break
        return None

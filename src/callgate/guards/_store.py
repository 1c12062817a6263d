"""Fingerprints of content the guards must recognise later, optionally kept in SQLite.

A fingerprint is the set of hashes of every ``window``-byte slice of a text's UTF-8 form
(whitespace removed, so a key split over lines still matches), or the hash of the whole text
when it is shorter than a window. A later string matches when any of its slices hashes to a
stored value: a few characters of a secret are enough, and re-wrapping or cutting it up does
not hide it. The text is also remembered reversed, ROT13-ed and both, so content turned before
it is encoded (``base64(rev(x))``) matches once the encoding is undone (see ``_decode``).

Each slice is stored as a 64-bit BLAKE2b digest plus a CRC-32 probe: a scan computes the cheap
probe for every slice and the digest only where a probe hits (about half a second per megabyte
of parameters per window length). The texts themselves are never stored, so the state file is
not a second copy of the secrets (a short, guessable value can of course be guessed from its
digest, as from any hash).

With a ``path`` the store is a small SQLite file that survives the run: a secret read in one
run is recognised when a later run tries to send it out. ``open_fingerprints`` (``_open``) opens
the store a ``guard_state`` names: that file, or a PostgreSQL table shared by several processes
for a ``postgresql://`` URL (``_pgstore``).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from callgate._errors import CallgateError
from callgate.guards._decode import rot13

if TYPE_CHECKING:  # SQLite is loaded only for a store kept in a file
    import sqlite3

log = logging.getLogger("callgate.guards")

#: Characters scanned per call, decoded forms included; the guards deny a call whose forms
#: are longer (``guard.secrets.budget``, ``guard.relay.budget``) rather than scan part of it.
MAX_SCAN_CHARS = 1 << 24
#: Shortest value remembered on its own (shorter values match too much ordinary text).
MIN_VALUE_CHARS = 6

_SPACE = re.compile(r"\s+")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fingerprints (
    kind TEXT NOT NULL,
    length INTEGER NOT NULL,
    digest BLOB NOT NULL,
    probe INTEGER NOT NULL,
    origin TEXT NOT NULL,
    PRIMARY KEY (kind, length, digest)
)
"""


def _digest(piece: bytes | memoryview) -> bytes:
    return hashlib.blake2b(piece, digest_size=8).digest()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def compact(text: str) -> str:
    """``text`` without whitespace: the form both stored and compared."""
    return _SPACE.sub("", text)


def _turned(text: str) -> tuple[str, ...]:
    """``text``, reversed, ROT13-ed, and both."""
    rotated = rot13(text)
    return (text, text[::-1], rotated, rotated[::-1])


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
        self._probes: dict[str, dict[int, set[int]]] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = self._open(path)

    def _open(self, path: str) -> sqlite3.Connection:
        import sqlite3

        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            rows = db.execute(
                "SELECT kind, length, digest, probe, origin FROM fingerprints").fetchall()
        except (sqlite3.Error, OSError) as exc:
            raise CallgateError(f"guard state {path} cannot be opened: {exc}") from exc
        for kind, length, digest, probe, origin in rows:
            self._hashes.setdefault(kind, {}).setdefault(int(length), {})[bytes(digest)] = origin
            self._probes.setdefault(kind, {}).setdefault(int(length), set()).add(int(probe))
        return db

    def refresh(self) -> str | None:
        """Catch up with what other processes stored (nothing to do for a file or memory);
        the reason every check must deny now, else None. The guards call it first."""
        return self.broken

    def close(self) -> None:
        """Close the SQLite file, if any."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def holds(self, kind: str) -> bool:
        """Whether any fingerprint of ``kind`` is stored (else ``find`` finds nothing)."""
        return bool(self._hashes.get(kind))

    def count(self, kind: str) -> int:
        """How many digests of ``kind`` are stored."""
        return sum(len(d) for d in self._hashes.get(kind, {}).values())

    def export(self) -> list[list[Any]]:
        """Every fingerprint as JSON rows, sorted: ``["h", kind, length, digest_hex, origin]``
        for a digest and ``["p", kind, length, probe]`` for a probe (what replay seeds a
        fresh store with, through ``load``)."""
        with self._lock:
            rows: list[list[Any]] = [["h", kind, length, digest.hex(), origin]
                                     for kind, by_length in self._hashes.items()
                                     for length, table in by_length.items()
                                     for digest, origin in table.items()]
            rows.extend(["p", kind, length, probe]
                        for kind, by_length in self._probes.items()
                        for length, probes in by_length.items() for probe in probes)
        return sorted(rows, key=lambda row: [str(part) for part in row])

    def load(self, rows: Iterable[Sequence[Any]]) -> None:
        """Add the rows ``export`` gave (in memory only). Raises ``CallgateError`` on a row
        that is not one."""
        with self._lock:
            for row in rows:
                try:
                    if row[0] == "h":
                        self._hashes.setdefault(str(row[1]), {}).setdefault(
                            int(row[2]), {})[bytes.fromhex(str(row[3]))] = str(row[4])
                    elif row[0] == "p":
                        self._probes.setdefault(str(row[1]), {}).setdefault(
                            int(row[2]), set()).add(int(row[3]))
                    else:
                        raise ValueError(f"unknown row tag {row[0]!r}")
                except (IndexError, TypeError, ValueError) as exc:
                    raise CallgateError(f"not a fingerprint row: {exc}") from exc

    def add(self, kind: str, text: str, origin: str) -> int:
        """Remember ``text`` under ``kind``, also reversed, ROT13-ed and both (the forms an
        agent hides content in before encoding it); returns how many new digests were stored."""
        plain = compact(text)
        bodies = [_bytes(t) for t in _turned(plain)]
        if len(bodies[0]) < MIN_VALUE_CHARS:
            return 0
        length = min(len(bodies[0]), self.window)
        pieces = {body[i:i + length] for body in bodies for i in range(len(body) - length + 1)}
        table = self._hashes.setdefault(kind, {}).setdefault(length, {})
        probes = self._probes.setdefault(kind, {}).setdefault(length, set())
        fresh = [(_digest(p), zlib.crc32(p), origin) for p in pieces]
        fresh = [row for row in fresh if row[0] not in table]
        with self._lock:
            for digest, probe, why in fresh:
                table[digest] = why
                probes.add(probe)
            self._persist(kind, length, fresh)
        return len(fresh)

    def _persist(self, kind: str, length: int, rows: list[tuple[bytes, int, str]]) -> None:
        if self._db is None or not rows:
            return
        import sqlite3

        try:
            self._db.execute("BEGIN")  # one transaction (one sync) per text, not per slice
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO fingerprints (kind, length, digest, probe, origin) "
                    "VALUES (?, ?, ?, ?, ?)", [(kind, length, d, p, o) for d, p, o in rows])
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
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
        probes = self._probes[kind]
        budget = MAX_SCAN_CHARS
        for text in texts:
            body = memoryview(_bytes(compact(text))[:budget])
            budget -= len(body)
            for length, table in by_length.items():
                hits = probes[length]
                for i in range(len(body) - length + 1):
                    piece = body[i:i + length]
                    if zlib.crc32(piece) in hits:
                        origin = table.get(_digest(piece))
                        if origin is not None:
                            return origin
            if budget <= 0:
                break
        return None


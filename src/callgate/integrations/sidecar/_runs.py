"""Runs of the sidecar: live kernels in memory, their state in SQLite beside the audit log.

Each run belongs to the key that started it and has one kernel, with an ``asyncio.Lock`` that
serialises the run's requests (different runs proceed concurrently). What a run accumulated
(``Kernel.suspend()``) is written to the state database when the run starts, every
``flush_interval`` seconds while it changes, when it ends and when the sidecar stops; a
restarted sidecar resumes each open run from its row the first time it is asked for it.

Every use of a run's kernel goes through ``Runs.decide_in`` (under the run's ``asyncio.Lock``);
with a shared store (``_shared.SharedRuns``) that is also where the run is locked across
processes and its latest state loaded and written.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from callgate.kernel import Kernel

__all__ = ["Cursor", "LiveRun", "RunEnded", "Runs", "StateDB", "StateStore"]

T = TypeVar("T")


class Cursor(Protocol):
    """What the state's queries need of a cursor (sqlite3's, or the PostgreSQL adaptor)."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    @property
    def rowcount(self) -> int: ...


class StateStore(Protocol):
    """A state database: SQLite (``StateDB``) or PostgreSQL (``_pgstate.PgStateDB``)."""

    def cursor(self) -> AbstractContextManager[Cursor]: ...

    def close(self) -> None: ...


class RunEnded(LookupError):  # noqa: N818 - a 404 value, as NotFound
    """The run ended (possibly through another sidecar) or is no longer stored."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, key_name TEXT NOT NULL, principal TEXT NOT NULL,
    snapshot BLOB, ended INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL, attempt INTEGER);
CREATE TABLE IF NOT EXISTS defaults (key_name TEXT PRIMARY KEY, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, key_name TEXT NOT NULL, principal TEXT NOT NULL,
    run_id TEXT NOT NULL, call_id TEXT NOT NULL, call_sha256 TEXT NOT NULL,
    policy_sha256 TEXT NOT NULL, call TEXT NOT NULL, reasons TEXT NOT NULL,
    created REAL NOT NULL, expires REAL NOT NULL, state TEXT NOT NULL,
    decided_by TEXT, decided_at REAL);
"""


class StateDB:
    """The sidecar's state database (runs, default runs, approvals); thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        if "attempt" not in columns:  # a state database of an earlier version
            self._db.execute("ALTER TABLE runs ADD COLUMN attempt INTEGER")
        self._lock = threading.Lock()

    @contextmanager
    def cursor(self) -> Iterator[sqlite3.Cursor]:
        """A cursor inside one transaction, under the database's lock."""
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


@dataclass(eq=False)
class LiveRun:
    """One run in memory: its kernel, owner and the lock that serialises its requests."""

    run_id: str
    key_name: str
    principal: str
    kernel: Kernel
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dirty: bool = False
    ended: bool = False
    #: the stored version this kernel's state is (a shared store: -1 when unknown)
    version: int = 0
    #: call ids of allowed gateway calls whose results are still to come, oldest first
    awaiting: deque[str] = field(default_factory=lambda: deque(maxlen=1024))


KernelFactory = Callable[[str, str, "bytes | None"], Kernel]
#: Runs kept in memory at once; the least recently used idle ones beyond are saved and dropped.
MAX_LIVE = 512
#: A system record in the audit chain (run id, kind, payload).
Recorder = Callable[[str, str, Mapping[str, Any]], None]
#: The last call number the audit log holds for a run (0 when none).
LastCall = Callable[[str], int]


def seq_of(kernel: Kernel) -> int:
    """Calls the kernel has numbered (the last call id's number)."""
    return int(kernel._seq)


def close_gap(kernel: Kernel, next_seq: int, record: Recorder | None) -> None:
    """A sidecar died (or lost its store) after the kernel began deciding and before the
    state was written: decisions may be in the audit log that the state lacks. Their effects
    are unknown, so the run is quarantined (read-only calls only) and the gap recorded; the
    call numbers go on from ``next_seq``, never reusing one the log holds."""
    kernel._seq = max(seq_of(kernel), next_seq - 1)
    reason = ("a sidecar stopped while deciding a call of this run, before its state was "
              "stored: the run's state may lack that decision's effects")
    kernel.run_state.enter_quarantine("state-gap", "sidecar.state-gap", reason)
    if record is not None:
        record(kernel.run_id, "state-gap", {"reason": reason, "next_call": seq_of(kernel) + 1})


class Runs:
    """The runs of one sidecar. ``make_kernel(run_id, key_name, snapshot)`` builds a kernel
    (a new run when ``snapshot`` is None). Called from the event loop only, except
    ``decide_in`` with a shared store."""

    #: whether other processes share the runs (``decide_in`` then blocks: run it on a thread)
    shared = False

    def __init__(self, db: StateStore, make_kernel: KernelFactory,
                 record: Recorder | None = None, last_call: LastCall | None = None) -> None:
        self._db = db
        self._make = make_kernel
        self._record = record
        self._last_call = last_call
        self._live: dict[str, LiveRun] = {}

    def start(self, key_name: str, principal: str, *, default: bool = False) -> LiveRun:
        """A new run owned by ``key_name``, persisted at once."""
        run_id = "run_" + uuid.uuid4().hex
        live = LiveRun(run_id, key_name, principal, self._make(run_id, key_name, None))
        self.save(live)
        self._remember(live)
        if default:
            with self._db.cursor() as cur:
                cur.execute("INSERT OR REPLACE INTO defaults VALUES (?, ?)", (key_name, run_id))
        return live

    def get(self, run_id: str, key_name: str) -> LiveRun | None:
        """The open run ``run_id`` if ``key_name`` owns it (resumed from its row after a
        restart), else None: another key's run is as unknown as a missing one."""
        live = self._live.get(run_id)
        if live is None:
            with self._db.cursor() as cur:
                row = cur.execute("SELECT key_name, principal, snapshot, attempt FROM runs "
                                  "WHERE run_id = ? AND ended = 0", (run_id,)).fetchone()
            if row is None or row[2] is None:
                return None
            live = LiveRun(run_id, row[0], row[1], self._make(run_id, row[0], row[2]))
            if row[3] is not None:  # decided after its last save, then the process died
                last = self._last_call(run_id) if self._last_call is not None else 0
                close_gap(live.kernel, max(int(row[3]) + 1, last) + 1, self._record)
                live.dirty = True
        self._remember(live)
        return live if live.key_name == key_name and not live.ended else None

    def default_for(self, key_name: str, principal: str) -> LiveRun:
        """The key's current default run, started when it has none or it ended."""
        with self._db.cursor() as cur:
            row = cur.execute("SELECT run_id FROM defaults WHERE key_name = ?",
                              (key_name,)).fetchone()
        live = self.get(row[0], key_name) if row is not None else None
        return live if live is not None else self.start(key_name, principal, default=True)

    def decide_in(self, live: LiveRun, work: Callable[[Kernel], T], *, end: bool = False,
                  write: bool = True) -> T:
        """``work(kernel)`` on the run's kernel (the caller holds ``live.lock``); with
        ``end``, the run is ended and forgotten afterwards, else its state marked changed
        (``write``)."""
        if live.ended:
            raise RunEnded(f"run {live.run_id} has ended")
        marked = False
        if write and not end and not live.dirty:
            # the first change since the last save leaves a mark first: a process that dies
            # before the next save is found out when the run is resumed (``close_gap``)
            with self._db.cursor() as cur:
                cur.execute("UPDATE runs SET attempt = ? WHERE run_id = ?",
                            (seq_of(live.kernel), live.run_id))
            marked = True
        try:
            result = work(live.kernel)
        except BaseException:
            if marked:  # the kernel refused the work unchanged (a result of no known call)
                with self._db.cursor() as cur:
                    cur.execute("UPDATE runs SET attempt = NULL WHERE run_id = ?",
                                (live.run_id,))
            raise
        if end:
            self.end(live)
        elif write:
            live.dirty = True
        return result

    def end(self, live: LiveRun) -> None:
        """Mark a run ended (its kernel has judged its obligations) and forget its state."""
        live.ended = True
        self.save(live)
        self._live.pop(live.run_id, None)

    def save(self, live: LiveRun) -> None:
        """Write the run's state now."""
        snapshot = None if live.ended else live.kernel.suspend()
        with self._db.cursor() as cur:
            cur.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, NULL)",
                        (live.run_id, live.key_name, live.principal, snapshot,
                         int(live.ended), time.time()))
        live.dirty = False

    def flush(self) -> int:
        """Write every run that changed since it was last written; returns how many."""
        changed = [live for live in self._live.values() if live.dirty and not live.lock.locked()]
        for live in changed:
            self.save(live)
        return len(changed)

    def save_all(self) -> None:
        """Write every live run (at shutdown)."""
        for live in list(self._live.values()):
            if not live.ended:
                self.save(live)

    def open_count(self, key_name: str | None = None) -> int:
        """Runs not ended (of ``key_name``), in memory or waiting in the database."""
        with self._db.cursor() as cur:
            if key_name is None:
                row = cur.execute("SELECT COUNT(*) FROM runs WHERE ended = 0").fetchone()
            else:
                row = cur.execute("SELECT COUNT(*) FROM runs WHERE ended = 0 AND "
                                  "key_name = ?", (key_name,)).fetchone()
        return int(row[0])

    def _remember(self, live: LiveRun) -> None:
        """Keep ``live`` in memory; past ``MAX_LIVE`` runs the least recently used idle ones
        are saved and let go (resumed from their rows when asked for again)."""
        self._live.pop(live.run_id, None)
        self._live[live.run_id] = live
        if len(self._live) <= MAX_LIVE:
            return
        for old in list(self._live.values()):
            if len(self._live) <= MAX_LIVE:
                return
            if old is live or old.lock.locked() or old.awaiting:
                continue
            if old.dirty:
                self.save(old)
            self._live.pop(old.run_id, None)

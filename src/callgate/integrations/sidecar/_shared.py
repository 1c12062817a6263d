"""Runs shared by several sidecars over one PostgreSQL: each decision of a run under a row lock.

A run's row holds its latest ``Kernel.suspend()`` snapshot, a version counter and the
attempt in progress. Every use of a run's kernel (``decide_in``), on one connection:

1. ``pg_advisory_lock`` on the run id: another sidecar deciding a call of the same run waits
   here (at most the store's lock timeout, then the call is denied); the lock is the
   session's, so a sidecar that dies releases it with its connection;
2. when the stored version is not the one this sidecar's kernel holds, the kernel is rebuilt
   from the stored snapshot (another sidecar moved the run on; a ``run-resumed`` record);
3. the attempt (the call number about to be used) is written and committed;
4. the kernel decides (its decision is in the audit log before anything executes);
5. the new snapshot and version are written, the attempt cleared, the lock released;

and only then does the caller answer. An attempt found still set in step 2 is a decision whose
sidecar died (or lost the store) between 3 and 5: its effects may be missing from the state,
so the run is quarantined and the gap recorded (``_runs.close_gap``).

So the decisions of one run are totally ordered across sidecars, and each sees the state
every earlier one left. A failure at any step (the store unreachable, a lock not obtained in
time, a write that fails) raises: the route answers a deny naming it, and this kernel is marked
stale so that its next use reloads the stored state.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from callgate.integrations.sidecar._pgstate import PgStateDB, SharedStateError
from callgate.integrations.sidecar._runs import (
    KernelFactory,
    LiveRun,
    RunEnded,
    Runs,
    T,
    close_gap,
    seq_of,
)
from callgate.kernel import Kernel

__all__ = ["SharedRuns"]

_STALE = -1


class SharedRuns(Runs):
    """The runs of a sidecar whose state is shared through ``db`` with other sidecars."""

    shared = True

    def __init__(self, db: PgStateDB, make_kernel: KernelFactory,
                 record: Callable[[str, str, Mapping[str, Any]], None]) -> None:
        super().__init__(db, make_kernel, record)
        self._pg = db

    def start(self, key_name: str, principal: str, *, default: bool = False) -> LiveRun:
        """A new run owned by ``key_name``, stored at version 1."""
        run_id = "run_" + uuid.uuid4().hex
        live = LiveRun(run_id, key_name, principal, self._make(run_id, key_name, None),
                       version=1)
        with self._pg.transaction() as cur:
            cur.execute("INSERT INTO runs (run_id, key_name, principal, snapshot, ended, "
                        "updated, version) VALUES (%s, %s, %s, %s, 0, %s, 1)",
                        (run_id, key_name, principal, live.kernel.suspend(), time.time()))
        self._remember(live)
        return live

    def get(self, run_id: str, key_name: str) -> LiveRun | None:
        """The open run if ``key_name`` owns it (built from its row the first time this
        sidecar sees it; whether another sidecar ended it is found at its next decision)."""
        live = self._live.get(run_id)
        if live is None:
            with self._pg.transaction() as cur:
                row = cur.execute("SELECT key_name, principal, snapshot, version FROM runs "
                                  "WHERE run_id = %s AND ended = 0", (run_id,)).fetchone()
            if row is None or row[2] is None or row[0] != key_name:
                return None
            live = LiveRun(run_id, row[0], row[1], self._make(run_id, row[0], bytes(row[2])),
                           version=int(row[3]))
            self._remember(live)
        return live if live.key_name == key_name and not live.ended else None

    def default_for(self, key_name: str, principal: str) -> LiveRun:
        """The key's default run: one across sidecars (chosen under an advisory lock on the
        key), started when it has none or it ended."""
        with self._pg.transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                        ("callgate-default-run:" + key_name,))
            row = cur.execute("SELECT d.run_id FROM defaults d JOIN runs r USING (run_id) "
                              "WHERE d.key_name = %s AND r.ended = 0", (key_name,)).fetchone()
            if row is None:
                run_id = self.start(key_name, principal).run_id
                cur.execute("INSERT INTO defaults VALUES (%s, %s) ON CONFLICT (key_name) DO "
                            "UPDATE SET run_id = EXCLUDED.run_id", (key_name, run_id))
            else:
                run_id = str(row[0])
        live = self.get(run_id, key_name)
        if live is None:
            raise RunEnded(f"the default run {run_id} of key {key_name!r} ended meanwhile")
        return live

    def decide_in(self, live: LiveRun, work: Callable[[Kernel], T], *, end: bool = False,
                  write: bool = True) -> T:
        """``work(kernel)`` with the run locked across sidecars and its latest state loaded;
        the new state written and committed before this returns. Blocks: call it on a thread.
        """
        try:
            with self._pg.connection() as conn:
                try:
                    return self._locked(conn, live, work, end=end, write=write)
                finally:
                    with contextlib.suppress(psycopg.Error):
                        if not conn.broken:
                            conn.execute("SELECT pg_advisory_unlock_all()")
        except BaseException:
            live.version = _STALE  # whatever the kernel did may not be what is stored
            raise

    def _locked(self, conn: psycopg.Connection[Any], live: LiveRun,
                work: Callable[[Kernel], T], *, end: bool, write: bool) -> T:
        run_id = live.run_id
        try:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (run_id,))
            row = conn.execute("SELECT version, snapshot, ended, attempt FROM runs WHERE "
                               "run_id = %s", (run_id,)).fetchone()
        except psycopg.Error as exc:
            raise SharedStateError(f"cannot lock run {run_id}: {exc}") from exc
        if row is None or row[2] or row[1] is None:
            live.ended = True
            self._live.pop(run_id, None)
            raise RunEnded(f"run {run_id} has ended")
        if int(row[0]) != live.version:
            live.kernel = self._make(run_id, live.key_name, bytes(row[1]))
            live.version = int(row[0])
        if row[3] is not None:  # the decision after ``attempt`` may be in the log: skip it
            close_gap(live.kernel, int(row[3]) + 2, self._record)
        try:  # the attempt, committed before the kernel decides: a crash after it is seen
            conn.execute("UPDATE runs SET attempt = %s WHERE run_id = %s",
                         (seq_of(live.kernel), run_id))
        except psycopg.Error as exc:
            raise SharedStateError(f"cannot write run {run_id}: {exc}") from exc
        try:
            result = work(live.kernel)
        except BaseException:
            # the kernel refused the work unchanged (a result of no known call): no gap
            with contextlib.suppress(psycopg.Error):
                conn.execute("UPDATE runs SET attempt = %s WHERE run_id = %s",
                             (row[3], run_id))
            raise
        try:
            if end:
                conn.execute("UPDATE runs SET snapshot = NULL, ended = 1, version = version + 1,"
                             " attempt = NULL, updated = %s WHERE run_id = %s",
                             (time.time(), run_id))
                live.ended = True
                self._live.pop(run_id, None)
            else:
                conn.execute("UPDATE runs SET snapshot = %s, version = version + %s, attempt = "
                             "NULL, updated = %s WHERE run_id = %s",
                             (live.kernel.suspend() if write else row[1], int(write),
                              time.time(), run_id))
                live.version += int(write)
        except psycopg.Error as exc:
            raise SharedStateError(f"cannot write run {run_id}: {exc}") from exc
        return result

    def flush(self) -> int:
        """Nothing to write: every decision wrote its run's state before it was answered."""
        return 0

    def save_all(self) -> None:
        """Nothing to write at shutdown (and writing could overwrite another sidecar's newer
        state)."""

"""Pinned tool definitions: a tool whose definition changes is suspended until a person trusts it.

The first time the gateway sees a server's tool it records a digest of what the model reads about
it (name, title, description, input and output schemas, annotations). A later listing with a
different digest (a "rug pull": the description now tells the model to send its keys somewhere;
a shadowing description aimed at another server's tool) does not replace the pin: the new
definition waits in ``pending``, calls to the tool are refused naming the change, and
``callgate mcp trust SERVER TOOL`` makes the pending definition the pin.

Only a server's first listing is trusted on sight. A tool that appears in a later listing (a
server that grows a ``send_*`` tool, or one whose description shadows another server's tool) is
held the same way until it is trusted. The server's ``instructions`` (text the client puts
before the model) are pinned too, under the name ``:instructions``, and withheld while changed.

The store is one SQLite file shared by every gateway process of a user; it is the only state
the gateway keeps besides the audit log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from callgate._errors import CallgateError

__all__ = ["PinStore", "PinnedTool", "default_state_dir", "fingerprint"]

#: The parts of a tool definition a pin covers: everything the model reads about the tool.
PINNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
#: The pin name of a server's instructions (no tool can be named so: MCP tool names have no ':').
INSTRUCTIONS = ":instructions"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pins (
    server TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL, definition TEXT NOT NULL,
    pinned_at REAL NOT NULL, PRIMARY KEY (server, tool));
CREATE TABLE IF NOT EXISTS pending (
    server TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL, definition TEXT NOT NULL,
    seen_at REAL NOT NULL, PRIMARY KEY (server, tool));
"""


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the gateway keeps its audit log and pins by default: ``$XDG_STATE_HOME/callgate``
    (``~/.local/state/callgate``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "callgate"


def fingerprint(tool: Mapping[str, Any]) -> str:
    """The digest of a tool definition (wire form, camelCase keys) over ``PINNED_FIELDS``."""
    pinned = {key: tool.get(key) for key in PINNED_FIELDS if tool.get(key) is not None}
    text = json.dumps(pinned, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class PinnedTool:
    """A pin as ``callgate mcp pins`` lists it; ``pending`` is a changed definition's digest."""

    server: str
    tool: str
    digest: str
    pending: str | None


class PinStore:
    """The pins of every server, in one SQLite file (created private to the user)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fresh = not self.path.exists()
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=10.0,
                                       isolation_level=None)
            if fresh:
                os.chmod(self.path, 0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise CallgateError(f"cannot open the MCP pin store {self.path}: {exc}") from exc

    def review(self, server: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Pin the tools of a server's first listing; return {tool: why} for those held: a
        definition that differs from its pin, or a tool new since the first listing (the
        definition is kept as pending)."""
        changed: dict[str, str] = {}
        now = time.time()
        with self._transaction() as db:
            pinned = dict(db.execute("SELECT tool, digest FROM pins WHERE server = ? AND "
                                     "tool <> ?", (server, INSTRUCTIONS)).fetchall())
            first = not pinned
            for tool in tools:
                name = str(tool.get("name", ""))
                digest = fingerprint(tool)
                definition = json.dumps(tool, sort_keys=True, ensure_ascii=False)
                if name not in pinned and not first:
                    db.execute("INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?)",
                               (server, name, digest, definition, now))
                    changed[name] = (
                        f"MCP tool {name!r} of server {server!r} appeared after the server's "
                        f"tools were pinned (digest {digest[:12]}); its calls are refused until "
                        f"`callgate mcp trust {server} {name}` accepts it")
                elif name not in pinned:
                    db.execute("INSERT INTO pins VALUES (?, ?, ?, ?, ?)",
                               (server, name, digest, definition, now))
                elif pinned[name] == digest:  # back to the pinned definition
                    db.execute("DELETE FROM pending WHERE server = ? AND tool = ?",
                               (server, name))
                else:
                    db.execute("INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?)",
                               (server, name, digest, definition, now))
                    changed[name] = (
                        f"the definition of MCP tool {name!r} of server {server!r} changed since "
                        f"it was pinned (digest {pinned[name][:12]} -> {digest[:12]}); its calls "
                        f"are refused until `callgate mcp trust {server} {name}` accepts it")
        return changed

    def review_instructions(self, server: str, text: str) -> str | None:
        """Pin a server's instructions on first sight; why they are withheld when they differ
        from the pin (the new text kept as pending), else None."""
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        with self._transaction() as db:
            row = db.execute("SELECT digest FROM pins WHERE server = ? AND tool = ?",
                             (server, INSTRUCTIONS)).fetchone()
            if row is None:
                db.execute("INSERT INTO pins VALUES (?, ?, ?, ?, ?)",
                           (server, INSTRUCTIONS, digest, text, time.time()))
                return None
            if row[0] == digest:
                db.execute("DELETE FROM pending WHERE server = ? AND tool = ?",
                           (server, INSTRUCTIONS))
                return None
            db.execute("INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?)",
                       (server, INSTRUCTIONS, digest, text, time.time()))
        return (f"the instructions of MCP server {server!r} changed since they were pinned "
                f"(digest {row[0][:12]} -> {digest[:12]}); they are withheld until "
                f"`callgate mcp trust {server} {INSTRUCTIONS}` accepts them")

    def trust(self, server: str, tool: str) -> bool:
        """Make the pending definition of ``tool`` its pin; False when none is pending."""
        with self._transaction() as db:
            row = db.execute("SELECT digest, definition FROM pending WHERE server = ? AND "
                             "tool = ?", (server, tool)).fetchone()
            if row is None:
                return False
            db.execute("INSERT OR REPLACE INTO pins VALUES (?, ?, ?, ?, ?)",
                       (server, tool, row[0], row[1], time.time()))
            db.execute("DELETE FROM pending WHERE server = ? AND tool = ?", (server, tool))
        return True

    def pins(self, server: str | None = None) -> list[PinnedTool]:
        """Every pin (of ``server``), with the digest of a changed definition awaiting trust;
        a tool held since it appeared has an empty ``digest``."""
        query = ("SELECT p.server, p.tool, p.digest, q.digest FROM pins p LEFT JOIN pending q "
                 "ON p.server = q.server AND p.tool = q.tool"
                 " UNION ALL SELECT q.server, q.tool, '', q.digest FROM pending q WHERE NOT "
                 "EXISTS (SELECT 1 FROM pins p WHERE p.server = q.server AND p.tool = q.tool)")
        query = f"SELECT * FROM ({query})"
        args: tuple[str, ...] = ()
        if server is not None:
            query, args = query + " WHERE server = ?", (server,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY 1, 2", args).fetchall()
        return [PinnedTool(*row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise CallgateError(f"the MCP pin store {self.path} failed: {exc}") from exc

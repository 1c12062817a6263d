"""The retrieval executor: BM25 search over a local directory of documents (SQLite FTS5).

Documents are text files under ``root``. They are split into passages and indexed in an FTS5
table (in memory, or in ``index_path`` to survive restarts); the index is brought up to date
before each search by comparing each file's size and modification time, so a changed corpus
needs no manual rebuild. Symlinks are never followed (a link inside the corpus cannot pull in a
file from elsewhere) and each file is opened with ``O_NOFOLLOW`` and verified to be inside
``root`` after open. The agent's query is reduced to plain word tokens, so FTS5 query syntax
cannot be injected. Results are tainted ``rag`` with the document as origin: retrieved text is
attacker-controllable content.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from callgate._errors import ExecutorError
from callgate._model import TaintLabel, ToolCall, ToolResult
from callgate.executors._file import descriptor_path
from callgate.executors._result import (
    Outcome,
    check_action,
    failed,
    guarded,
    param_int,
    param_str,
)

DEFAULT_SUFFIXES = (".txt", ".md", ".rst", ".text", ".html", ".htm", ".csv", ".json", ".log")
_PASSAGE_CHARS = 1200
_MAX_QUERY_TOKENS = 32
_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    path TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
    path UNINDEXED, passage UNINDEXED, body, tokenize = 'unicode61 remove_diacritics 2'
);
"""


class RetrievalExecutor:
    """Local document search: action ``search`` with parameters ``query`` and ``k``.

    Output: ``results``, a list of ``{path, passage, score, text}`` best first (``path``
    relative to ``root``; a higher ``score`` is a better BM25 match). ``k`` defaults to and is
    capped at ``max_results``. Files larger than ``max_file_bytes`` and beyond ``max_files``
    are not indexed.
    """

    tool_class = "retrieval"

    def __init__(
        self,
        *,
        root: str,
        index_path: str | None = None,
        max_results: int = 10,
        max_file_bytes: int = 2**20,
        max_files: int = 10_000,
        suffixes: Sequence[str] = DEFAULT_SUFFIXES,
    ) -> None:
        if max_results <= 0 or max_file_bytes <= 0 or max_files <= 0:
            raise ExecutorError("max_results, max_file_bytes and max_files must be positive")
        self._root = os.path.realpath(root)
        if not os.path.isdir(self._root):
            raise ExecutorError(f"retrieval root is not a directory: {root}")
        self.max_results = max_results
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self._suffixes = tuple(s.lower() for s in suffixes)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(index_path or ":memory:", check_same_thread=False)
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise ExecutorError(f"cannot open the retrieval index (FTS5 needed): {exc}") from exc

    def close(self) -> None:
        """Close the index connection."""
        self._db.close()

    def __call__(self, call: ToolCall) -> ToolResult:
        """Same as ``execute``: lets the executor be registered where a callable is expected."""
        return self.execute(call)

    def execute(self, call: ToolCall) -> ToolResult:
        """Search the corpus for the call's ``query``."""

        def run() -> Outcome:
            check_action(call, self.tool_class, ("search",))
            query = param_str(call.parameters, "query")
            k = param_int(call.parameters, "k", default=self.max_results)
            if k <= 0:
                raise failed("params.invalid", "k must be positive")
            results = self.search(query, min(k, self.max_results))
            name = os.path.basename(self._root) or self._root
            labels = [TaintLabel(source="rag", origin=f"rag:{name}")]
            for path in dict.fromkeys(str(r["path"]) for r in results):
                labels.append(TaintLabel(source="rag", origin=f"rag:{name}/{path}"))
            return Outcome({"results": results}, labels)

        return guarded(call, run)

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        """The ``k`` best passages for ``query`` (any word may match; BM25 ranks them)."""
        tokens = re.findall(r"\w+", query.lower())[:_MAX_QUERY_TOKENS]
        if not tokens:
            raise failed("params.invalid", "the query has no searchable words")
        expression = " OR ".join(f'"{token}"' for token in dict.fromkeys(tokens))
        with self._lock:
            self.refresh()
            rows = self._db.execute(
                "SELECT path, passage, bm25(passages) AS rank, body FROM passages "
                "WHERE passages MATCH ? ORDER BY rank LIMIT ?",
                (expression, k),
            ).fetchall()
        return [
            {"path": path, "passage": passage, "score": round(-rank, 6), "text": body}
            for path, passage, rank, body in rows
        ]

    def refresh(self) -> int:
        """Bring the index up to date with the files under ``root``; returns files re-indexed."""
        known = dict(self._db.execute("SELECT path, mtime_ns || ':' || size FROM documents"))
        seen: set[str] = set()
        changed = 0
        with self._db:
            for relative, info in self._walk():
                seen.add(relative)
                if known.get(relative) == f"{info.st_mtime_ns}:{info.st_size}":
                    continue
                text = self._read(relative)
                self._forget(relative)
                if text is None:
                    continue
                self._db.execute(
                    "INSERT INTO documents VALUES (?, ?, ?)",
                    (relative, info.st_mtime_ns, info.st_size),
                )
                self._db.executemany(
                    "INSERT INTO passages (path, passage, body) VALUES (?, ?, ?)",
                    [(relative, i, body) for i, body in enumerate(split_passages(text))],
                )
                changed += 1
            for gone in set(known) - seen:
                self._forget(gone)
        return changed

    def _forget(self, relative: str) -> None:
        self._db.execute("DELETE FROM documents WHERE path = ?", (relative,))
        self._db.execute("DELETE FROM passages WHERE path = ?", (relative,))

    def _walk(self) -> Iterator[tuple[str, os.stat_result]]:
        """Regular files with an indexed suffix, never through a symlink, at most max_files."""
        count = 0
        for folder, dirs, files in os.walk(self._root, followlinks=False):
            dirs.sort()
            for name in sorted(files):
                if not name.lower().endswith(self._suffixes):
                    continue
                full = os.path.join(folder, name)
                info = os.lstat(full)
                if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_file_bytes:
                    continue
                count += 1
                if count > self.max_files:
                    return
                yield os.path.relpath(full, self._root), info

    def _read(self, relative: str) -> str | None:
        """The file's text if it is still a regular file inside root, else ``None``."""
        full = os.path.join(self._root, relative)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            real = descriptor_path(fd)
            if not real.startswith(self._root.rstrip(os.sep) + os.sep):
                return None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, self.max_file_bytes + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > self.max_file_bytes:
            return None
        return data.decode("utf-8", errors="replace")


def split_passages(text: str, limit: int = _PASSAGE_CHARS) -> list[str]:
    """Paragraphs merged up to ``limit`` characters; an over-long paragraph is cut."""
    passages: list[str] = []
    current = ""
    for raw in re.split(r"\n\s*\n", text):
        paragraph = raw.strip()
        while len(paragraph) > limit:
            if current:
                passages.append(current)
                current = ""
            passages.append(paragraph[:limit])
            paragraph = paragraph[limit:]
        if not paragraph:
            continue
        if current and len(current) + len(paragraph) + 2 > limit:
            passages.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        passages.append(current)
    return passages

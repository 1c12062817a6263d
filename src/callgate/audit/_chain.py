"""The pure part of the audit log: canonical JSON, the hash chain and the derived columns.

Nothing here touches a file or a database, so every store shares it, and verification can
recompute every stored value from the hashed record alone.

An event's *record* is the canonical JSON text of its envelope::

    {"id": ..., "kind": ..., "payload": {...}, "prev": <hash of the previous event>,
     "run_id": ..., "run_seq": ..., "seq": ..., "ts": ..., "v": 1}

and its hash is ``sha256(record.encode("utf-8")).hexdigest()``. Canonical JSON is what the
standard library's ``json`` writes with sorted keys, compact separators, ``ensure_ascii=False``
and ``allow_nan=False``; where ``orjson`` is installed it writes the same text faster, for the
values it provably writes alike (:func:`_plain`). The first event's ``prev`` is
:data:`GENESIS_HASH`. The record is one line of the log's segment (``_log``); every column of
an index row is a function of the record and where that line lies in the segment
(:func:`event_row`), which is what lets ``verify`` check the index too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any, Final, Literal

from callgate._errors import AuditError

_orjson: ModuleType | None
try:
    import orjson as _orjson
except ImportError:  # the optional "fast" extra; without it the reference encoder writes alone
    _orjson = None

#: The format version written into every record (the ``v`` field of an envelope).
RECORD_VERSION: Final = 1
#: The version of the layout (the ``version`` row of ``meta``); docs/audit.md defines it.
LAYOUT_VERSION: Final = 3
#: ``prev`` of the first event of a chain.
GENESIS_HASH: Final = "0" * 64

#: The kinds of event a chain holds.
RecordKind = Literal["run-start", "decision", "result", "system", "run-end"]
RECORD_KINDS: Final[frozenset[str]] = frozenset(
    {"run-start", "decision", "result", "system", "run-end"}
)
#: ``tool_class`` of system events (quarantine, behavioral violations), as in Ari Kernel.
SYSTEM_TOOL_CLASS: Final = "_system"

#: The columns of an event row, in storage order. ``seq`` is the global order.
EVENT_COLUMNS: Final = (
    "seq",
    "id",
    "run_id",
    "run_seq",
    "kind",
    "timestamp",
    "tool",
    "tool_class",
    "action",
    "verdict",
    "call_id",
    "status",
    "taint",
    "log_offset",
    "log_length",
    "prev_hash",
    "hash",
)

_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


#: Finite floats with ``_FLOAT_LOW <= abs(x) < _FLOAT_HIGH`` (and zero) are printed alike by
#: ``repr`` (as ``json`` does) and by ``orjson``; outside it the two spell exponents apart
#: (``1e-05`` against ``0.00001``), so a value holding such a float takes the reference path.
_FLOAT_LOW: Final = 1e-4
_FLOAT_HIGH: Final = 1e16
#: Nodes and levels :func:`_plain` walks before it gives up (a cycle or a huge value then
#: takes the reference path, which refuses a cycle itself).
_PLAIN_NODES: Final = 20_000
_PLAIN_DEPTH: Final = 200


def _plain(value: object) -> bool:
    """True when ``value`` is made of the built-in JSON types only (exactly ``dict`` with
    string keys and ``list``; strings, integers, ``None``; floats in the range above): the
    values for which ``orjson`` writes the reference encoder's text or refuses (an integer past
    64 bits, a lone surrogate, nesting past 254). Anything else, a tuple or a mapping of
    another type included, is left to the reference encoder, which refuses what is not JSON."""
    return _walk(value, 0, _PLAIN_NODES) >= 0


def _walk(node: object, depth: int, budget: int) -> int:
    """The budget left once ``node`` is walked, or -1 when it is not plain (see ``_plain``).
    (Values of a subclass of ``str`` or ``int``, ``bool`` among them, are written alike by
    both; keys must be exactly ``str``.)"""
    if isinstance(node, str) or isinstance(node, int) or node is None:  # noqa: SIM101  # each compiles to one type test (mypyc); a tuple does not
        return budget
    if depth >= _PLAIN_DEPTH or budget <= 0:
        return -1
    # Two loops, for a dict's values and a list's items: compiled, each is specialised to its
    # container (one loop over any iterable walks a record in twice the time).
    if type(node) is dict:
        assert isinstance(node, dict)
        budget -= len(node)
        for key, item in node.items():
            if type(key) is not str:  # a subclass may sort itself otherwise
                return -1
            if not isinstance(item, str):
                budget = _walk(item, depth + 1, budget)
                if budget < 0:
                    return -1
        return budget
    if type(node) is list:
        assert isinstance(node, list)
        budget -= len(node)
        for item in node:
            if not isinstance(item, str):
                budget = _walk(item, depth + 1, budget)
                if budget < 0:
                    return -1
        return budget
    if type(node) is float:
        assert isinstance(node, float)
        size = abs(node)
        return budget if _FLOAT_LOW <= size < _FLOAT_HIGH or size == 0.0 else -1  # NaN: -1
    return -1


def canonical_json(value: Any) -> str:
    """Encode ``value`` as canonical JSON: sorted keys, compact separators, no NaN/Infinity.

    Raises :class:`AuditError` when ``value`` is not plain JSON data.
    """
    if _orjson is not None and _plain(value):
        try:
            return str(_orjson.dumps(value, option=_orjson.OPT_SORT_KEYS).decode("utf-8"))
        except _orjson.JSONEncodeError:
            pass  # past what orjson holds: the reference encoder writes it, or refuses it
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise AuditError(f"audit record is not JSON data: {exc}") from exc


def sha256_hex(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8) as 64 lowercase hex digits."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_record(
    *,
    seq: int,
    event_id: str,
    run_id: str,
    run_seq: int,
    kind: str,
    timestamp: str,
    prev: str,
    payload: Mapping[str, Any],
) -> dict[str, Any]:
    """Build the envelope of one event (the dict whose canonical JSON is hashed)."""
    return {
        "v": RECORD_VERSION,
        "seq": seq,
        "id": event_id,
        "run_id": run_id,
        "run_seq": run_seq,
        "kind": kind,
        "ts": timestamp,
        "prev": prev,
        "payload": payload,
    }


def seal(record: Mapping[str, Any]) -> tuple[str, str]:
    """Return ``(record_text, hash)`` for an envelope."""
    text = canonical_json(record)
    return text, sha256_hex(text)


def segment_line(text: str, digest: str) -> bytes:
    """One line of the segment: the record's hash, a space, its canonical JSON, a newline.
    (The hash beside the record makes an edit of the record itself visible on its own line,
    the last one included, as the ``hash`` column beside ``record`` did in layout 2.)"""
    return f"{digest} {text}\n".encode()


def taint_column(labels: Any) -> str:
    """The ``taint`` column: the sorted, distinct taint sources joined by commas."""
    if not isinstance(labels, list):
        return ""
    sources = {str(label.get("source", "")) for label in labels if isinstance(label, dict)}
    return ",".join(sorted(sources))


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _obj(value: Any) -> Mapping[str, Any]:
    # Records are read back from a file an attacker may have written: never assume a shape.
    return value if isinstance(value, Mapping) else {}


def _query_columns(kind: str, payload: Mapping[str, Any]) -> tuple[Any, ...]:
    """(tool, tool_class, action, verdict, call_id, status, taint) of one record."""
    if kind == "decision":
        call = _obj(payload.get("call"))
        decision = _obj(payload.get("decision"))
        call_id = _str_or_none(call.get("id")) or _str_or_none(decision.get("call_id"))
        return (
            _str_or_none(call.get("tool")),
            _str_or_none(call.get("tool_class")),
            _str_or_none(call.get("action")),
            _str_or_none(decision.get("verdict")),
            call_id or None,
            None,
            taint_column(call.get("taint")),
        )
    if kind == "result":
        result = _obj(payload.get("result"))
        return (
            None,
            None,
            None,
            None,
            _str_or_none(result.get("call_id")),
            _str_or_none(result.get("status")),
            taint_column(result.get("taint")),
        )
    if kind == "system":
        name = _str_or_none(payload.get("kind"))
        return (f"{SYSTEM_TOOL_CLASS}.{name}", SYSTEM_TOOL_CLASS, name, None, None, None, "")
    return (None, None, None, None, None, None, "")


def event_row(record: Mapping[str, Any], digest: str, offset: int, length: int
              ) -> tuple[Any, ...]:
    """Every column of an index row (in :data:`EVENT_COLUMNS` order): derived from its record,
    its hash and where its line lies in the segment (``offset``, ``length`` in bytes, the
    newline included).

    The store writes exactly this tuple and ``verify`` recomputes it from the segment, so an
    index row that disagrees with the hashed record is caught.
    """
    kind = str(record.get("kind"))
    payload = record.get("payload")
    if not isinstance(payload, Mapping):
        payload = {}
    return (
        record.get("seq"),
        record.get("id"),
        record.get("run_id"),
        record.get("run_seq"),
        kind,
        record.get("ts"),
        *_query_columns(kind, payload),
        offset,
        length,
        record.get("prev"),
        digest,
    )


def config_hash(config: Mapping[str, Any]) -> str:
    """The hash of a run's configuration as stored in the ``runs`` index."""
    return sha256_hex(canonical_json(dict(config)))


#: The rows of the ``meta`` table that mark a file as a callgate audit log.
META_ROWS: Final[tuple[tuple[str, str], ...]] = (
    ("format", "callgate-audit"),
    ("version", str(LAYOUT_VERSION)),
)

#: The columns of a ``runs`` row, in storage order. The table is an index derived from the chain.
RUN_COLUMNS: Final = (
    "run_id",
    "principal",
    "policy_name",
    "manifest_hash",
    "config_hash",
    "started_at",
    "start_seq",
    "ended_at",
    "end_seq",
    "event_count",
)


def run_row(
    start: Mapping[str, Any], event_count: int, end: Mapping[str, Any] | None
) -> tuple[Any, ...]:
    """A ``runs`` row (in :data:`RUN_COLUMNS` order) derived from its run-start / run-end records.

    ``event_count`` counts every event of the run in the chain, run-start and run-end included.
    """
    payload = start.get("payload")
    if not isinstance(payload, Mapping):
        payload = {}
    config = payload.get("config")
    return (
        start.get("run_id"),
        payload.get("principal"),
        payload.get("policy_name"),
        payload.get("manifest_hash"),
        config_hash(config) if isinstance(config, Mapping) else None,
        start.get("ts"),
        start.get("seq"),
        None if end is None else end.get("ts"),
        None if end is None else end.get("seq"),
        event_count,
    )


def runs_digest(runs: Iterable[tuple[str, int, int, int | None]]) -> str:
    """The digest of the set of runs a checkpoint covers.

    ``runs`` are ``(run_id, start_seq, event_count, end_seq)`` of every run started at or before
    the checkpoint's sequence, counted up to it, in start order. The digest is the SHA-256 of the
    canonical JSON list of those 4-element lists, so dropping, adding or shortening a run
    changes it.
    """
    return sha256_hex(canonical_json([list(run) for run in runs]))

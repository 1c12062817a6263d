"""The anchor: the latest signed checkpoint, kept in a file outside the audit database.

Someone who can rewrite the database can delete its tail together with the checkpoints stored
in it; the anchor file is what still says how far the chain reached. It is replaced atomically
(temporary file, fsync, rename) and only ever moves forward: a writer never replaces it with a
checkpoint of a lower sequence, nor replaces an anchor that no longer matches the chain (that
is evidence, kept for ``verify``). Writers and ``verify`` take turns on ``<anchor>.lock``
(``flock``), so ``verify`` never sees a checkpoint committed without its anchor.

The file is one line of canonical JSON: the checkpoint's fields plus
``"format": "callgate-audit-anchor/1"``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from callgate._errors import AuditError
from callgate.audit._chain import canonical_json
from callgate.audit._checkpoint import Checkpoint
from callgate.audit._keys import display, write_atomically

ANCHOR_FORMAT: Final = "callgate-audit-anchor/1"
_FIELDS: Final = {
    "seq": int,
    "head_hash": str,
    "runs": int,
    "runs_digest": str,
    "created_at": str,
    "key_id": str,
    "signature": str,
}


def lock_path(anchor_path: str | os.PathLike[str]) -> Path:
    """The file writers and verifiers ``flock`` to take turns on an anchor."""
    return Path(os.fspath(anchor_path) + ".lock")


@contextmanager
def locked(anchor_path: str | os.PathLike[str], *, exclusive: bool) -> Iterator[None]:
    """Hold the anchor's lock; a reader without a lock file (none written yet) goes ahead."""
    where = lock_path(anchor_path)
    try:
        if exclusive:
            fd = os.open(where, os.O_RDWR | os.O_CREAT, 0o600)
        else:
            fd = os.open(where, os.O_RDONLY)
    except FileNotFoundError:
        yield
        return
    except OSError as exc:
        raise AuditError(f"cannot lock anchor {display(anchor_path)}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def encode_anchor(checkpoint: Checkpoint) -> bytes:
    """The bytes of an anchor file."""
    return (canonical_json({"format": ANCHOR_FORMAT, **checkpoint.as_json()}) + "\n").encode()


def decode_anchor(data: bytes, where: str) -> Checkpoint:
    """The checkpoint an anchor file holds; AuditError when it is not one."""
    try:
        body: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AuditError(f"anchor {where} is not JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != ANCHOR_FORMAT:
        raise AuditError(f"anchor {where} is not a {ANCHOR_FORMAT} file")
    for name, kind in _FIELDS.items():
        if type(body.get(name)) is not kind:
            raise AuditError(f"anchor {where}: field {name!r} is missing or not {kind.__name__}")
    return Checkpoint(**{name: body[name] for name in _FIELDS})


def read_anchor(anchor_path: str | os.PathLike[str]) -> Checkpoint | None:
    """The anchor at ``anchor_path``, or ``None`` when there is no such file."""
    try:
        data = Path(anchor_path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditError(f"cannot read anchor {display(anchor_path)}: {exc}") from exc
    return decode_anchor(data, display(anchor_path))


def advance_anchor(
    anchor_path: str | os.PathLike[str],
    checkpoint: Checkpoint,
    hash_at: Callable[[int], str | None],
) -> bool:
    """Replace the anchor by ``checkpoint`` if that moves it forward; the caller holds the lock.

    ``hash_at(seq)`` is the chain's hash at ``seq`` (``None`` beyond its end). Returns False
    when the anchor already covers ``checkpoint``; raises AuditError, leaving the file as it is,
    when the current anchor does not match the chain (the log was truncated or rewritten).
    """
    current = read_anchor(anchor_path)
    if current is not None:
        if current.seq >= checkpoint.seq:
            return False
        if hash_at(current.seq) != current.head_hash:
            raise AuditError(
                f"anchor {display(anchor_path)} (sequence {current.seq}) does not match the"
                " audit log: it was truncated or rewritten; the anchor is kept as evidence"
            )
    try:
        write_atomically(Path(anchor_path), encode_anchor(checkpoint), 0o644)
    except OSError as exc:
        raise AuditError(f"cannot write anchor {display(anchor_path)}: {exc}") from exc
    return True

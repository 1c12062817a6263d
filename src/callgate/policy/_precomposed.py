"""The policy texts shipped with callgate, composed ahead of time.

A kernel with the built-in statements parses ``packs/sequences.yaml`` when it starts, and
``--preset NAME`` parses a preset: composing YAML in pure Python, and importing PyYAML to do it,
costs a command that decides one call some 12 ms. ``composed.jsonl`` (beside this module)
holds what ``_compose`` makes of each policy under ``packs/`` and ``presets/`` (their ``tests``
folders aside): one line per text, its SHA-256 first, then its values and the place of every
node (only the line of the text at hand is parsed). The loader (``_loader``) takes a text it
finds there from the table instead of composing it; the checks of the values and the schema's
validation run as for any text.

The table is used only while it was made by this very ``_compose``: its first line names the
SHA-256 of ``_compose.py``, and when that differs, or the table is absent or damaged, every
text is composed as before. ``write_table()`` writes the table again.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from callgate.policy._compose import NodePath, Place

__all__ = ["precomposed", "table_text", "write_table"]

#: The table, beside this module.
TABLE = "composed.jsonl"
#: The folders (below this package) whose policies the table holds.
FOLDERS = ("packs", "presets")

_HERE = Path(__file__).resolve().parent
#: Nesting the table is made with: the loader checks its own bound on what it takes from it.
_ANY_DEPTH = 1_000


def precomposed(text: str) -> tuple[dict[str, Any], dict[NodePath, Place]] | None:
    """What composing ``text`` gives (its values, the place of every node), when ``text`` is a
    policy shipped with callgate and the table is current; else None."""
    current = _compose_digest()
    if current is None:
        return None
    try:
        table = (_HERE / TABLE).read_bytes()
        head, _, rest = table.partition(b"\n")
        if json.loads(head) != {"compose_sha256": current}:
            return None
        start = (b"\n" + rest).find(_line_start(_digest(text.encode("utf-8", "surrogatepass"))))
        if start < 0:
            return None
        end = rest.find(b"\n", start)
        entry = json.loads(rest[start:end] if end >= 0 else rest[start:])
        data = entry["data"]
        places = {tuple(path): (place[0], place[1], place[2], place[3], place[4])
                  for path, place in entry["places"]}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None  # absent or damaged: the text is composed
    return (data, places) if isinstance(data, dict) else None


def table_text() -> str:
    """The table for the policies shipped now, composed by the ``_compose`` there is now."""
    from callgate.policy._compose import Builder, compose

    current = _compose_digest()
    if current is None:
        raise OSError(f"cannot read {_HERE / '_compose.py'}")
    lines = [json.dumps({"compose_sha256": current})]
    for folder in FOLDERS:
        for path in sorted((_HERE / folder).rglob("*.yaml")):
            if "tests" in path.relative_to(_HERE / folder).parts:
                continue
            text = path.read_text(encoding="utf-8")
            builder = Builder()
            data = builder.build(compose(text, path.name, _ANY_DEPTH), ())
            if builder.refused or not isinstance(data, dict):
                continue  # composed as any text, its problems reported at their places
            digest = _digest(text.encode("utf-8", "surrogatepass"))
            line = json.dumps({"text_sha256": digest, "data": data,
                               "places": [[list(p), list(at)]
                                          for p, at in builder.places().items()]},
                              ensure_ascii=False, separators=(",", ":"))
            if not line.startswith(_line_start(digest)[1:].decode("ascii")):
                raise ValueError(f"{path}: the line does not start with its digest")
            if json.loads(line)["data"] != data:
                raise ValueError(f"{path}: values JSON does not give back as they are")
            lines.append(line)
    return "\n".join(lines) + "\n"


def _line_start(digest: str) -> bytes:
    """How the line of the text with SHA-256 ``digest`` starts (after its line break)."""
    return b'\n{"text_sha256":"' + digest.encode("ascii") + b'"'


def write_table() -> Path:
    """Write the table anew, beside this module (in the source tree); the path written."""
    (_HERE / TABLE).write_text(table_text(), encoding="utf-8")
    return _HERE / TABLE


@functools.cache
def _compose_digest() -> str | None:
    try:
        return _digest((_HERE / "_compose.py").read_bytes())
    except OSError:
        return None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

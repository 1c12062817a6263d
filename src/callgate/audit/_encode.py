"""Turning any value the kernel hands the audit log into canonical JSON data, never raising.

A decision must be audited whatever the agent or the tool put into it, so content can never be a
reason for an append to fail. Most payloads are plain JSON data and take the fast path
(:func:`fits`). Anything else goes through :func:`sanitize`, an iterative walk (no recursion, so
no depth can overflow the stack) that keeps what JSON can hold and replaces the rest by a
*marker*: an object whose only key set is ``{"$callgate", ...}``, documented in docs/audit.md:

- ``{"$callgate": "string", "reason": "invalid-unicode", "text": ..., "encoding": ...,
  "bytes_b64": ...}``: a string with lone surrogates (for example bytes that were not UTF-8,
  decoded with ``surrogateescape``). ``text`` shows it with U+FFFD in their place; ``bytes_b64``
  is the string encoded as UTF-8 with ``encoding`` (``surrogateescape``, which gives back the
  original bytes, or ``surrogatepass`` when that is impossible), in base64.
- ``{"$callgate": "string", "reason": "too-long", "chars": n, "sha256": ..., "head": ...}``: a
  string longer than :data:`MAX_STRING_CHARS`; ``sha256`` is over its UTF-8 bytes (encoded as
  above), ``head`` its first characters.
- ``{"$callgate": "number", "value": "NaN" | "Infinity" | "-Infinity"}``: a non-finite float.
- ``{"$callgate": "omitted", "reason": ..., ...}``: nesting deeper than :data:`MAX_DEPTH`, an
  integer too long to print, a value of a type with no JSON form (``type`` names it), or a
  payload field so large the record would pass :data:`MAX_RECORD_CHARS` (``sha256`` and
  ``chars`` of its canonical JSON).
- ``{"$callgate": "object", "items": [[key, value], ...]}``: an object whose keys are not all
  valid Unicode strings, or that itself has a ``"$callgate"`` key (so data can never pass for
  a marker); keys are walked like values.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from callgate.audit._chain import canonical_json, sha256_hex

#: The key that marks a replaced value.
MARKER: Final = "$callgate"
#: Containers nested deeper than this (inside a payload) are replaced by a marker.
MAX_DEPTH: Final = 100
#: Strings longer than this are replaced by a marker with their hash (1 MiB of characters).
MAX_STRING_CHARS: Final = 1 << 20
#: A record longer than this has its largest payload fields replaced (4 MiB of characters).
MAX_RECORD_CHARS: Final = 4 << 20
_HEAD_CHARS: Final = 1024
_INT_DIGITS: Final = 4000  # below CPython's int-to-str limit (4300 digits)
_QUOTED_MARKER: Final = f'"{MARKER}"'


def fits(text: str) -> bool:
    """True when canonical record ``text`` needs no sanitising: encodable, small, shallow.

    Counting brackets bounds the nesting depth from above at C speed, so a typical record
    skips the walk; a record that fails any test is sanitised and sealed again.
    """
    if len(text) > MAX_STRING_CHARS or _QUOTED_MARKER in text:
        return False
    if text.count("{") + text.count("[") > MAX_DEPTH:
        return False
    return text.isascii() or _encodable(text)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def string_bytes(text: str) -> tuple[bytes, str]:
    """``text`` as UTF-8 bytes with the encoding used (``utf-8``, ``surrogateescape`` or
    ``surrogatepass``)."""
    for errors in ("strict", "surrogateescape", "surrogatepass"):
        try:
            return text.encode("utf-8", errors), "utf-8" if errors == "strict" else errors
        except UnicodeEncodeError:
            continue
    raise AssertionError("surrogatepass encodes every str")  # pragma: no cover


def _string(text: str) -> Any:
    if len(text) > MAX_STRING_CHARS:
        data, _ = string_bytes(text)
        return {
            MARKER: "string",
            "reason": "too-long",
            "chars": len(text),
            "sha256": _sha256(data),
            "head": _string(text[:_HEAD_CHARS]),
        }
    if text.isascii() or _encodable(text):
        return text
    data, encoding = string_bytes(text)
    return {
        MARKER: "string",
        "reason": "invalid-unicode",
        "text": data.decode("utf-8", "replace"),
        "encoding": encoding,
        "bytes_b64": base64.b64encode(data).decode("ascii"),
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _scalar(node: Any) -> tuple[bool, Any]:
    """``(True, json value)`` for a scalar, ``(False, None)`` for anything else."""
    if node is None or isinstance(node, bool):
        return True, node
    if isinstance(node, str):
        return True, _string(node)
    if isinstance(node, int):
        if node.bit_length() > _INT_DIGITS * 3:  # 3 bits per digit: a safe lower bound
            return True, _omitted("integer too long", bits=node.bit_length())
        return True, int(node)
    if isinstance(node, float):
        if math.isfinite(node):
            return True, float(node)
        name = "NaN" if math.isnan(node) else ("Infinity" if node > 0 else "-Infinity")
        return True, {MARKER: "number", "value": name}
    return False, None


def _omitted(reason: str, **extra: Any) -> dict[str, Any]:
    return {MARKER: "omitted", "reason": reason, **extra}


def _plain(node: Any) -> tuple[bool, Any]:
    """``(False, data to walk)`` for a foreign object, or ``(True, an omitted marker)``."""
    try:
        if isinstance(node, BaseModel):
            try:
                return False, node.model_dump(mode="json")
            except Exception:  # too deep or an unknown type inside: walk its fields instead
                return False, {name: getattr(node, name) for name in type(node).model_fields}
        return False, to_jsonable_python(node)
    except Exception:  # pydantic, codecs and user __repr__s raise many kinds
        return True, _omitted("no JSON form", type=_type_name(node))


def _type_name(node: Any) -> str:
    kind = type(node)
    return _string(f"{kind.__module__}.{kind.__qualname__}")  # type: ignore[no-any-return]  # _string is typed for any input


def _container(node: Any, depth: int, work: list[tuple[Any, Any, Any, int]]) -> Any:
    """The output container for ``node``, its children queued on ``work``; or a marker."""
    if isinstance(node, Mapping):
        if depth >= MAX_DEPTH:
            return _omitted(f"nested deeper than {MAX_DEPTH} levels")
        keys = list(node.keys())
        if all(isinstance(k, str) and k != MARKER and (k.isascii() or _encodable(k))
               for k in keys):
            out: dict[str, Any] = {}
            for key in keys:
                work.append((node[key], out, key, depth + 1))
            return out
        items: list[Any] = [[None, None] for _ in keys]
        for pair, key in zip(items, keys, strict=True):
            work.append((key, pair, 0, depth + 2))
            work.append((node[key], pair, 1, depth + 2))
        return {MARKER: "object", "items": items}
    if isinstance(node, list | tuple):
        if depth >= MAX_DEPTH:
            return _omitted(f"nested deeper than {MAX_DEPTH} levels")
        seq: list[Any] = [None] * len(node)
        for index, item in enumerate(node):
            work.append((item, seq, index, depth + 1))
        return seq
    return None


def sanitize(value: Any) -> Any:
    """Plain, canonical-JSON-encodable data for any ``value`` (markers where needed).

    Never raises for the content of ``value`` and never recurses.
    """
    root: list[Any] = [None]
    work: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    converted: set[int] = set()
    while work:
        node, parent, slot, depth = work.pop()
        done, out = _scalar(node)
        if not done:
            out = _container(node, depth, work)
            if out is None:
                final, plain = _plain(node)
                if not final and id(node) not in converted:
                    converted.add(id(plain))  # a foreign object converting into itself stops
                    work.append((plain, parent, slot, depth))
                    continue
                out = plain if final else _omitted("no JSON form", type=_type_name(node))
        parent[slot] = out
    return root[0]


def shrink(payload: Mapping[str, Any], budget: int) -> dict[str, Any]:
    """Replace the largest fields of a sanitised payload until its JSON is under ``budget``."""
    sizes = {key: len(canonical_json(value)) for key, value in payload.items()}
    out = dict(payload)
    total = sum(sizes.values())
    for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
        if total <= budget:
            break
        text = canonical_json(out[key])
        out[key] = _omitted("record too large", chars=len(text), sha256=sha256_hex(text))
        total -= sizes[key]
    return out

"""The first step: a raw call becomes a well-formed ``ToolCall`` with canonical paths, or a reason.

Bounds are checked before the model is built (size, nesting, text that is not Unicode); every
path the checks will see is made canonical against the tool's working directory, so what is
checked is what runs. ``placeholder`` makes a stand-in for anything at all, so that even a call
that could not be read is audited.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from callgate._clock import utc_second
from callgate._model import Reason, ToolCall
from callgate.kernel._registry import ToolRegistry
from callgate.matchers._paths import PathRejected, canonical_parameters

MAX_PARAMETER_BYTES = 1 << 20
MAX_PARAMETER_DEPTH = 32
#: Characters of an error message or stand-in text kept in reasons and audit records.
MAX_ERROR_CHARS = 2048

_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True, slots=True)
class Stamp:
    """What the kernel sets on every call: where it stands in the run, and when it came."""

    run_id: str
    sequence: int
    principal: str
    timestamp: float

    @property
    def call_id(self) -> str:
        return f"{self.run_id}:{self.sequence}"


def _reason(reason_id: str, message: str) -> Reason:
    return Reason(id=reason_id, check="validate", message=message)


def validate(raw: object, stamp: Stamp, registry: ToolRegistry,
             path_classes: frozenset[str], resolved: set[str] | None = None
             ) -> ToolCall | Reason:
    """The call ``raw`` describes, stamped and canonical, or why it is not one.

    A ``ToolCall`` is already typed: only its bounds are checked and its paths made canonical.
    A mapping is validated once, after its paths are canonical, so no second model is built.
    Each canonical path made is added to ``resolved`` when given.
    """
    if isinstance(raw, ToolCall):
        return _typed(raw, stamp, registry, path_classes, resolved)
    if not isinstance(raw, Mapping):
        return _reason("input.invalid", f"a call must be a mapping, not {type(raw).__name__}")
    data = dict(raw)
    declared = registry.get(str(data.get("tool", "")))
    if "tool_class" not in data and declared is not None and declared.tool_class:
        data["tool_class"] = declared.tool_class
    parameters = data.get("parameters", {})
    bounds = _bounds(parameters)
    if bounds is not None:
        return bounds
    data.update(id=stamp.call_id, run_id=stamp.run_id, sequence=stamp.sequence,
                timestamp=now_iso(stamp.timestamp), principal=stamp.principal)
    if type(parameters) is dict and all(type(k) is str for k in parameters):
        # canonical before the model is built: one validation, no copy afterwards
        canonical = _canonical(str(data.get("tool", "")), data.get("tool_class"), parameters,
                               registry, path_classes=path_classes, resolved=resolved)
        if isinstance(canonical, Reason):
            return canonical
        data["parameters"] = canonical
        try:
            return ToolCall.model_validate(data)
        except ValidationError as exc:
            return _reason("input.invalid", validation_message(exc))
    try:
        call = ToolCall.model_validate(data)
    except ValidationError as exc:
        return _reason("input.invalid", validation_message(exc))
    return canonicalise(call, registry, path_classes, resolved)


def _typed(call: ToolCall, stamp: Stamp, registry: ToolRegistry,
           path_classes: frozenset[str], resolved: set[str] | None) -> ToolCall | Reason:
    """A call built as a ``ToolCall``: bounds, canonical paths and the stamp, one copy."""
    bounds = _bounds(call.parameters)
    if bounds is not None:
        return bounds
    canonical = _canonical(call.tool, call.tool_class, call.parameters, registry,
                           path_classes=path_classes, resolved=resolved)
    if isinstance(canonical, Reason):
        return canonical
    return call.model_copy(update={
        "parameters": canonical, "id": stamp.call_id, "run_id": stamp.run_id,
        "sequence": stamp.sequence, "timestamp": now_iso(stamp.timestamp),
        "principal": stamp.principal})


def _bounds(parameters: object) -> Reason | None:
    """Why parameters are out of bounds (text that is not Unicode, size, depth), or None."""
    size, depth, text = measure(parameters)
    if not text:
        return _reason("input.invalid", "parameters hold a lone surrogate (text that is not "
                       "Unicode, such as an undecodable file name)")
    if size > MAX_PARAMETER_BYTES:
        return _reason("input.too-large",
                       f"parameters are {size} bytes, over the limit of {MAX_PARAMETER_BYTES}")
    if depth > MAX_PARAMETER_DEPTH:
        return _reason("input.too-deep",
                       f"parameters nest deeper than {MAX_PARAMETER_DEPTH} levels")
    return None


def _canonical(tool: str, tool_class: object, parameters: dict[str, Any],
               registry: ToolRegistry, *, path_classes: frozenset[str],
               resolved: set[str] | None) -> dict[str, Any] | Reason:
    """A copy of ``parameters`` with every path the checks will see made canonical (or as
    given when no path check applies to the call), or why a path cannot be. Always a copy, down
    to the last list: what the caller still holds cannot change what was checked."""
    declared = registry.get(tool)
    if tool_class != "file" and tool_class not in path_classes and (
            declared is None or declared.filesystem is None):
        copied: dict[str, Any] = _copied(parameters)
        return copied
    extra = declared.path_params if declared is not None else ()
    try:
        return canonical_parameters(parameters, registry.base(declared), extra,
                                    resolved=resolved)
    except PathRejected as exc:
        return _reason("path.rejected", str(exc))


def _copied(value: Any) -> Any:
    """``value`` with every dict, list and set in it copied (the rest is immutable)."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    if kind is tuple:
        return tuple(_copied(v) for v in value)
    if kind is set:
        return {_copied(v) for v in value}
    if isinstance(value, (str, int, float, bool, bytes, frozenset)) or value is None:
        return value
    return copy.deepcopy(value)


def canonicalise(call: ToolCall, registry: ToolRegistry, path_classes: frozenset[str],
                 resolved: set[str] | None = None) -> ToolCall | Reason:
    """One canonical path feeds both the checks and the executor: what is checked is what runs."""
    params = _canonical(call.tool, call.tool_class, call.parameters, registry,
                        path_classes=path_classes, resolved=resolved)
    if isinstance(params, Reason) or params is call.parameters:
        return params if isinstance(params, Reason) else call
    return call.model_copy(update={"parameters": params})


def placeholder(raw: object, stamp: Stamp, call_id: str | None = None) -> ToolCall:
    """A well-formed stand-in for any value, so that its denial can still be audited."""
    def text(key: str, default: str) -> str:
        try:
            value = getattr(raw, key, None) if isinstance(raw, ToolCall) else (
                raw.get(key) if isinstance(raw, Mapping) else None)
        except Exception:  # a mapping whose lookups fail
            value = None
        return safe_text(value[:256]) if isinstance(value, str) and value else default

    return ToolCall(tool=text("tool", "<invalid>"), tool_class=text("tool_class", "unknown"),
                    action=text("action", "unknown"), id=call_id or stamp.call_id,
                    run_id=stamp.run_id, sequence=stamp.sequence, principal=stamp.principal,
                    timestamp=now_iso(stamp.timestamp))


def measure(value: Any) -> tuple[int, int, bool]:
    """(approximate size in bytes, nesting depth, whether every string is Unicode text) of a
    JSON-like value; stops when too deep or too large."""
    if type(value) is dict and all(type(v) in _SCALARS for v in value.values()):
        # the common case, a flat mapping of scalars, without the general walk
        return (sum(len(str(k)) + (len(v) if type(v) is str else 8) for k, v in value.items()),
                1, all(is_text(k) and (type(v) is not str or is_text(v))
                       for k, v in value.items() if type(k) is str))
    size, depth, text = 0, 0, True
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            size, text = size + len(item) + 2, text and is_text(item)
            continue
        depth = max(depth, level)
        if level > MAX_PARAMETER_DEPTH or size > MAX_PARAMETER_BYTES:
            break
        if isinstance(item, Mapping):
            size += 2
            for key, inner in item.items():
                size += len(key) + 3 if isinstance(key, str) else 8
                text = text and (not isinstance(key, str) or is_text(key))
                stack.append((inner, level + 1))
        elif isinstance(item, list | tuple):
            size += 2
            stack.extend((inner, level + 1) for inner in item)
        else:
            size += 8
    return size, depth, text


def is_text(value: str) -> bool:
    """False for a string holding a lone surrogate: not Unicode text, so no pattern engine
    (RE2 takes UTF-8) and no log can judge or record it faithfully."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(value: object, limit: int = MAX_ERROR_CHARS) -> str:
    """``value`` as bounded text any UTF-8 store can hold (lone surrogates escaped)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # a repr that recurses too deep or raises
        text = f"<unprintable {type(value).__name__}>"
    return text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")


def error_text(exc: BaseException) -> str:
    """An exception as one bounded line: its type and message."""
    return safe_text(f"{type(exc).__name__}: {exc}")


def validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "call"
        parts.append(f"{where}: {err['msg']}")
    return "invalid call: " + "; ".join(parts)


def now_iso(ts: float) -> str:
    """``ts`` (seconds since the epoch) as ISO 8601 in UTC with a ``Z``: microseconds shown
    unless zero, like ``datetime.isoformat``. The date and time of the second are computed once
    per second (a decision stamps every call)."""
    second = math.floor(ts)
    micro = round((ts - second) * 1_000_000)
    if micro >= 1_000_000:  # rounding carried into the next second
        second, micro = second + 1, micro - 1_000_000
    text = utc_second(second)
    # (``zfill``, not a ``:06d`` format: compiled, a format spec is a slow ``str.format`` call)
    return f"{text}.{str(micro).zfill(6)}Z" if micro else f"{text}Z"



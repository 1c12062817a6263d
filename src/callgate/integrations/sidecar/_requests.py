"""Request bodies of the sidecar: read with a bound, parsed as JSON with a depth limit, and
checked field by field, every refusal naming the field (``Problem``: status, field, message).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from callgate._jsonlimits import MAX_JSON_DEPTH, JSONTooDeepError, loads_bounded

__all__ = ["CALL_FIELDS", "MAX_BODY_BYTES", "MAX_WAIT_S", "Problem", "optional_str",
           "optional_wait", "parse_json", "read_body", "read_json", "valid_call",
           "valid_report"]

#: The largest request body read, in bytes; a longer one is 413.
MAX_BODY_BYTES = 1 << 20
#: The longest a request may wait for an approval, in seconds.
MAX_WAIT_S = 300.0
#: Fields a call object may carry (as ``callgate decide`` reads it).
CALL_FIELDS = frozenset({"tool", "tool_class", "action", "parameters", "taint", "token"})
#: Fields the sidecar sets itself: a request naming one is refused.
_BOUND = frozenset({"principal", "run_id", "id", "sequence", "timestamp"})
_STATUS = ("ok", "error", "denied")


class Problem(Exception):  # noqa: N818 - an HTTP answer, raised to leave a route
    """A request refused: HTTP ``status``, the ``field`` at fault (``body`` for the whole)."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.status = status
        self.field = field
        self.message = message

    def as_json(self) -> dict[str, Any]:
        """The body of the refusal."""
        return {"error": {"status": self.status, "field": self.field, "message": self.message}}


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, at most ``limit`` bytes (413 past it, unread)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Problem(413, "body", f"longer than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, "body", f"longer than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> Any:
    """The JSON value of a body; 400 naming what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem(400, "body", f"not UTF-8 (byte {raw[exc.start]:#04x} at offset "
                                   f"{exc.start})") from exc
    try:
        return loads_bounded(text, MAX_JSON_DEPTH, parse_constant=_no_constant)
    except JSONTooDeepError as exc:
        raise Problem(400, "body", str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise Problem(400, "body", f"not JSON ({exc.msg} at line {exc.lineno} column "
                                   f"{exc.colno})") from exc
    except (ValueError, RecursionError) as exc:
        raise Problem(400, "body", f"not JSON ({exc})") from exc


async def read_json(request: Request, allowed: frozenset[str] | None = None) -> dict[str, Any]:
    """The body as a JSON object whose keys are all in ``allowed`` (when given)."""
    value = parse_json(await read_body(request))
    if not isinstance(value, dict):
        raise Problem(422, "body", "must be a JSON object")
    if allowed is not None:
        for key in value:
            if key not in allowed:
                expected = ", ".join(sorted(allowed)) or "no fields"
                raise Problem(422, key or "(empty name)", f"unknown field; expected {expected}")
    return value


def _text(value: Any, field: str, *, low: int = 1, high: int = 256) -> str:
    if not isinstance(value, str):
        raise Problem(422, field, "must be a string")
    if not low <= len(value) <= high:
        raise Problem(422, field, f"must be {low} to {high} characters")
    return value


def optional_str(body: Mapping[str, Any], name: str, *, high: int = 256) -> str | None:
    """``body[name]`` as a string, or None when absent or null."""
    value = body.get(name)
    return None if value is None else _text(value, name, high=high)


def optional_wait(value: Any, field: str = "wait") -> float:
    """A wait in seconds, 0 to ``MAX_WAIT_S`` (0 when absent)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0 <= value <= MAX_WAIT_S:
        raise Problem(422, field, f"must be a number of seconds from 0 to {MAX_WAIT_S:g}")
    return float(value)


def valid_call(value: Any, field: str = "call") -> dict[str, Any]:
    """A call object as ``callgate decide`` reads it; the kernel judges its content."""
    if not isinstance(value, dict):
        raise Problem(422, field, "must be a JSON object (a call: tool, tool_class, action, "
                                  "parameters)")
    for key in value:
        if key in _BOUND:
            raise Problem(422, f"{field}.{key}", "is set by the sidecar (the key binds the "
                                                 "principal and the run); a request cannot "
                                                 "name it")
        if key not in CALL_FIELDS:
            raise Problem(422, f"{field}.{key or '(empty name)'}", "unknown field of a call")
    for name, high in (("tool", 256), ("tool_class", 64), ("action", 64)):
        if name not in value:
            raise Problem(422, f"{field}.{name}", "is required")
        _text(value[name], f"{field}.{name}", high=high)
    if not isinstance(value.get("parameters", {}), dict):
        raise Problem(422, f"{field}.parameters", "must be a JSON object")
    taint = value.get("taint", [])
    if not isinstance(taint, list) or not all(isinstance(t, str | dict) for t in taint):
        raise Problem(422, f"{field}.taint", "must be a list of labels")
    if value.get("token") is not None:
        _text(value["token"], f"{field}.token", high=8192)
    return value


def valid_report(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call id and the ``Kernel.report`` keyword arguments of a results request."""
    call_id = _text(body.get("call_id"), "call_id")
    status = body.get("status", "ok")
    if status not in _STATUS:
        raise Problem(422, "status", f"must be one of {', '.join(_STATUS)}")
    error = body.get("error")
    if error is not None:
        _text(error, "error", low=0, high=MAX_BODY_BYTES)
    duration = body.get("duration_ms", 0.0)
    if isinstance(duration, bool) or not isinstance(duration, int | float) or \
            not math.isfinite(duration) or duration < 0:
        raise Problem(422, "duration_ms", "must be a non-negative number")
    taint = body.get("taint", [])
    if not isinstance(taint, list) or not all(isinstance(t, str) and 0 < len(t) <= 64
                                              for t in taint):
        raise Problem(422, "taint", "must be a list of label names")
    return call_id, {"status": status, "output": body.get("output"), "error": error,
                     "duration_ms": float(duration), "taint": tuple(taint)}

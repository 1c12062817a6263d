"""Reading AgentDojo's published run files: JSON lines, gzipped or not, both format variants.

A line is one run. The fields of the development files are ``suite_name``, ``pipeline_name``,
``user_task_id``, ``injection_task_id``, ``attack_type``, ``injections``, ``messages``,
``utility``, ``security``, ``error``, ``duration`` and ``path``; the later variant (benchmark
v1.2.x) adds ``agentdojo_package_version``, ``benchmark_version`` and ``evaluation_timestamp``,
writes every message's ``content`` as a list of blocks, and gives tool calls
``placeholder_args``. Any other key, a field of the wrong type, or a message of an unknown shape
is an error naming the file and line; every bad line of a file is reported together.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from callgate._errors import Problem, TraceError
from callgate._jsonlimits import loads_bounded

__all__ = ["AgentDojoRun", "read_runs"]

#: Bad lines reported per file before the rest are summarised.
MAX_PROBLEMS = 50
#: The longest line read (one run), in bytes.
MAX_LINE_BYTES = 64 * 2**20

_REQUIRED = {"suite_name": str, "user_task_id": str, "messages": list}
_OPTIONAL: dict[str, Any] = {
    "pipeline_name": (str, type(None)), "injection_task_id": (str, type(None)),
    "attack_type": (str, type(None)), "injections": (dict, type(None)),
    "utility": (bool, type(None)), "security": (bool, type(None)),
    "error": (str, type(None)), "duration": (int, float, type(None)),
    "path": (str, type(None)),
    # the later variant (benchmark v1.2.x)
    "agentdojo_package_version": (str, type(None)), "benchmark_version": (str, type(None)),
    "evaluation_timestamp": (str, type(None)),
}
_ROLES = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls"},
    "tool": {"role", "content", "tool_call_id", "tool_call", "error"},
}
_CALL_KEYS = {"function", "args", "id", "placeholder_args"}
_BLOCK_TYPES = {"text", "thinking", "redacted_thinking"}
_NO_ATTACK = (None, "none")


@dataclass(frozen=True, slots=True)
class AgentDojoRun:
    """One run with where it came from; ``data`` is the line's object as read."""

    source: str
    line: int
    data: Mapping[str, Any]

    @property
    def suite(self) -> str:
        return str(self.data["suite_name"])

    @property
    def attacked(self) -> bool:
        """Whether the run had an attack (its ``attack_type`` names one)."""
        return self.data.get("attack_type") not in _NO_ATTACK

    @property
    def errored(self) -> bool:
        """Whether the run broke off (``error`` set): it carries no reliable label."""
        return self.data.get("error") is not None

    @property
    def violation(self) -> bool:
        """The label: an attack run whose injected goal was reached (``security`` true)."""
        return self.attacked and self.data.get("security") is True and not self.errored

    @property
    def name(self) -> str:
        """``suite/user_task/injection_task`` (``none`` without an injection)."""
        injection = self.data.get("injection_task_id") or "none"
        return f"{self.suite}/{self.data['user_task_id']}/{injection}"


def read_runs(path: str | os.PathLike[str]) -> Iterator[AgentDojoRun]:
    """The runs of one file, in order. Raises ``TraceError`` naming every bad line (the runs
    already yielded stay valid); a file that cannot be read is one problem."""
    source = os.fspath(path)
    problems: list[Problem] = []
    try:
        for number, raw in enumerate(_lines(source), start=1):
            try:
                text = _text(raw)
                if not text.strip():
                    continue
                data = _parse(text)
            except ValueError as exc:
                problems.append(Problem(str(exc), source, number))
                continue
            if not problems:
                yield AgentDojoRun(source, number, data)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        problems.append(Problem(f"cannot read the file: {exc}", source))
    if problems:
        if len(problems) > MAX_PROBLEMS:
            extra = len(problems) - MAX_PROBLEMS
            problems = [*problems[:MAX_PROBLEMS], Problem(f"… and {extra} more", source)]
        raise TraceError(problems)


def _lines(source: str) -> Iterator[bytes | None]:
    """Each line's bytes, or None for a line longer than ``MAX_LINE_BYTES`` (never held whole:
    the rest of it is read past in bounded pieces)."""
    with open(source, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener: Any = gzip.open if gzipped else open
    with opener(source, "rb") as handle:
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
                yield raw
                continue
            while (rest := handle.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield None


def _text(raw: bytes | None) -> str:
    if raw is None:
        raise ValueError(f"the line is longer than {MAX_LINE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start + 1} of the line)") from exc


def _parse(text: str) -> dict[str, Any]:
    try:
        data = loads_bounded(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(data, dict):
        raise ValueError("a run must be a JSON object")
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ValueError(f"unknown field{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(unknown)}")
    for key, kind in _REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{key} must be a {kind.__name__}")
    for key, kinds in _OPTIONAL.items():
        if (key in data and not isinstance(data[key], kinds)) or (isinstance(data.get(key), bool) \
                and bool not in kinds):
            raise ValueError(f"{key} has the wrong type ({type(data[key]).__name__})")
    for index, message in enumerate(data["messages"]):
        _check_message(index, message)
    return data


def _check_message(index: int, message: Any) -> None:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ValueError(f"{where} must be an object")
    role = message.get("role")
    if role not in _ROLES:
        raise ValueError(f"{where}.role must be one of {', '.join(sorted(_ROLES))}")
    extra = sorted(set(message) - _ROLES[role])
    if extra:
        raise ValueError(f"{where}: unknown field {', '.join(extra)} for a {role} message")
    _check_content(where, message.get("content"))
    for i, call in enumerate(message.get("tool_calls") or []):
        _check_call(f"{where}.tool_calls[{i}]", call)
    if role == "tool" and message.get("tool_call") is not None:
        _check_call(f"{where}.tool_call", message["tool_call"])
    if role == "tool" and not isinstance(message.get("error"), str | type(None)):
        raise ValueError(f"{where}.error must be a string or null")


def _check_content(where: str, content: Any) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ValueError(f"{where}.content must be a string, a list of blocks, or null")
    for i, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") not in _BLOCK_TYPES:
            raise ValueError(f"{where}.content[{i}] must be a block of type "
                             f"{', '.join(sorted(_BLOCK_TYPES))}")
        if not isinstance(block.get("content"), str | type(None)):
            raise ValueError(f"{where}.content[{i}].content must be a string or null")


def _check_call(where: str, call: Any) -> None:
    if not isinstance(call, dict):
        raise ValueError(f"{where} must be an object")
    extra = sorted(set(call) - _CALL_KEYS)
    if extra:
        raise ValueError(f"{where}: unknown field {', '.join(extra)}")
    if not isinstance(call.get("function"), str) or not call["function"]:
        raise ValueError(f"{where}.function must be a non-empty string")
    if not isinstance(call.get("args", {}), dict | type(None)):
        raise ValueError(f"{where}.args must be an object")

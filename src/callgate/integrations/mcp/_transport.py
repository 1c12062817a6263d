"""The gateway's stdio legs: bounded newline-delimited JSON-RPC to a client and to a child.

Both legs read lines through ``read_lines``, which never holds more than ``limit`` bytes of one
line: a longer line is dropped as it streams and reported as ``Oversized``. A line is a message
only when it is UTF-8, JSON nested no deeper than ``MAX_JSON_DEPTH``, and a JSON-RPC message;
otherwise the client gets a JSON-RPC error (with the request's id when one can be read) and the
gateway reads on.

Downstream (``client_stdio``) the gateway takes fd 1 for itself and points fd 1 at stderr, so a
stray write anywhere in the process cannot corrupt the wire: stdout carries MCP messages only.
Upstream (``child_stdio``) the server runs as a child in its own process group with a minimal
environment, its command resolved with the gateway's ``PATH``; leaving the context closes its
stdin, waits briefly, then ends the whole group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from callgate._errors import CallgateError
from callgate._jsonlimits import MAX_JSON_DEPTH, JSONTooDeepError, loads_bounded

__all__ = ["MINIMAL_ENV", "Oversized", "child_environment", "child_stdio", "client_stdio",
           "parse_message", "read_lines"]

log = logging.getLogger("callgate.mcp")

#: What a child server inherits from the gateway's environment when the policy adds nothing.
MINIMAL_ENV = ("PATH", "HOME", "LANG", "TERM", "USER")
_CHUNK = 65536
_STOP_GRACE_S = 2.0


#: Bytes of an oversized line kept, to find the id of the request it answers or asks.
_HEAD_BYTES = 512
#: A message's id when it is its first member (after ``jsonrpc``), as every SDK writes it.
_LEADING_ID = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*'
                         rb'(-?\d{1,18}(?![\d.eE])|"(?:[^"\\\x00-\x1f]|\\.){0,200}")')


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the bound, dropped unread (``size``: the bytes seen; ``head``: the
    first bytes, where its id is)."""

    size: int
    head: bytes = b""

    @property
    def ident(self) -> int | str | None:
        """The message's id when its first bytes name it, else None."""
        found = _LEADING_ID.match(self.head)
        if found is None:
            return None
        try:
            value = json.loads(found.group(1))
        except ValueError:
            return None
        return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _topped(head: bytes, more: bytes) -> bytes:
    """``head`` filled up to ``_HEAD_BYTES`` from ``more`` (the next bytes of its line)."""
    return head if len(head) >= _HEAD_BYTES else head + more[:_HEAD_BYTES - len(head)]


async def read_lines(stream: anyio.abc.ByteReceiveStream, limit: int
                     ) -> AsyncIterator[bytes | Oversized]:
    """Each line of ``stream`` (without its newline), or ``Oversized`` for one over ``limit``."""
    buffer = bytearray()
    dropping = 0
    head = b""
    while True:
        try:
            chunk = await stream.receive(_CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if dropping:
                yield Oversized(dropping + end - start, _topped(head, chunk[start:end]))
                dropping = 0
            elif len(buffer) + end - start > limit:
                yield Oversized(len(buffer) + end - start,
                                (bytes(buffer) + chunk[start:start + _HEAD_BYTES])[:_HEAD_BYTES])
            else:
                buffer += chunk[start:end]
                yield bytes(buffer)
            buffer.clear()
            start = end + 1
        rest = len(chunk) - start
        if dropping or len(buffer) + rest > limit:
            if not dropping:
                head = (bytes(buffer) + chunk[start:start + _HEAD_BYTES])[:_HEAD_BYTES]
            else:  # a line dropped over several chunks: its head may still be short of the id
                head = _topped(head, chunk[start:])
            dropping += len(buffer) + rest
            buffer.clear()
        else:
            buffer += chunk[start:]
    if buffer.strip():
        yield bytes(buffer)


def parse_message(line: bytes) -> types.JSONRPCMessage | types.JSONRPCError | None:
    """A line as a message, or the JSON-RPC error to answer it with; None for a blank line."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(None, types.PARSE_ERROR, f"the message is not UTF-8 (byte offset "
                                               f"{exc.start})")
    try:
        value = loads_bounded(text, MAX_JSON_DEPTH, parse_constant=_no_constant)
    except JSONTooDeepError as exc:
        return _error(None, types.INVALID_REQUEST, str(exc))
    except (json.JSONDecodeError, ValueError) as exc:
        return _error(None, types.PARSE_ERROR, f"the message is not JSON: {exc}")
    try:
        return types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValueError:
        ident = value.get("id") if isinstance(value, dict) else None
        if not isinstance(ident, int | str) or isinstance(ident, bool):
            ident = None
        return _error(ident, types.INVALID_REQUEST, "the message is not a JSON-RPC 2.0 request, "
                                                   "notification or response")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _error(ident: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=ident,
                              error=types.ErrorData(code=code, message=message))


def _encode(message: SessionMessage) -> bytes:
    return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                MemoryObjectSendStream[SessionMessage]]


@contextlib.asynccontextmanager
async def client_stdio(limit: int) -> AsyncIterator[Streams]:
    """The client leg: messages read from stdin, and a stream whose messages go to stdout."""
    wire_out = os.dup(1)
    os.dup2(2, 1)  # stray writes to stdout land on stderr from here on
    in_send, in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    out_send, out_recv = anyio.create_memory_object_stream[SessionMessage](16)
    replies = out_send.clone()

    async def pump_in() -> None:
        reader = _FdStream(os.dup(0))
        try:
            async with in_send:
                async for line in read_lines(reader, limit):
                    if isinstance(line, Oversized):
                        await replies.send(SessionMessage(_error(
                            line.ident, types.INVALID_REQUEST,
                            f"the message of {line.size} bytes exceeds the gateway's bound of "
                            f"{limit} bytes; not read")))
                        continue
                    parsed = parse_message(line)
                    if isinstance(parsed, types.JSONRPCError):
                        await replies.send(SessionMessage(parsed))
                    elif parsed is not None:
                        await in_send.send(SessionMessage(parsed))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the server is shutting down: nothing reads the client any more
        finally:
            await reader.aclose()
        await replies.aclose()

    drained = anyio.Event()

    async def pump_out() -> None:
        sink = _FdStream(wire_out)
        try:
            async with out_recv:
                async for message in out_recv:
                    await sink.send(_encode(message))
        except OSError as exc:  # the client is gone: nothing more can reach it
            log.warning("the client's end of stdout is closed: %s", exc)
        finally:
            drained.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        tg.start_soon(pump_out)
        try:
            yield in_recv, out_send
        finally:
            # what the server already answered still reaches the client (bounded)
            await out_send.aclose()
            await replies.aclose()
            with anyio.move_on_after(_STOP_GRACE_S):
                await drained.wait()
            tg.cancel_scope.cancel()


class _FdStream(anyio.abc.ByteReceiveStream):
    """A pipe descriptor read and written without blocking, on the event loop itself (no
    worker thread per message)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        while True:
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd, view):]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def child_environment(extra: Mapping[str, str], pass_env: Sequence[str],
                      environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``MINIMAL_ENV`` and ``pass_env`` from ``environ``, then
    ``extra`` (values the policy writes out)."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in (*MINIMAL_ENV, *pass_env) if k in source}
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def child_stdio(command: str, args: Sequence[str], *, env: Mapping[str, str],
                      cwd: str | None, limit: int) -> AsyncIterator[Streams]:
    """The server leg: a child process speaking MCP on its stdin and stdout."""
    path = shutil.which(command, path=os.environ.get("PATH", os.defpath))
    if path is None:
        raise CallgateError(f"MCP server command {command!r} is not found on PATH")
    try:
        process = await anyio.open_process([path, *args], env=dict(env), cwd=cwd,
                                           stderr=sys.stderr, start_new_session=True)
    except OSError as exc:
        raise CallgateError(f"cannot start MCP server {command!r}: {exc}") from exc
    in_send, in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    out_send, out_recv = anyio.create_memory_object_stream[SessionMessage](16)

    async def pump_in() -> None:
        assert process.stdout is not None
        async with in_send:
            async for read in read_lines(process.stdout, limit):
                line = read
                if isinstance(read, Oversized) and read.ident is not None:
                    # the request it answers fails now, rather than waiting out its timeout
                    line = _error(read.ident, types.INTERNAL_ERROR, (
                        f"MCP server {command!r} answered with {read.size} bytes, over the "
                        f"gateway's bound of {limit} bytes; dropped")).model_dump_json(
                            by_alias=True).encode()
                parsed = None if isinstance(line, Oversized) else parse_message(line)
                if isinstance(parsed, types.JSONRPCMessage | types.JSONRPCError) and not (
                        isinstance(parsed, types.JSONRPCError) and parsed.id is None):
                    try:
                        await in_send.send(SessionMessage(parsed))
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        return  # the client side is closing: nobody reads the server any more
                elif line:
                    log.warning("MCP server %s sent %s; dropped", command,
                                f"{line.size} bytes over the bound" if isinstance(line, Oversized)
                                else "a line that is not a JSON-RPC message")

    async def pump_out() -> None:
        assert process.stdin is not None
        async with out_recv:
            try:
                async for message in out_recv:
                    await process.stdin.send(_encode(message))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        tg.start_soon(pump_out)
        try:
            yield in_recv, out_send
        finally:
            with anyio.CancelScope(shield=True):
                await out_send.aclose()
                await _stop(process)
            tg.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    """Close the child's stdin, give it a moment, then end its whole process group."""
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
    with anyio.move_on_after(_STOP_GRACE_S):
        await process.wait()
    # The group, not only the leader: a launcher (npx, uvx) leaves the server as its child.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with anyio.move_on_after(_STOP_GRACE_S):
            await process.wait()
        if not _group_alive(process.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""One upstream MCP server behind the gateway: connected with the ``mcp`` SDK's ``Client``.

The client negotiates the era itself (``server/discover`` first, the ``initialize`` handshake
for servers that predate 2026-07-28), so servers of either era work behind the gateway. Every
request is bounded by the server's timeout; a server that died or stalls gives an error, never a
hang. A server whose connection is gone is marked down, so later calls are refused at once; one
that times out fails that request only, until ``MAX_STALLS`` requests in a row have timed out.
Responses are not cached: each ``tools/list`` reaches the server, which is what lets the pins see
a changed definition.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.subscriptions import event_to_notification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from callgate._errors import CallgateError
from callgate.integrations.mcp._transport import child_environment, child_stdio
from callgate.policy._settings import McpServerSettings

__all__ = ["Upstream", "UpstreamError"]

log = logging.getLogger("callgate.mcp")

#: Pages of a listing read before the gateway stops (a paginator that never ends cannot hang it).
MAX_PAGES = 100
#: Requests in a row that time out before the server is taken for stalled and marked down.
MAX_STALLS = 3

Notify = Callable[[str, types.ServerNotification], Awaitable[None]]


class UpstreamError(CallgateError):
    """The upstream server is down, timed out, or answered with an error."""


class Upstream:
    """A connected upstream server (enter with ``async with``)."""

    def __init__(self, name: str, settings: McpServerSettings, *, timeout_s: float,
                 limit: int, notify: Notify | None = None) -> None:
        self.name = name
        self.settings = settings
        self.timeout_s = settings.timeout_s or timeout_s
        self._limit = limit
        self._notify = notify
        self._client: Client | None = None
        self._stack = contextlib.AsyncExitStack()
        self.down: str | None = None
        self._stalls = 0

    async def __aenter__(self) -> Upstream:
        client = Client(self._transport(), mode="auto", cache=None,
                        read_timeout_seconds=self.timeout_s, message_handler=self._on_message)
        try:
            # The handshake is bounded by the client's read timeout: a scope around entering
            # would close before the client's own task group does.
            self._client = await self._stack.enter_async_context(client)
        except Exception as exc:
            await self._stack.aclose()
            raise UpstreamError(f"cannot connect to MCP server {self.name!r}: "
                                f"{_describe(exc)}") from exc
        if self.protocol_version in MODERN_PROTOCOL_VERSIONS and self._notify is not None:
            # A 2026-07-28 server says what changed only on a subscriptions/listen stream.
            tasks = await self._stack.enter_async_context(anyio.create_task_group())
            self._stack.callback(tasks.cancel_scope.cancel)
            tasks.start_soon(self._listen)
        return self

    async def _listen(self) -> None:
        """Relay the server's change events as the notifications a handshake server sends."""
        caps = self.capabilities
        tools = bool(caps.tools and caps.tools.list_changed)
        prompts = bool(caps.prompts and caps.prompts.list_changed)
        resources = bool(caps.resources and caps.resources.list_changed)
        if not (tools or prompts or resources) or self._notify is None:
            return
        try:
            async with self.client.listen(tools_list_changed=tools, prompts_list_changed=prompts,
                                          resources_list_changed=resources) as subscription:
                async for event in subscription:
                    await self._notify(self.name, event_to_notification(event, {}))
        except Exception as exc:  # the server ended the stream: its changes are seen at listing
            log.warning("MCP server %s: change events stopped: %s", self.name, _describe(exc))

    async def __aexit__(self, *exc: object) -> None:
        # Unwound in the task and scope that entered it (anyio's rule for task groups); the
        # child transport bounds its own stop.
        await self._stack.aclose()

    @property
    def client(self) -> Client:
        if self._client is None:
            raise UpstreamError(f"MCP server {self.name!r} is not connected")
        return self._client

    @property
    def capabilities(self) -> types.ServerCapabilities:
        return self.client.server_capabilities

    @property
    def protocol_version(self) -> str:
        return self.client.protocol_version

    def _transport(self) -> Any:
        s = self.settings
        if s.url is not None:
            http = httpx2.AsyncClient(headers=dict(s.headers),
                                      timeout=httpx2.Timeout(self.timeout_s))
            self._stack.push_async_callback(http.aclose)
            return streamable_http_client(s.url, http_client=http)
        assert s.command is not None
        return child_stdio(s.command, s.args, env=child_environment(s.env, s.pass_env),
                           cwd=s.cwd, limit=self._limit)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            log.warning("MCP server %s: %s", self.name, _describe(message))
        elif isinstance(message, types.ServerNotification) and self._notify is not None:
            await self._notify(self.name, message)

    async def request(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """One bounded request; its failure as ``UpstreamError`` (the server marked down when
        the connection is gone, or after ``MAX_STALLS`` timeouts in a row)."""
        if self.down is not None:
            raise UpstreamError(self.down)
        try:
            with anyio.fail_after(self.timeout_s):
                answer = await call()
        except TimeoutError as exc:
            why = f"MCP server {self.name!r} did not answer {what} within {self.timeout_s:g} s"
            self._stalls += 1
            if self._stalls >= MAX_STALLS:
                self.down = f"{why} ({self._stalls} requests in a row timed out)"
            raise UpstreamError(why) from exc
        except Exception as exc:
            self._stalls = 0
            why = _describe(exc)
            if _connection_lost(exc):
                self.down = f"MCP server {self.name!r} is gone: {why}"
                raise UpstreamError(self.down) from exc
            raise UpstreamError(f"MCP server {self.name!r} failed {what}: {why}") from exc
        self._stalls = 0
        return answer

    async def list_tools(self) -> list[types.Tool]:
        """Every tool, page by page (at most ``MAX_PAGES``)."""
        return await self._pages("tools/list", lambda c: self.client.list_tools(cursor=c),
                                 lambda r: r.tools)

    async def list_resources(self) -> list[types.Resource]:
        return await self._pages("resources/list", lambda c: self.client.list_resources(
            cursor=c), lambda r: r.resources)

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        return await self._pages("resources/templates/list",
                                 lambda c: self.client.list_resource_templates(cursor=c),
                                 lambda r: r.resource_templates)

    async def list_prompts(self) -> list[types.Prompt]:
        return await self._pages("prompts/list", lambda c: self.client.list_prompts(cursor=c),
                                 lambda r: r.prompts)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None,
                        progress: ProgressFnT | None = None) -> types.CallToolResult:
        result: types.CallToolResult = await self.request(
            f"tools/call {name}", lambda: self.client.call_tool(
                name, arguments, read_timeout_seconds=self.timeout_s,
                progress_callback=progress))
        return result

    async def _pages(self, what: str, fetch: Callable[[str | None], Awaitable[Any]],
                     items: Callable[[Any], list[Any]]) -> list[Any]:
        out: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self.request(what, functools.partial(fetch, cursor))
            out.extend(items(page))
            cursor = page.next_cursor
            if cursor is None:
                break
        return out


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream
                  | ConnectionError):
        return True
    code = getattr(getattr(exc, "error", None), "code", None)
    return code == types.CONNECTION_CLOSED or (isinstance(exc, BaseExceptionGroup) and any(
        _connection_lost(e) for e in exc.exceptions))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"

"""Running the gateway: the stdio proxy in front of one server, the HTTP endpoint in front of many.

``run_proxy`` serves one client on stdin/stdout until it closes stdin, then ends the upstream
child and returns. ``serve_http`` serves Streamable HTTP at ``/mcp`` (both eras: handshake-era
clients get an ``Mcp-Session-Id`` and one kernel run per session; 2026-07-28 requests carry no
session and share one run, so taint and statements see all of them) until it is stopped.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections.abc import Sequence
from pathlib import Path

import anyio
from mcp.server.transport_security import TransportSecuritySettings

from callgate._errors import CallgateError
from callgate.integrations.mcp._gateway import MAX_RUNS, Gateway
from callgate.integrations.mcp._pins import PinStore, default_state_dir
from callgate.integrations.mcp._transport import client_stdio
from callgate.policy._loader import LoadedPolicy
from callgate.policy._settings import McpServerSettings, McpSettings

__all__ = ["proxy_servers", "run_proxy", "serve_http"]

log = logging.getLogger("callgate.mcp")


def proxy_servers(settings: McpSettings, name: str, command: Sequence[str],
                  pass_env: Sequence[str] = ()) -> dict[str, McpServerSettings]:
    """The one upstream of ``callgate mcp proxy``: the command given, with what the policy's
    ``mcp.servers.NAME`` says of it (source, environment, timeouts), and ``pass_env`` (names
    of the proxy's environment the child gets too, as a wrapped client entry's ``env``)."""
    if not command:
        raise CallgateError("give the server's command after --, e.g. "
                            "`callgate mcp proxy --policy p.yaml -- mcp-server-git`")
    declared = settings.servers.get(name)
    if declared is not None and declared.url is not None:
        raise CallgateError(f"the policy declares server {name!r} with a url; the stdio proxy "
                            f"runs a command (use `callgate mcp serve` for url servers)")
    base = declared or McpServerSettings(command=command[0])
    passed = tuple(dict.fromkeys((*base.pass_env, *pass_env)))
    return {name: base.model_copy(update={"command": command[0], "args": tuple(command[1:]),
                                          "pass_env": passed})}


def _pins(settings: McpSettings, pins: str | None, state: Path) -> PinStore:
    return PinStore(pins or settings.pins or state / "mcp-pins.db")


def run_proxy(loaded: LoadedPolicy, *, name: str, command: Sequence[str], audit: str | None,
              pins: str | None = None, pass_env: Sequence[str] = ()) -> int:
    """Serve MCP on stdin/stdout in front of ``command``; the exit code."""
    settings = loaded.policy.mcp or McpSettings()
    state = default_state_dir()
    store = _pins(settings, pins, state)
    gateway = Gateway(loaded, proxy_servers(settings, name, command, pass_env), pins=store,
                      audit=audit or str(_audit_default(state)), aggregate=False)

    async def main() -> int:
        async with contextlib.AsyncExitStack() as stack:
            failures = await gateway.connect(stack)
            if failures:
                for failure in failures:
                    log.error("callgate mcp proxy: %s", failure)
                return 1
            server = gateway.server()
            options = server.create_initialization_options(gateway.notification_options())
            async with client_stdio(settings.max_message_bytes) as (read, write):
                await server.run(read, write, options)
        return 0

    try:
        return anyio.run(main)
    finally:
        store.close()


def serve_http(loaded: LoadedPolicy, *, host: str, port: int, audit: str | None,
               pins: str | None = None, allow_remote: bool = False) -> int:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` in front of the policy's servers."""
    import uvicorn

    settings = loaded.policy.mcp or McpSettings()
    if not settings.servers:
        raise CallgateError("the policy's mcp.servers names no server to serve")
    unreachable = [n for n, s in settings.servers.items() if s.command is None and s.url is None]
    if unreachable:
        raise CallgateError(f"mcp.servers.{unreachable[0]} gives neither command nor url")
    if not allow_remote and not _loopback(host):
        raise CallgateError(f"{host} is not a loopback address: the endpoint has no "
                            f"authentication of its own; pass --allow-remote to serve it anyway")
    state = default_state_dir()
    store = _pins(settings, pins, state)
    gateway = Gateway(loaded, settings.servers, pins=store,
                      audit=audit or str(_audit_default(state)), aggregate=True)

    async def main() -> int:
        async with contextlib.AsyncExitStack() as stack:
            for failure in await gateway.connect(stack):
                log.error("callgate mcp serve: %s (its tools are refused)", failure)
            app = gateway.server().streamable_http_app(
                host=host, max_request_body_size=settings.max_message_bytes,
                max_sessions=MAX_RUNS, transport_security=_security(host, port))
            config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                    lifespan="on")
            await uvicorn.Server(config).serve()
        return 0

    try:
        return anyio.run(main)
    finally:
        store.close()


def _security(host: str, port: int) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for any loopback address (the SDK's own covers three names):
    only requests addressed to this host and port, from pages of it, are served."""
    if not _loopback(host):
        return None
    shown = f"[{host}]" if ":" in host else host
    hosts = [f"{shown}:{port}", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts])


def _audit_default(state: Path) -> Path:
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    return state / "mcp-audit.db"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

"""The gateway: an MCP server in front of upstream MCP servers, every request through the kernel.

``Gateway`` holds the upstream connections, the pins and one ``Gate`` (kernel run) per
downstream connection; ``Gateway.server()`` is the ``mcp`` SDK's low-level ``Server`` whose
handlers relay to the upstreams. The SDK serves both protocol eras on the client side (the
``initialize`` handshake, or 2026-07-28 requests that carry version and capabilities in their
``_meta``); ``Upstream`` negotiates either era with each server.

The order for a ``tools/call``: route the name to its server; refuse a tool no listing showed, a
tool whose pinned definition changed, or a server that is down; otherwise the kernel decides;
``require-approval`` asks the user (``_approval``); an allowed call is forwarded, and its result
is reported to the kernel (status, bounded observation, the server's declared taint) before the
client sees it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from callgate._errors import CallgateError
from callgate._model import Decision, Reason
from callgate.audit import AuditLog, open_store
from callgate.integrations.mcp._approval import Approvals
from callgate.integrations.mcp._gate import (
    OBSERVATION_LIMIT,
    Gate,
    call_of,
    kernel_tool,
    never_allowed,
    observation,
    untrusted,
)
from callgate.integrations.mcp._pins import PinStore
from callgate.integrations.mcp._upstream import Upstream, UpstreamError
from callgate.kernel import Kernel
from callgate.policy._loader import LoadedPolicy, load_policy
from callgate.policy._settings import McpServerSettings, McpSettings

__all__ = ["Gateway"]

log = logging.getLogger("callgate.mcp")

Ctx = ServerRequestContext[Any, Any]
#: Downstream runs kept at once (HTTP sessions); the least recently used is ended first, and
#: its connection is refused from then on (a clean run would forget its taint and history).
MAX_RUNS = 256
#: Connections whose run was ended that the gateway still recognises (to refuse them).
MAX_ENDED = 65536
#: The run 2026-07-28 requests share: never ended to make room.
_SHARED = "http:stateless"


class RunEndedError(CallgateError):
    """The downstream connection's run was ended to make room for others."""


class Gateway:
    """The upstream servers, their pins, and one kernel run per downstream connection."""

    def __init__(self, loaded: LoadedPolicy, servers: Mapping[str, McpServerSettings], *,
                 pins: PinStore, audit: str | None, aggregate: bool,
                 working_dir: str | None = None) -> None:
        self.loaded = loaded
        self.settings: McpSettings = loaded.policy.mcp or McpSettings()
        self.servers = dict(servers)
        # servers whose own policy file decides their calls (a principal of their own)
        self.own_policies = own_policies(loaded, self.servers)
        self.pins = pins
        # One store for every run of the process: a SQLite log has one writer chain.
        self.audit: AuditLog | None = None if audit is None else open_store(audit)
        self.aggregate = aggregate
        self.working_dir = working_dir
        self.upstreams: dict[str, Upstream] = {}
        self._gates: OrderedDict[str, Gate] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._sessions: dict[str, ServerSession] = {}
        self._known: dict[str, set[str]] = {}
        self._suspended: dict[str, dict[str, str]] = {}
        self._resources: dict[str, str] = {}
        self._hidden: dict[str, bool] = {}
        self._input_schemas: dict[str, Mapping[str, Any]] = {}
        self.approvals = Approvals(os.urandom(32), timeout_s=self.settings.timeout_s)
        # 2026-07-28 clients hear of changes on subscriptions/listen streams fed by this bus
        self.events = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.events)

    # -- lifecycle --------------------------------------------------------------------------

    async def connect(self, stack: contextlib.AsyncExitStack) -> list[str]:
        """Connect every upstream (a failure marks that server down); the failures."""
        failures: list[str] = []
        for name, spec in self.servers.items():
            upstream = Upstream(name, spec, timeout_s=self.settings.timeout_s,
                                limit=self.settings.max_message_bytes, notify=self._upstream_said)
            try:
                self.upstreams[name] = await stack.enter_async_context(upstream)
            except UpstreamError as exc:
                upstream.down = str(exc)
                self.upstreams[name] = upstream
                failures.append(str(exc))
        stack.callback(self.close)
        return failures

    def close(self) -> None:
        """End every run (open obligations are judged and audited), then close the log."""
        while self._gates:
            _, gate = self._gates.popitem(last=False)
            gate.kernel.end_run()
        if self.audit is not None:
            self.audit.close()
            self.audit = None

    def policy_of(self, server: str | None) -> LoadedPolicy:
        """The policy that decides ``server``'s calls."""
        return self.own_policies.get(server or "", self.loaded)

    def gate_for(self, ctx: Ctx, server: str | None = None) -> Gate:
        """The run that decides ``server``'s calls on the downstream connection of ``ctx``: the
        connection's run, or its own run under the server's own policy."""
        key = _connection_key(ctx)
        own = server is not None and server in self.own_policies
        if own:
            key = f"{key}|{server}"
        gate = self._gates.get(key)
        if gate is None:
            if key in self._ended:
                raise RunEndedError(
                    "this connection's run was ended to make room for other connections "
                    f"(more than {MAX_RUNS} at once); reconnect to start a new run")
            kernel = Kernel(self.policy_of(server if own else None), audit=self.audit,
                            working_dir=self.working_dir, run_id=f"mcp_{uuid.uuid4().hex}")
            gate = self._gates[key] = Gate(kernel)
            self._make_room()
        self._gates.move_to_end(key)
        self._sessions[key] = ctx.session
        return gate

    def _make_room(self) -> None:
        """End the least recently used runs beyond ``MAX_RUNS`` (never the shared one)."""
        for old_key in list(self._gates):
            if len(self._gates) <= MAX_RUNS:
                return
            if old_key.split("|", 1)[0] == _SHARED:
                continue
            old = self._gates.pop(old_key)
            self._sessions.pop(old_key, None)
            self._ended[old_key] = None
            while len(self._ended) > MAX_ENDED:
                self._ended.popitem(last=False)
            old.kernel.end_run()

    # -- names ------------------------------------------------------------------------------

    def exposed(self, server: str, name: str) -> str:
        return f"{server}{self.settings.separator}{name}" if self.aggregate else name

    def route(self, exposed: str) -> tuple[str, str] | None:
        """(server, name) of an exposed tool or prompt name, or None."""
        if not self.aggregate:
            return next(iter(self.servers)), exposed
        server, sep, name = exposed.partition(self.settings.separator)
        return (server, name) if sep and server in self.servers and name else None

    # -- the handlers -----------------------------------------------------------------------

    def server(self) -> Server[Any]:
        """The low-level SDK server whose handlers relay to the upstreams."""
        offers = {cap for up in self.upstreams.values() if up.down is None
                  for cap in _offered(up.capabilities)} if self.upstreams else set()
        handlers: dict[str, Any] = {"on_list_tools": self._list_tools,
                                    "on_call_tool": self._call_tool,
                                    "on_subscriptions_listen": self.listen}
        if "resources" in offers:
            handlers |= {"on_list_resources": self._list_resources,
                         "on_list_resource_templates": self._list_templates,
                         "on_read_resource": self._read_resource}
        if "prompts" in offers:
            handlers |= {"on_list_prompts": self._list_prompts, "on_get_prompt": self._get_prompt}
        if "completions" in offers:
            handlers["on_completion"] = self._complete
        server: Server[Any] = Server(
            "callgate-mcp-gateway", version=_version(), instructions=self._instructions(),
            get_tool_input_schema=self._input_schemas.get, **handlers)
        # The SDK's tracing middleware costs time on every message and exports nothing here.
        server.middleware = []
        return server

    def notification_options(self) -> NotificationOptions:
        return NotificationOptions(prompts_changed=True, resources_changed=True,
                                   tools_changed=True)

    async def _list_tools(self, ctx: Ctx, params: Any) -> types.ListToolsResult:
        self.gate_for(ctx)
        tools: list[types.Tool] = []
        for server, upstream in self.upstreams.items():
            if upstream.down is not None:
                continue
            try:
                reviewed = await self._review(server, upstream)
            except UpstreamError as exc:  # one server failing hides its tools, not the others'
                log.warning("MCP server %s: its tools are not listed: %s", server, exc)
                continue
            for tool in reviewed:
                if self._hide(server, tool.name):
                    continue
                tools.append(tool.model_copy(update={"name": self.exposed(server, tool.name)}))
        return types.ListToolsResult(tools=tools)

    async def _review(self, server: str, upstream: Upstream) -> list[types.Tool]:
        """The server's tools now, pinned; the tools whose definition changed left out."""
        listed = await upstream.list_tools()
        wire = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in listed]
        changed = await anyio.to_thread.run_sync(self.pins.review, server, wire)
        self._known[server] = {t.name for t in listed}
        # 2026-07-28 HTTP requests are checked against the listed schema; from here, not by
        # listing every server again on each call
        self._input_schemas.update({self.exposed(server, t.name): t.input_schema
                                    for t in listed if t.name not in changed})
        self._suspended[server] = changed
        for why in changed.values():
            log.warning("%s", why)
        return [t for t in listed if t.name not in changed]

    def _hide(self, server: str, tool: str) -> bool:
        spec = self.servers[server]
        hide = spec.hide_denied if spec.hide_denied is not None else self.settings.hide_denied
        if not hide:
            return False
        name = kernel_tool(server, tool)
        if name not in self._hidden:
            self._hidden[name] = never_allowed(self.policy_of(server).policy, name)
        return self._hidden[name]

    async def _refusal(self, server: str, tool: str) -> Reason | None:
        """Why a call to ``tool`` is refused before the kernel is asked, or None."""
        upstream = self.upstreams[server]
        if upstream.down is not None:
            return Reason(id="mcp.upstream-down", check="mcp", message=upstream.down)
        if server not in self._known:
            try:
                await self._review(server, upstream)
            except UpstreamError as exc:
                return Reason(id="mcp.upstream-error", check="mcp", message=str(exc))
        if tool not in self._known.get(server, set()):
            return Reason(id="mcp.unknown-tool", check="mcp", message=(
                f"server {server!r} lists no tool {tool!r}; only listed (and pinned) tools "
                f"can be called"))
        why = self._suspended.get(server, {}).get(tool)
        return None if why is None else Reason(id="mcp.tool-changed", check="mcp", message=why)

    async def _call_tool(self, ctx: Ctx, params: types.CallToolRequestParams
                         ) -> types.CallToolResult | types.InputRequiredResult:
        routed = self.route(params.name)
        try:
            gate = self.gate_for(ctx, None if routed is None else routed[0])
        except RunEndedError as exc:
            return _error_result(f"callgate: {exc}")
        if routed is None:
            return _error_result(f"callgate: no server offers a tool named {params.name!r}")
        server, tool = routed
        call = gate.prepare(call_of(server, tool, params.arguments))
        # The refusals come first: an approval given before a tool's definition changed (or its
        # server went down) does not carry the retry past them.
        refusal = await self._refusal(server, tool)
        resumed = self.approvals.resume(params, call, gate)
        if resumed is not None and refusal is not None:
            gate.report(resumed[0], output=None, error=refusal.message, taint=(),
                        status="denied")
            resumed = None
        if resumed is not None:
            decision, answer = resumed
        else:
            decision = gate.decide(call, refusal)
            answer = None
        if decision.verdict == "deny":
            return gate.denied_result(decision, params.name)
        if decision.verdict == "require-approval":
            if answer is None:
                asked = await self.approvals.ask(ctx, params, call, decision, gate)
                if isinstance(asked, types.InputRequiredResult):
                    return asked
                answer = asked
            if answer is not True:
                gate.report(decision, output=None, error=str(answer), taint=(), status="denied")
                return gate.denied_result(Decision(
                    verdict="deny", call_id=decision.call_id, witness=decision.witness,
                    reasons=(*decision.reasons, Reason(id="approval.refused", check="approval",
                                                       message=str(answer)))), params.name)
        return await self._forward(ctx, gate, decision, server=server, tool=tool,
                                   arguments=call["parameters"], exposed=params.name)

    async def _forward(self, ctx: Ctx, gate: Gate, decision: Decision, *, server: str,
                       tool: str, arguments: dict[str, Any], exposed: str
                       ) -> types.CallToolResult:
        """Send the call as it was checked (canonical paths) and report what came back."""
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            with contextlib.suppress(Exception):
                await ctx.session.report_progress(progress, total, message)

        started = time.monotonic()
        source = untrusted(self.servers[server], tool)
        try:
            result = await self.upstreams[server].call_tool(tool, arguments, progress)
        except UpstreamError as exc:
            # the text may quote the server's own error message: the model reads it, so the
            # kernel observes it as the call's output
            text = f"callgate: {exc}"
            recorded = gate.report(decision, output=text, error=str(exc), taint=source,
                                   duration_ms=_ms_since(started))
            return _error_result(text if recorded.output is not None else
                                 f"callgate withheld the error of {exposed}: {recorded.error}")
        except anyio.get_cancelled_exc_class():
            # the client cancelled (the SDK tells the server); the call's end is on record
            gate.report(decision, output=None, error="cancelled by the client", taint=(),
                        duration_ms=_ms_since(started))
            raise
        # An error result is observed like any other: its text reaches the model as well.
        recorded = gate.report(decision, output=observation(result),
                               error="the tool reported an error" if result.is_error else None,
                               taint=source, duration_ms=_ms_since(started))
        if recorded.output is None:  # withheld: no guard could inspect it, or no audit took it
            return _error_result(f"callgate withheld the output of {exposed}: "
                                 f"{recorded.error}")
        return result

    async def _list_resources(self, ctx: Ctx, params: Any) -> types.ListResourcesResult:
        out: list[types.Resource] = []
        for server, upstream in self._offering("resources"):
            for resource in await upstream.list_resources():
                self._resources[str(resource.uri)] = server
                out.append(resource)
        return types.ListResourcesResult(resources=out)

    async def _list_templates(self, ctx: Ctx, params: Any) -> types.ListResourceTemplatesResult:
        out: list[types.ResourceTemplate] = []
        for _, upstream in self._offering("resources"):
            out.extend(await upstream.list_resource_templates())
        return types.ListResourceTemplatesResult(resource_templates=out)

    async def _read_resource(self, ctx: Ctx, params: types.ReadResourceRequestParams
                             ) -> types.ReadResourceResult:
        uri = str(params.uri)
        offering = [name for name, _ in self._offering("resources")]
        server = self._resources.get(uri) or (offering[0] if len(offering) == 1 else None)
        if server is None:
            raise _mcp_error(types.INVALID_PARAMS, f"no server listed the resource {uri!r}")
        gate = self.gate_for(ctx, server)
        upstream = self.upstreams[server]
        refusal = None if upstream.down is None else Reason(
            id="mcp.upstream-down", check="mcp", message=upstream.down)
        decision = gate.decide(call_of(server, "read_resource", {"uri": uri}, action="read"),
                               refusal)
        if decision.verdict != "allow":
            if decision.verdict == "require-approval":
                gate.report(decision, output=None, error="resources cannot be approved",
                            taint=(), status="denied")
            raise _mcp_error(types.INVALID_REQUEST, gate.explain(decision, uri))
        try:
            result: types.ReadResourceResult = await upstream.request(
                "resources/read", lambda: upstream.client.read_resource(uri))
        except UpstreamError as exc:
            recorded = gate.report(decision, output=f"callgate: {exc}", error=str(exc),
                                   taint=untrusted(self.servers[server], "read_resource"))
            raise _mcp_error(types.INTERNAL_ERROR, f"callgate: {exc}" if recorded.output
                             is not None else f"callgate withheld the error reading {uri}"
                             ) from exc
        recorded = gate.report(decision, output=observation(result), error=None,
                               taint=untrusted(self.servers[server], "read_resource"))
        if recorded.output is None:
            raise _mcp_error(types.INTERNAL_ERROR, f"callgate withheld the resource {uri}: "
                                                   f"{recorded.error}")
        return result

    async def _list_prompts(self, ctx: Ctx, params: Any) -> types.ListPromptsResult:
        out: list[types.Prompt] = []
        for server, upstream in self._offering("prompts"):
            out.extend(p.model_copy(update={"name": self.exposed(server, p.name)})
                       for p in await upstream.list_prompts())
        return types.ListPromptsResult(prompts=out)

    async def _get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams
                          ) -> types.GetPromptResult:
        routed = self.route(params.name)
        if routed is None or self.upstreams[routed[0]].down is not None:
            raise _mcp_error(types.INVALID_PARAMS, f"no server offers a prompt {params.name!r}")
        upstream = self.upstreams[routed[0]]
        result: types.GetPromptResult = await upstream.request(
            "prompts/get", lambda: upstream.client.get_prompt(routed[1], params.arguments))
        # The prompt's text goes before the model: the run's trace and audit log see it, with
        # the server's declared source, as they see a tool's output.
        text = "\n".join(getattr(m.content, "text", f"[{m.content.type}]")
                         for m in result.messages)[:OBSERVATION_LIMIT]
        with contextlib.suppress(RunEndedError):
            self.gate_for(ctx, routed[0]).kernel.note(
                "mcp_prompt", {"server": routed[0], "prompt": routed[1],
                               "arguments": dict(params.arguments or {})},
                output=text, taint=("tool-output", *untrusted(self.servers[routed[0]],
                                                               routed[1])))
        return result

    async def _complete(self, ctx: Ctx, params: types.CompleteRequestParams
                        ) -> types.CompleteResult:
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            routed = self.route(ref.name)
            if routed is None:
                raise _mcp_error(types.INVALID_PARAMS, f"no server offers {ref.name!r}")
            server, ref = routed[0], ref.model_copy(update={"name": routed[1]})
        else:
            offering = [name for name, _ in self._offering("resources")]
            if not offering:
                raise _mcp_error(types.INVALID_PARAMS, "no server offers resources")
            server = offering[0]
        upstream = self.upstreams[server]
        argument = {"name": params.argument.name, "value": params.argument.value}
        context = params.context.arguments if params.context else None
        result: types.CompleteResult = await upstream.request(
            "completion/complete", lambda: upstream.client.complete(ref, argument, context))
        return result

    def _offering(self, capability: str) -> list[tuple[str, Upstream]]:
        return [(n, u) for n, u in self.upstreams.items()
                if u.down is None and capability in _offered(u.capabilities)]

    async def _upstream_said(self, server: str, note: types.ServerNotification) -> None:
        """Relay an upstream's list-changed and resource-updated notifications; a changed tool
        list is pinned at once, so a changed definition is suspended before anyone lists it."""
        if isinstance(note, types.ToolListChangedNotification):
            with contextlib.suppress(UpstreamError):
                await self._review(server, self.upstreams[server])
        event = _event_of(note)
        if event is None:
            return
        await self.events.publish(event)
        for session in list(self._sessions.values()):
            if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
                continue  # they listen on the bus
            with contextlib.suppress(Exception):
                await session.send_notification(note)

    def _instructions(self) -> str | None:
        """The upstreams' instructions for the client, each as pinned: a server whose
        instructions changed since they were pinned has them withheld until trusted."""
        parts: list[str] = []
        for name, upstream in self.upstreams.items():
            text = upstream.client.instructions if upstream.down is None else None
            if not text:
                continue
            why = self.pins.review_instructions(name, text)
            if why is not None:
                log.warning("%s", why)
                continue
            parts.append(text)
        return "\n\n".join(parts) or None


def own_policies(loaded: LoadedPolicy, servers: Mapping[str, McpServerSettings]
                 ) -> dict[str, LoadedPolicy]:
    """The policy files servers name for themselves (``mcp.servers.NAME.policy``), loaded; a
    relative path is read against the directory of the file that names it."""
    base = Path(loaded.source).parent if Path(loaded.source).is_file() else Path.cwd()
    out: dict[str, LoadedPolicy] = {}
    for name, spec in servers.items():
        if spec.policy is None:
            continue
        own = load_policy(base / os.path.expanduser(spec.policy))
        if own.policy.mcp is not None:
            raise CallgateError(f"mcp.servers.{name}.policy: {own.source} has an mcp: section "
                                f"of its own; a server's policy decides its calls only")
        out[name] = own
    return out


def _event_of(note: types.ServerNotification) -> ServerEvent | None:
    """The change event an upstream notification announces, or None for any other."""
    if isinstance(note, types.ToolListChangedNotification):
        return ToolsListChanged()
    if isinstance(note, types.PromptListChangedNotification):
        return PromptsListChanged()
    if isinstance(note, types.ResourceListChangedNotification):
        return ResourcesListChanged()
    if isinstance(note, types.ResourceUpdatedNotification):
        return ResourceUpdated(uri=str(note.params.uri))
    return None


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000.0


def _offered(caps: types.ServerCapabilities) -> set[str]:
    return {name for name in ("resources", "prompts", "completions")
            if getattr(caps, name, None) is not None}


def _connection_key(ctx: Ctx) -> str:
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is not None:
        session = headers.get("mcp-session-id")
        return f"http:{session}" if session else "http:stateless"
    return "stdio"


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=True)


def _mcp_error(code: int, message: str) -> Exception:
    from mcp import MCPError

    return MCPError(code=code, message=message)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("callgate")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0"

"""The sidecar's HTTP routes (Starlette): authentication, parsing, and the ``Sidecar`` call.

Every route answers JSON. A refused request is ``{"error": {"status", "field", "message"}}``
with 400 (not JSON, not UTF-8, too deep), 401 (no, unknown or revoked key; audited), 403 (a key
of the wrong role), 404 (a run or approval this key cannot see), 409 (an approval already
answered), 413 (a body over 1 MiB), 422 (a field of the wrong type, unknown, or one the
sidecar sets itself) or 429 (too many runs for the key, too many waiting for approvals). An
internal error on a decision route is a deny naming it, audited; the server goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from callgate._errors import StoreUnavailableError
from callgate._model import Decision, Reason
from callgate.integrations.sidecar._approvals import Refusal
from callgate.integrations.sidecar._gateways import (
    docker_call,
    docker_observation,
    docker_refusal,
    toolhive_call,
)
from callgate.integrations.sidecar._keys import Identity
from callgate.integrations.sidecar._openapi import openapi
from callgate.integrations.sidecar._requests import (
    Problem,
    optional_str,
    optional_wait,
    parse_json,
    read_body,
    read_json,
    valid_call,
    valid_report,
)
from callgate.integrations.sidecar._runs import LiveRun
from callgate.integrations.sidecar._service import SIDECAR_RUN, Busy, NotFound, Sidecar

log = logging.getLogger("callgate.sidecar")

__all__ = ["build_app"]

Handler = Callable[[Request], Awaitable[Response]]


def _error(problem: Problem) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if problem.status == 401 else None
    return JSONResponse(problem.as_json(), status_code=problem.status, headers=headers)


def _guarded(sidecar: Sidecar, handler: Handler, *, decides: bool) -> Handler:
    """Refusals as their status; on a decision route an internal error is an audited deny."""

    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except Problem as problem:
            sidecar.metrics.refused(str(problem.status))
            return _error(problem)
        except NotFound as missing:
            sidecar.metrics.refused("404")
            return _error(Problem(404, "run_id", str(missing)))
        except Busy as busy:
            sidecar.metrics.refused("429")
            response = _error(Problem(429, "body", str(busy)))
            response.headers["Retry-After"] = "5"
            return response
        except Refusal as refusal:
            sidecar.metrics.refused(str(refusal.status))
            return _error(Problem(refusal.status, "approval", refusal.message))
        except Exception as exc:
            log.exception("callgate sidecar: %s failed", request.url.path)
            why = f"{type(exc).__name__}: {exc}"
            route_path = getattr(request.scope.get("route"), "path", "?")
            sidecar.record(SIDECAR_RUN, "sidecar-error", {"route": route_path, "error": why})
            if not decides and isinstance(exc, StoreUnavailableError):  # the store is away: retry
                response = _error(Problem(503, "body", f"a shared store is unavailable"
                                          f" ({exc}); retry"))
                response.headers["Retry-After"] = "1"
                return response
            if not decides:
                return _error(Problem(500, "body", f"internal error ({type(exc).__name__})"))
            deny = Decision(verdict="deny", reasons=(Reason(
                id="internal.error", check="sidecar",
                message=f"the sidecar failed ({why}); the call is refused"),))
            sidecar.metrics.decided(deny, 0.0)
            return JSONResponse({"verdict": "deny", "reasons": [
                r.model_dump() for r in deny.reasons]})

    return route


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _auth(sidecar: Sidecar, request: Request, key: str | None, where: str,
          role: str | None = "agent") -> Identity:
    identity = sidecar.identify(key, where)
    if identity is None:
        raise Problem(401, "authorization", "missing, unknown or revoked key")
    if role is not None and identity.role != role:
        raise Problem(403, "authorization", f"this needs a key with role {role}, not "
                                            f"{identity.role}")
    return identity


class _Routes:
    """The route handlers of one sidecar."""

    def __init__(self, sidecar: Sidecar, policy_path: str) -> None:
        self.sidecar = sidecar
        self.policy_path = policy_path
        self.hooks: Any = None

    def agent(self, request: Request) -> Identity:
        return _auth(self.sidecar, request, _bearer(request), request.url.path)

    def run_of(self, identity: Identity, run_id: str | None) -> LiveRun:
        return self.sidecar.run_for(identity, run_id)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "policy_sha256": self.sidecar.policy_sha256})

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(self.sidecar.metrics.render(),
                                 media_type="text/plain; version=0.0.4")

    async def schema(self, request: Request) -> Response:
        return JSONResponse(openapi())

    async def public_keys(self, request: Request) -> Response:
        return JSONResponse({"keys": [self.sidecar.signer.public_json()]})

    async def start_run(self, request: Request) -> Response:
        identity = self.agent(request)
        await read_json(request, frozenset())  # an empty object (or nothing else)
        return JSONResponse({"run_id": self.sidecar.start_run(identity).run_id}, status_code=201)

    async def end_run(self, request: Request) -> Response:
        identity = self.agent(request)
        live = self.run_of(identity, request.path_params["run_id"])
        return JSONResponse({"run_id": live.run_id,
                             "violations": await self.sidecar.end_run(live)})

    async def obligations(self, request: Request) -> Response:
        identity = self.agent(request)
        live = self.run_of(identity, request.path_params["run_id"])
        return JSONResponse({"run_id": live.run_id,
                             "violations": await self.sidecar.open_obligations(live)})

    async def decide(self, request: Request) -> Response:
        identity = self.agent(request)
        body = await read_json(request, frozenset({"call", "run_id", "wait", "approval_id"}))
        call = valid_call(body.get("call"))
        wait = optional_wait(body.get("wait"))
        approval_id = optional_str(body, "approval_id")
        live = self.run_of(identity, optional_str(body, "run_id", high=128))
        return JSONResponse(await self.sidecar.decide(identity, live, call, wait_s=wait,
                                                 approval_id=approval_id))

    async def execute(self, request: Request) -> Response:
        identity = self.agent(request)
        body = await read_json(request, frozenset({"call", "run_id"}))
        call = valid_call(body.get("call"))
        live = self.run_of(identity, optional_str(body, "run_id", high=128))
        return JSONResponse(await self.sidecar.execute(live, call))

    async def results(self, request: Request) -> Response:
        identity = self.agent(request)
        body = await read_json(request, frozenset({"call_id", "run_id", "status", "output",
                                                   "error", "duration_ms", "taint"}))
        call_id, fields = valid_report(body)
        live = self.run_of(identity, optional_str(body, "run_id", high=128))
        return JSONResponse(await self.sidecar.report(live, call_id, fields))

    async def approvals(self, request: Request) -> Response:
        identity = _auth(self.sidecar, request, _bearer(request), "/v1/approvals", role=None)
        state = request.query_params.get("state")
        if state not in (None, "pending", "approved", "denied", "expired", "used"):
            raise Problem(422, "state", "must be pending, approved, denied, expired or used")
        found = [a.as_json() for a in self.sidecar.approvals.list(state)
                 if identity.role == "approver" or a.key_name == identity.name]
        return JSONResponse({"approvals": found})

    async def approval(self, request: Request) -> Response:
        identity = _auth(self.sidecar, request, _bearer(request), "/v1/approvals", role=None)
        approval_id = request.path_params["approval_id"]
        wait = _query_wait(request)
        found = await self.sidecar.wait_approval(approval_id, wait) if wait else \
            self.sidecar.approvals.get(approval_id)
        if found is None or (identity.role != "approver" and found.key_name != identity.name):
            raise NotFound(f"no approval {approval_id}")
        return JSONResponse(found.as_json())

    async def answer_approval(self, request: Request) -> Response:
        identity = _auth(self.sidecar, request, _bearer(request), "/v1/approvals", role="approver")
        body = await read_json(request, frozenset({"approve"}))
        if not isinstance(body.get("approve"), bool):
            raise Problem(422, "approve", "must be true or false")
        decided = self.sidecar.approvals.decide(request.path_params["approval_id"],
                                           body["approve"], identity.name)
        return JSONResponse(decided.as_json())

    async def claude_code(self, request: Request) -> Response:
        """Claude Code's ``type: "http"`` hook. Claude Code lets a tool call go ahead on any
        answer but a 2xx one it understands, so this route answers 200 with a hook answer
        whatever happens: a bad key, a body over the bound, a failure are refusals in the
        event's own contract (a deny for a tool call, a block for a prompt)."""
        from callgate.integrations.claude_code._service import (
            MAX_PAYLOAD_BYTES,
            HookService,
            http_answer,
        )

        raw = b""
        oversized: int | None = None
        try:
            raw = await read_body(request, MAX_PAYLOAD_BYTES)
        except Problem:
            oversized = int(request.headers.get("content-length") or MAX_PAYLOAD_BYTES + 1)
        try:
            identity = _auth(self.sidecar, request, request.path_params["key"],
                             "/v1/gateways/claude-code")
        except Problem as problem:
            return JSONResponse(http_answer(raw, None, f"callgate sidecar: {problem.message}"))
        if self.hooks is None:
            self.hooks = HookService(self.sidecar.state_dir / "claude-code")
        hooks, policy = self.hooks, self.policy_path
        # sessions belong to the key that opened them, and run in the sidecar's working
        # directory (never in a directory the request names)
        project = str(self.sidecar.working_dir)
        try:
            answer = await anyio.to_thread.run_sync(lambda: hooks.answer(
                raw, policy=policy, project=project, oversized=oversized,
                namespace=identity.name))
        except Exception as exc:
            log.exception("callgate sidecar: the Claude Code hook failed")
            return JSONResponse(http_answer(raw, None, f"callgate sidecar failed ({exc!r}); "
                                                       f"refused"))
        return JSONResponse(http_answer(raw, answer))

    async def docker_before(self, request: Request) -> Response:
        identity = _auth(self.sidecar, request, request.path_params["key"], "/v1/gateways/docker")
        call = docker_call(parse_json(await read_body(request)),
                           request.query_params.get("server", "docker"))
        live = self.run_of(identity, None)
        if isinstance(call, Reason):
            decision = await _refuse(self.sidecar, live, {"tool": "<unparsed>", "tool_class": "mcp",
                                                      "action": "call"}, call)
            return JSONResponse(docker_refusal(decision, "this tool"))
        answer = await self.sidecar.decide(identity, live, call, can_approve=False)
        if answer["verdict"] == "allow":
            live.awaiting.append(answer["call_id"])
            return Response(b"")
        return JSONResponse(docker_refusal(Decision.model_validate(
            {k: answer[k] for k in ("verdict", "reasons", "call_id", "witness") if k in answer}),
            call["tool"]))

    async def docker_after(self, request: Request) -> Response:
        identity = _auth(self.sidecar, request, request.path_params["key"], "/v1/gateways/docker")
        output, failed = docker_observation(parse_json(await read_body(request)))
        live = self.run_of(identity, None)
        if not live.awaiting:
            return Response(b"")  # a result of a call callgate refused (or not seen): unchanged
        reported = await self.sidecar.report(live, live.awaiting.popleft(), {
            "status": "error" if failed else "ok", "output": output,
            "error": output if failed else None})
        result = reported["result"]
        if result["status"] == "error" and not failed:
            return JSONResponse({"content": [{"type": "text", "text": f"callgate withheld this "
                                              f"output: {result['error']}"}], "isError": True})
        return Response(b"")

    async def toolhive(self, request: Request) -> Response:
        identity = _auth(self.sidecar, request, request.path_params["key"], "/v1/gateways/toolhive")
        call = toolhive_call(parse_json(await read_body(request)))
        live = self.run_of(identity, None)
        if isinstance(call, Reason):
            await _refuse(self.sidecar, live, {"tool": "<toolhive>", "tool_class": "mcp",
                                          "action": "call"}, call)
            return JSONResponse({"allow": False})
        answer = await self.sidecar.decide(identity, live, call, can_approve=False)
        return JSONResponse({"allow": answer["verdict"] == "allow"})


def build_app(sidecar: Sidecar, *, policy_path: str) -> Starlette:
    """The ASGI application of ``sidecar``; ``policy_path`` is what Claude Code sessions start
    under."""
    h = _Routes(sidecar, policy_path)

    def r(path: str, handler: Handler, methods: list[str], decides: bool = False) -> Route:
        return Route(path, _guarded(sidecar, handler, decides=decides), methods=methods)

    routes = [
        r("/healthz", h.healthz, ["GET"]), r("/metrics", h.metrics, ["GET"]),
        r("/openapi.json", h.schema, ["GET"]), r("/v1/keys", h.public_keys, ["GET"]),
        r("/v1/runs", h.start_run, ["POST"]), r("/v1/runs/{run_id}/end", h.end_run, ["POST"]),
        r("/v1/runs/{run_id}/obligations", h.obligations, ["GET"]),
        r("/v1/decide", h.decide, ["POST"], True), r("/v1/execute", h.execute, ["POST"], True),
        r("/v1/results", h.results, ["POST"]), r("/v1/approvals", h.approvals, ["GET"]),
        r("/v1/approvals/{approval_id}", h.approval, ["GET"]),
        r("/v1/approvals/{approval_id}", h.answer_approval, ["POST"]),
        r("/v1/gateways/claude-code/{key}", h.claude_code, ["POST"], True),
        r("/v1/gateways/docker/{key}/before", h.docker_before, ["POST"], True),
        r("/v1/gateways/docker/{key}/after", h.docker_after, ["POST"], True),
        r("/v1/gateways/toolhive/{key}/decision", h.toolhive, ["POST"], True),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        flusher = asyncio.get_running_loop().create_task(sidecar.flush_forever())
        try:
            yield
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            if h.hooks is not None:
                h.hooks.close()
            sidecar.close()

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        field = {404: "path", 405: "method"}.get(status, "body")
        sidecar.metrics.refused(str(status))
        return _error(Problem(status, field, str(getattr(exc, "detail", "")) or "refused"))

    return Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={HTTPException: http_error})


def _query_wait(request: Request) -> float:
    raw = request.query_params.get("wait")
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError as exc:
        raise Problem(422, "wait", "must be a number of seconds") from exc
    return optional_wait(value)


async def _refuse(sidecar: Sidecar, live: LiveRun, call: dict[str, Any], reason: Reason
                  ) -> Decision:
    return await sidecar.refuse(live, call, reason)

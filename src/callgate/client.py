"""A client of the callgate sidecar whose methods mirror ``Kernel``.

``Client(url, key)`` (and ``AsyncClient``, the same with ``await``) has ``check``,
``execute``, ``mediate``, ``report``, ``open_obligations``, ``end_run`` and ``run_id``, returning
the same ``Decision``, ``ToolResult`` and ``Violation`` values as an embedded kernel, so code
moves between embedded and sidecar mode by changing one constructor::

    kernel = Kernel(load_policy("agent.yaml"), audit="audit.db")     # embedded
    kernel = Client("http://127.0.0.1:8787", key=os.environ["CALLGATE_KEY"])  # sidecar

The run is the one given as ``run_id``, or one the client starts on first use. ``execute``
raises ``callgate.Denied`` as the kernel does; a refused request (bad key, unknown run) raises
``SidecarError``; a sidecar that cannot be reached raises ``SidecarError`` too, and nothing is
allowed. ``verify_receipt`` checks a decision's signed receipt against ``GET /v1/keys``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from callgate._errors import CallgateError, Denied
from callgate._model import Decision, TaintLabel, ToolCall, ToolResult
from callgate.integrations.sidecar._receipts import verify_receipt
from callgate.temporal._monitor import Violation

__all__ = ["AsyncClient", "Client", "SidecarError", "verify_receipt"]

_CALL_FIELDS = ("tool", "tool_class", "action", "parameters", "token")


class SidecarError(CallgateError):
    """The sidecar refused a request (``status``, ``field``) or could not be reached (0)."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(f"{status} {field}: {message}" if status else message)
        self.status = status
        self.field = field
        self.message = message


def _call_json(call: ToolCall | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(call, ToolCall):
        out: dict[str, Any] = {k: getattr(call, k) for k in _CALL_FIELDS}
        out["taint"] = [label.source for label in call.taint]
        return {k: v for k, v in out.items() if v is not None}
    return dict(call)


def _decision(body: Mapping[str, Any]) -> Decision:
    return Decision.model_validate({k: body[k] for k in ("verdict", "reasons", "witness",
                                                         "call_id") if k in body})


def _violations(body: Mapping[str, Any]) -> list[Violation]:
    return [Violation(statement=v["statement"], enforce=v["enforce"], events=tuple(v["events"]),
                      message=v["message"], kind=v.get("kind", "violation"))
            for v in body.get("violations", ())]


def _checked(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json()
    try:
        error = response.json()["error"]
        raise SidecarError(response.status_code, str(error["field"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        raise SidecarError(response.status_code, "body", response.text[:200]) from None


def _report_body(call_id: str, run_id: str, *, status: str, output: Any, error: str | None,
                 duration_ms: float, taint: Sequence[TaintLabel | str]) -> dict[str, Any]:
    return {"call_id": call_id, "run_id": run_id, "status": status, "output": output,
            "error": error, "duration_ms": duration_ms,
            "taint": [t if isinstance(t, str) else t.source for t in taint]}


def _transport_options(url: str, key: str | None, uds: str | None, timeout: float
                       ) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return {"base_url": url, "headers": headers, "timeout": timeout}


class Client:
    """A synchronous sidecar client for one run (see the module's description).

    ``uds`` talks over a Unix socket (``url`` then only names the host, e.g.
    ``http://sidecar``). Thread-safe as ``httpx.Client`` is; the run's decisions are serialised
    by the sidecar.
    """

    def __init__(self, url: str = "http://127.0.0.1:8787", key: str | None = None, *,
                 run_id: str | None = None, uds: str | None = None, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        transport = transport or (httpx.HTTPTransport(uds=uds) if uds else None)
        self._http = httpx.Client(transport=transport,
                                  **_transport_options(url, key, uds, timeout))
        self._run_id = run_id
        #: the full answer of the last decision (receipt, checked parameters, approval)
        self.last_answer: dict[str, Any] = {}

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return _checked(self._http.request(method, path, **kwargs))
        except httpx.HTTPError as exc:
            raise SidecarError(0, "connection", f"the sidecar cannot be reached: {exc}"
                               ) from exc

    @property
    def run_id(self) -> str:
        """The run this client's calls belong to (started on first use)."""
        if self._run_id is None:
            self._run_id = str(self._send("POST", "/v1/runs", json={})["run_id"])
        return self._run_id

    def decide(self, call: ToolCall | Mapping[str, Any], *, wait: float = 0.0,
               approval_id: str | None = None) -> dict[str, Any]:
        """``POST /v1/decide``: the whole answer (decision, receipt, approval)."""
        body: dict[str, Any] = {"call": _call_json(call), "run_id": self.run_id}
        if wait:
            body["wait"] = wait
        if approval_id:
            body["approval_id"] = approval_id
        self.last_answer = self._send("POST", "/v1/decide", json=body)
        return self.last_answer

    def check(self, call: ToolCall | Mapping[str, Any], *, wait: float = 0.0) -> Decision:
        """Decide a call (``Kernel.check``); ``wait`` seconds for an approval's answer."""
        return _decision(self.decide(call, wait=wait))

    def mediate(self, call: ToolCall | Mapping[str, Any]) -> tuple[Decision, ToolResult | None]:
        """Decide and run the call in the sidecar (``Kernel.mediate``)."""
        body = self._send("POST", "/v1/execute", json={"call": _call_json(call),
                                                         "run_id": self.run_id})
        result = body.get("result")
        return _decision(body), ToolResult.model_validate(result) if result else None

    def execute(self, call: ToolCall | Mapping[str, Any]) -> ToolResult:
        """Like ``Kernel.execute``: the result, or ``Denied``."""
        decision, result = self.mediate(call)
        if result is None or result.status == "denied":
            raise Denied(decision, result)
        return result

    def report(self, call_id: str, *, status: str = "ok", output: Any = None,
               error: str | None = None, duration_ms: float = 0.0,
               taint: Sequence[TaintLabel | str] = ()) -> ToolResult:
        """The result of a call ``check`` allowed and the agent ran (``Kernel.report``)."""
        body = self._send("POST", "/v1/results", json=_report_body(
            call_id, self.run_id, status=status, output=output, error=error,
            duration_ms=duration_ms, taint=taint))
        return ToolResult.model_validate(body["result"])

    def open_obligations(self) -> list[Violation]:
        """What ``end_run`` would report now."""
        return _violations(self._send("GET", f"/v1/runs/{self.run_id}/obligations"))

    def end_run(self) -> list[Violation]:
        """End the run; the obligations still open come back as violations."""
        return _violations(self._send("POST", f"/v1/runs/{self.run_id}/end"))

    def public_key(self) -> str:
        """The sidecar's receipt public key (URL-safe base64)."""
        return str(self._send("GET", "/v1/keys")["keys"][0]["public_key"])

    def approvals(self, state: str | None = "pending") -> list[dict[str, Any]]:
        """Approvals (an approver key sees all, an agent key its own)."""
        params = {"state": state} if state else {}
        return list(self._send("GET", "/v1/approvals", params=params)["approvals"])

    def approval(self, approval_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        """One approval, after waiting up to ``wait`` seconds for its answer."""
        return dict(self._send("GET", f"/v1/approvals/{approval_id}",
                               params={"wait": wait} if wait else {}))

    def answer_approval(self, approval_id: str, approve: bool) -> dict[str, Any]:
        """Approve or deny (an approver key)."""
        return dict(self._send("POST", f"/v1/approvals/{approval_id}",
                               json={"approve": approve}))

    def close(self) -> None:
        """Close the connection pool (the run goes on; ``end_run`` ends it)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """The asynchronous ``Client``: the same methods, awaited; ``await client.start()`` (or
    the first call) starts the run, after which ``run_id`` is set."""

    def __init__(self, url: str = "http://127.0.0.1:8787", key: str | None = None, *,
                 run_id: str | None = None, uds: str | None = None, timeout: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        transport = transport or (httpx.AsyncHTTPTransport(uds=uds) if uds else None)
        self._http = httpx.AsyncClient(transport=transport,
                                       **_transport_options(url, key, uds, timeout))
        self._run_id = run_id
        self.last_answer: dict[str, Any] = {}

    async def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return _checked(await self._http.request(method, path, **kwargs))
        except httpx.HTTPError as exc:
            raise SidecarError(0, "connection", f"the sidecar cannot be reached: {exc}"
                               ) from exc

    @property
    def run_id(self) -> str | None:
        """The run's id, once started."""
        return self._run_id

    async def start(self) -> str:
        """Start the run if it has not started; its id."""
        if self._run_id is None:
            self._run_id = str((await self._send("POST", "/v1/runs", json={}))["run_id"])
        return self._run_id

    async def decide(self, call: ToolCall | Mapping[str, Any], *, wait: float = 0.0,
                     approval_id: str | None = None) -> dict[str, Any]:
        """``POST /v1/decide``: the whole answer."""
        body: dict[str, Any] = {"call": _call_json(call), "run_id": await self.start()}
        if wait:
            body["wait"] = wait
        if approval_id:
            body["approval_id"] = approval_id
        self.last_answer = await self._send("POST", "/v1/decide", json=body)
        return self.last_answer

    async def check(self, call: ToolCall | Mapping[str, Any], *, wait: float = 0.0
                    ) -> Decision:
        """Decide a call (``Kernel.check``)."""
        return _decision(await self.decide(call, wait=wait))

    async def mediate(self, call: ToolCall | Mapping[str, Any]
                      ) -> tuple[Decision, ToolResult | None]:
        """Decide and run the call in the sidecar."""
        body = await self._send("POST", "/v1/execute", json={"call": _call_json(call),
                                                               "run_id": await self.start()})
        result = body.get("result")
        return _decision(body), ToolResult.model_validate(result) if result else None

    async def execute(self, call: ToolCall | Mapping[str, Any]) -> ToolResult:
        """The result, or ``Denied``."""
        decision, result = await self.mediate(call)
        if result is None or result.status == "denied":
            raise Denied(decision, result)
        return result

    async def report(self, call_id: str, *, status: str = "ok", output: Any = None,
                     error: str | None = None, duration_ms: float = 0.0,
                     taint: Sequence[TaintLabel | str] = ()) -> ToolResult:
        """The result of a call the agent ran (``Kernel.report``)."""
        body = await self._send("POST", "/v1/results", json=_report_body(
            call_id, await self.start(), status=status, output=output, error=error,
            duration_ms=duration_ms, taint=taint))
        return ToolResult.model_validate(body["result"])

    async def open_obligations(self) -> list[Violation]:
        """What ``end_run`` would report now."""
        run = await self.start()
        return _violations(await self._send("GET", f"/v1/runs/{run}/obligations"))

    async def end_run(self) -> list[Violation]:
        """End the run; open obligations come back as violations."""
        run = await self.start()
        return _violations(await self._send("POST", f"/v1/runs/{run}/end"))

    async def public_key(self) -> str:
        """The sidecar's receipt public key."""
        return str((await self._send("GET", "/v1/keys"))["keys"][0]["public_key"])

    async def approvals(self, state: str | None = "pending") -> list[dict[str, Any]]:
        """Approvals (an approver key sees all, an agent key its own)."""
        params = {"state": state} if state else {}
        return list((await self._send("GET", "/v1/approvals", params=params))["approvals"])

    async def approval(self, approval_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        """One approval, after waiting up to ``wait`` seconds for its answer."""
        return dict(await self._send("GET", f"/v1/approvals/{approval_id}",
                                     params={"wait": wait} if wait else {}))

    async def answer_approval(self, approval_id: str, approve: bool) -> dict[str, Any]:
        """Approve or deny (an approver key)."""
        return dict(await self._send("POST", f"/v1/approvals/{approval_id}",
                                     json={"approve": approve}))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

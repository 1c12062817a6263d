"""Asking the user about a ``require-approval`` call, in either protocol era.

A handshake-era client that declared the ``elicitation`` capability gets an ``elicitation/create``
form request on the call's own request stream and the call waits for the answer (bounded by the
timeout; no answer is a deny). A 2026-07-28 client gets an ``InputRequiredResult`` carrying the
same form and a ``requestState`` sealed with the gateway's key, bound to the call (server, tool,
digest of the arguments) and to the kernel run that asked; when the client retries the call with
the answer, the gateway goes on with the decision it already made instead of deciding again. A
state that does not open, has expired, or belongs to other arguments is ignored: the retry is
decided afresh, so it asks again. A client that cannot ask the user is refused with that reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections import OrderedDict
from typing import Any

import anyio
import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from callgate._model import Decision
from callgate.integrations.mcp._gate import Gate

__all__ = ["APPROVAL_KEY", "Approvals"]

#: The key of the approval form in ``InputRequiredResult.inputRequests``.
APPROVAL_KEY = "callgate-approval"
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Allow this call?"}},
    "required": ["approve"],
}
#: Approvals awaiting a 2026-07-28 client's retry; the oldest is dropped first.
_MAX_PENDING = 1024

Answer = bool | str  # True, or why not


def digest(call: dict[str, Any]) -> str:
    """The call an approval is bound to: tool and arguments, canonical JSON."""
    text = json.dumps([call["tool"], call["parameters"]], sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Approvals:
    """Approval requests of one gateway process (``secret`` seals the request states)."""

    def __init__(self, secret: bytes, *, timeout_s: float) -> None:
        self._secret = secret
        self.timeout_s = timeout_s
        self._pending: OrderedDict[str, tuple[Decision, Gate, str]] = OrderedDict()

    async def ask(self, ctx: Any, params: types.CallToolRequestParams, call: dict[str, Any],
                  decision: Decision, gate: Gate) -> Answer | types.InputRequiredResult:
        """Ask the user; True when they approve, else why not (or the modern era's request)."""
        caps = ctx.session.client_capabilities
        if caps is None or caps.elicitation is None:
            return ("approval needed, and this client cannot ask the user (it declares no "
                    "elicitation capability)")
        message = _message(gate.explain(decision, params.name), call)
        form = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=message, requested_schema=_SCHEMA))
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            self._pending[decision.call_id] = (decision, gate, digest(call))
            while len(self._pending) > _MAX_PENDING:
                self._pending.popitem(last=False)
            return types.InputRequiredResult(input_requests={APPROVAL_KEY: form},
                                             request_state=self._seal(decision.call_id, call))
        try:
            with anyio.fail_after(self.timeout_s):
                result = await ctx.session.elicit_form(message, _SCHEMA,
                                                       related_request_id=ctx.request_id)
        except TimeoutError:
            return f"the user did not answer the approval request within {self.timeout_s:g} s"
        except Exception as exc:
            return f"the approval request failed: {exc}"
        return _answer(result)

    def resume(self, params: types.CallToolRequestParams, call: dict[str, Any], gate: Gate
               ) -> tuple[Decision, Answer] | None:
        """The decision a 2026-07-28 retry carries the answer for, or None to decide afresh."""
        if params.request_state is None:
            return None
        call_id = self._open(params.request_state, call)
        pending = self._pending.get(call_id) if call_id is not None else None
        if pending is None or pending[1] is not gate or pending[2] != digest(call):
            return None
        del self._pending[call_id]  # type: ignore[arg-type]  # call_id is set when pending is
        response = (params.input_responses or {}).get(APPROVAL_KEY)
        if not isinstance(response, types.ElicitResult):
            return pending[0], "the retry carried no answer to the approval request"
        return pending[0], _answer(response)

    def _seal(self, call_id: str, call: dict[str, Any]) -> str:
        body = json.dumps({"c": call_id, "d": digest(call),
                           "e": time.time() + self.timeout_s}).encode()
        mac = hmac.new(self._secret, body, hashlib.sha256).hexdigest()
        return base64.urlsafe_b64encode(body).decode() + "." + mac

    def _open(self, state: str, call: dict[str, Any]) -> str | None:
        encoded, _, mac = state.partition(".")
        try:
            body = base64.urlsafe_b64decode(encoded.encode())
        except ValueError:
            return None
        expected = hmac.new(self._secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, mac):
            return None
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        if payload.get("d") != digest(call) or not payload.get("e", 0) > time.time():
            return None
        call_id = payload.get("c")
        return call_id if isinstance(call_id, str) else None


def _answer(result: types.ElicitResult) -> Answer:
    if result.action == "accept":
        content = result.content or {}
        return True if content.get("approve") is True else "the user did not approve the call"
    return f"the user answered {result.action} to the approval request"


def _message(explained: str, call: dict[str, Any]) -> str:
    arguments = json.dumps(call["parameters"], ensure_ascii=False, sort_keys=True, default=str)
    if len(arguments) > 2000:
        arguments = arguments[:2000] + "…"
    lines = [line for line in explained.splitlines() if not line.startswith("Do not retry")]
    return "\n".join([*lines, f"arguments: {arguments}"])

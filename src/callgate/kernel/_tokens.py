"""The capability tokens a kernel issued: found by id, narrowed ones registered, uses counted."""

from __future__ import annotations

from callgate._errors import CallgateError
from callgate._model import Reason, ToolCall
from callgate.kernel._capabilities import CapabilityToken


class TokenBook:
    """Every token issued in one run, and the narrowed tokens derived from them."""

    def __init__(self) -> None:
        self._tokens: dict[str, CapabilityToken] = {}

    def add(self, token: CapabilityToken) -> None:
        """Keep a token this kernel issued."""
        self._tokens[token.id] = token

    def register(self, token: CapabilityToken) -> None:
        """Keep a token narrowed from one this kernel issued; any other is refused."""
        root: CapabilityToken | None = token
        while root is not None and root.parent is not None:
            root = root.parent
        if root is None or root.id not in self._tokens:
            raise CallgateError("token was not issued by this kernel")
        self._tokens[token.id] = token

    def refusal(self, call: ToolCall, working_dir: str, now: float) -> Reason | None:
        """Why the call's token does not admit it (``capability.token``), or None."""
        if call.token is None:
            return None
        token = self._tokens.get(call.token)
        why = ("unknown capability token" if token is None
               else token.admits(call, working_dir, now))
        return None if not why else Reason(id="capability.token", check="capability",
                                           message=why)

    def use(self, call: ToolCall) -> None:
        """Count one use of the call's token (after the call was allowed)."""
        if call.token is not None and call.token in self._tokens:
            self._tokens[call.token].use()

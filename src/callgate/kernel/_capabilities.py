"""Capabilities: a principal's grants, their constraints, rate limits and capability tokens.

A call needs a grant for its tool class and action whose constraints it satisfies. Grants are a
set per class: every matching grant is tried, and one that admits the call is enough. Tokens are
issued from grants and can only narrow them: a token is a chain of constraint layers, and a call
must satisfy every layer as well as the principal's grants, so no sequence of narrowing widens.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from callgate._model import Reason, ToolCall
from callgate.matchers._commands import check_command
from callgate.matchers._hosts import check_host
from callgate.matchers._paths import PathRejected, check_paths, intent_of, path_arguments
from callgate.policy._schema import Capability, CapabilityConstraints


def check_constraints(call: ToolCall, c: CapabilityConstraints, working_dir: str,
                      resolved: Collection[str] = ()) -> str | None:
    """The reason a call breaks a grant's constraints, or None when it satisfies them.

    ``resolved``: the canonical paths validation made for this call (not resolved again)."""
    params = call.parameters
    if c.allowed_hosts is not None:
        urls = [v for k, v in params.items() if k in ("url", "uri", "endpoint")]
        if not urls:
            return "the grant limits hosts but the call names no url"
        for url in urls:
            why = check_host(url, c.allowed_hosts) if isinstance(url, str) else "url is not text"
            if why:
                return why
    if c.allowed_paths is not None:
        why = _check_path_constraint(call, c, working_dir, resolved)
        if why:
            return why
    if c.allowed_commands is not None:
        command = params.get("argv", params.get("command"))
        if not isinstance(command, str | list):
            return "the grant limits commands but the call has no command or argv"
        why = check_command(command, c.allowed_commands)
        if why:
            return why
    if c.allowed_databases is not None:
        db = params.get("database")
        if not isinstance(db, str) or db not in c.allowed_databases:
            return f"database {db!r} is not among the allowed databases"
    return None


def _check_path_constraint(call: ToolCall, c: CapabilityConstraints, working_dir: str,
                           resolved: Collection[str]) -> str | None:
    allowed = c.allowed_paths or ()
    intent = intent_of(call.action)
    try:
        args = path_arguments(call.parameters, default_intent=intent)
        if not args and call.tool_class == "file":
            return "the grant limits paths but the call names no path"
        verdict = check_paths(args, allowed, allowed, working_dir, c.follow_symlinks or (),
                              resolved=resolved)
    except PathRejected as exc:
        return str(exc)
    return None if verdict is None else verdict.reason


class RateLimiter:
    """Calls per minute, per grant, over a sliding 60-second window.

    Memory is bounded by the limits in force: a grant's window keeps at most its limit of
    timestamps, pruned of those older than a minute on every use; a grant without a limit keeps
    none.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._hits: dict[int, deque[float]] = {}

    def full(self, key: int, limit: int) -> bool:
        hits = self._hits.get(key)
        if hits is None:
            return False
        self._prune(hits, self._clock())
        return len(hits) >= limit

    def hit(self, key: int, limit: int) -> None:
        """Count a call against grant ``key``, whose limit is ``limit`` calls a minute."""
        now = self._clock()
        hits = self._hits.setdefault(key, deque(maxlen=limit))
        self._prune(hits, now)
        hits.append(now)

    @staticmethod
    def _prune(hits: deque[float], now: float) -> None:
        while hits and now - hits[0] >= 60.0:
            hits.popleft()

    def size(self) -> int:
        """How many timestamps are kept in all (for tests of the bound)."""
        return sum(len(h) for h in self._hits.values())


def check_grants(call: ToolCall, grants: Sequence[Capability], working_dir: str,
                 limiter: RateLimiter, resolved: Collection[str] = ()) -> int | Reason:
    """The index of the first grant that admits the call, or the reason none does.

    ``capability.missing``: no grant covers the class and action; ``capability.constraint``:
    grants cover them, and the call breaks each one's constraints (all of their reasons).
    """
    candidates = [(i, g) for i, g in enumerate(grants)
                  if g.tool_class == call.tool_class and g.covers_action(call.action)]
    if not candidates:
        return Reason(id="capability.missing", check="capability",
                      message=f"no capability grants {call.tool_class}.{call.action}")
    reasons = []
    for index, grant in candidates:
        why = check_constraints(call, grant.constraints, working_dir, resolved)
        limit = grant.constraints.max_calls_per_minute
        if why is None and limit is not None and limiter.full(index, limit):
            why = f"rate limit of {limit} calls per minute reached"
        if why is None:
            return index
        reasons.append(why)
    return Reason(id="capability.constraint", check="capability",
                  message="; ".join(dict.fromkeys(reasons)))


@dataclass(slots=True)
class CapabilityToken:
    """A scoped, expiring, use-limited grant. ``narrow`` returns a token that allows no more."""

    id: str
    principal: str
    tool_class: str
    actions: frozenset[str]
    layers: tuple[CapabilityConstraints, ...]
    expires_at: float
    max_uses: int | None
    parent: CapabilityToken | None = None
    uses: int = field(default=0)

    def narrow(self, *, actions: Sequence[str] | None = None,
               constraints: CapabilityConstraints | None = None, ttl_s: float | None = None,
               max_uses: int | None = None, now: float | None = None) -> CapabilityToken:
        """A child token: actions intersected, one more constraint layer, earlier expiry."""
        now = time.time() if now is None else now
        expires = self.expires_at if ttl_s is None else min(self.expires_at, now + ttl_s)
        uses = _min_opt(self.remaining(), max_uses)
        return CapabilityToken(
            id=_new_token_id(), principal=self.principal, tool_class=self.tool_class,
            actions=self.actions & frozenset(actions) if actions is not None else self.actions,
            layers=self.layers + ((constraints,) if constraints is not None else ()),
            expires_at=expires, max_uses=uses, parent=self,
        )

    def remaining(self) -> int | None:
        mine = None if self.max_uses is None else self.max_uses - self.uses
        parent = self.parent.remaining() if self.parent is not None else None
        return _min_opt(mine, parent)

    def admits(self, call: ToolCall, working_dir: str, now: float) -> str | None:
        """Why this token does not admit the call, or None."""
        if now >= self.expires_at:
            return f"capability token {self.id} expired"
        left = self.remaining()
        if left is not None and left <= 0:
            return f"capability token {self.id} has no uses left"
        if call.tool_class != self.tool_class or call.action not in self.actions:
            return f"capability token {self.id} does not cover {call.tool_class}.{call.action}"
        for layer in self.layers:
            why = check_constraints(call, layer, working_dir)
            if why:
                return f"capability token {self.id}: {why}"
        return None

    def use(self) -> None:
        token: CapabilityToken | None = self
        while token is not None:  # a child's use is also a use of every ancestor
            token.uses += 1
            token = token.parent


def tokens_state(tokens: Mapping[str, CapabilityToken]) -> dict[str, Any]:
    """``tokens`` (by id) as plain values, parents before children and shared as they are
    (a child's use is a use of its parent): what a run snapshot keeps."""
    rows: list[dict[str, Any]] = []
    place: dict[int, int] = {}  # id of a token -> its row

    def visit(token: CapabilityToken) -> int:
        if id(token) not in place:
            parent = None if token.parent is None else visit(token.parent)
            place[id(token)] = len(rows)
            rows.append({"id": token.id, "principal": token.principal,
                         "tool_class": token.tool_class, "actions": sorted(token.actions),
                         "layers": [c.model_dump() for c in token.layers],
                         "expires_at": token.expires_at, "max_uses": token.max_uses,
                         "parent": parent, "uses": token.uses})
        return place[id(token)]

    named = {key: visit(token) for key, token in tokens.items()}
    return {"tokens": rows, "named": named}


def tokens_from_state(state: Mapping[str, Any]) -> dict[str, CapabilityToken]:
    """The tokens ``tokens_state`` described, by id."""
    built: list[CapabilityToken] = []
    for row in state["tokens"]:
        parent = row["parent"]
        built.append(CapabilityToken(
            id=str(row["id"]), principal=str(row["principal"]),
            tool_class=str(row["tool_class"]), actions=frozenset(row["actions"]),
            layers=tuple(CapabilityConstraints.model_validate(c) for c in row["layers"]),
            expires_at=float(row["expires_at"]), max_uses=row["max_uses"],
            parent=None if parent is None else built[parent], uses=int(row["uses"])))
    return {str(key): built[at] for key, at in state["named"].items()}


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _new_token_id() -> str:
    return "cap_" + secrets.token_hex(12)


def issue_token(principal: str, grants: Sequence[Capability], tool_class: str, *,
                actions: Sequence[str] | None, constraints: CapabilityConstraints | None,
                ttl_s: float, max_uses: int | None, now: float) -> CapabilityToken | str:
    """A token for a class the principal holds, or the reason it cannot be issued."""
    held = [g for g in grants if g.tool_class == tool_class]
    if not held:
        return f"principal {principal!r} holds no {tool_class} capability"
    wanted = frozenset(actions or ())
    granted: set[str] = set()
    for g in held:
        granted.update(g.actions)
    unlimited = any(not g.actions for g in held)
    if not wanted and not unlimited:
        wanted = frozenset(granted)
    if not unlimited and not wanted <= granted:
        return f"actions {sorted(wanted - granted)} exceed the {tool_class} grant"
    if not wanted:
        return "a token must name the actions it covers"
    layers: tuple[CapabilityConstraints, ...] = (constraints,) if constraints else ()
    return CapabilityToken(_new_token_id(), principal, tool_class, wanted, layers,
                           now + ttl_s, max_uses)


"""Run state: counters across a run, a bounded window of security signals, and quarantine.

The six sequence rules below come from the Ari Kernel design. They are a table of data read by
one small matcher, so the behavioural language can take them over without touching the pipeline.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate._model import ToolCall
from callgate._taint import is_untrusted

#: (tool_class, action) pairs a quarantined run may still take.
READ_ONLY_ACTIONS: frozenset[tuple[str, str]] = frozenset(
    {
        ("http", "get"),
        ("http", "head"),
        ("http", "options"),
        ("file", "read"),
        ("file", "list"),
        ("database", "query"),
        ("retrieval", "search"),
    }
)
EGRESS_WRITE_ACTIONS = frozenset({"post", "put", "patch", "delete"})
DB_WRITE_ACTIONS = frozenset({"write", "execute", "exec", "mutate", "insert", "update", "delete"})
#: Risk of a tool class, for "denied, then asked for something riskier".
CLASS_RISK: dict[str, int] = {"http": 1, "database": 2, "file": 3, "shell": 5}

SENSITIVE_PATH = re.compile(
    r"(^|[/\s~])\.ssh(/|$|\s)|(^|[/\s])\.env($|[./\s])|(^|[/\s~])\.aws(/|$)|id_rsa|id_ed25519|"
    r"id_ecdsa|(^|[/\s~])\.gnupg(/|$)|\.netrc|/etc/shadow|/etc/sudoers|credentials|\.pgpass|"
    r"\.git-credentials|\.kube/config|\.docker/config\.json"
)
SECRET_RESOURCE = re.compile(r"\b(secrets?|credentials?|api_keys?|passwords?|tokens)\b|/vault/|"
                             r"//vault\.|/v1/secret", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Signal:
    """One security-relevant fact about a call, pushed to the run's window."""

    kind: str
    tool_class: str
    seq: int
    command_length: int = 0


@dataclass(frozen=True, slots=True)
class SignalMatch:
    """Which signals a side of a sequence rule matches."""

    kinds: frozenset[str]
    min_command_length: int = 0
    riskier_than_first: bool = False


@dataclass(frozen=True, slots=True)
class SequenceRule:
    """``first`` seen in the window, then ``then`` on the pending call: quarantine."""

    id: str
    first: SignalMatch
    then: SignalMatch
    reason: str


def _m(*kinds: str, min_len: int = 0, riskier: bool = False) -> SignalMatch:
    return SignalMatch(frozenset(kinds), min_len, riskier)


BEHAVIOURAL_RULES: tuple[SequenceRule, ...] = (
    SequenceRule("web_taint_sensitive_probe", _m("taint"),
                 _m("sensitive_read", "shell_exec", "egress_write"),
                 "untrusted content was followed by a sensitive read, shell or egress"),
    SequenceRule("denied_capability_then_escalation", _m("capability_denied"),
                 _m("capability_request", riskier=True),
                 "a denied capability was followed by a request for a riskier class"),
    SequenceRule("sensitive_read_then_egress", _m("sensitive_read"), _m("egress_write"),
                 "a sensitive file read was followed by an outbound write"),
    SequenceRule("tainted_database_write", _m("taint"), _m("db_write"),
                 "untrusted content was followed by a database write"),
    SequenceRule("tainted_shell_with_data", _m("taint"), _m("shell_exec", min_len=101),
                 "untrusted content was followed by a long shell command"),
    SequenceRule("secret_access_then_any_egress", _m("secret_access"), _m("egress"),
                 "secret access was followed by egress"),
)


@dataclass(slots=True)
class Counters:
    """The run's counters, as in the Ari Kernel design."""

    denied_actions: int = 0
    capability_requests: int = 0
    denied_capability_requests: int = 0
    external_egress_attempts: int = 0
    sensitive_file_read_attempts: int = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Why and when a run was quarantined."""

    trigger: str  # "threshold" or "behavioral"
    rule_id: str
    reason: str
    counters: Mapping[str, int]
    matched: tuple[int, ...] = ()
    at: float = field(default_factory=time.time)

    def as_payload(self) -> dict[str, Any]:
        return {"trigger": self.trigger, "rule_id": self.rule_id, "reason": self.reason,
                "counters": dict(self.counters), "matched": list(self.matched), "at": self.at}


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 16:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, depth + 1)


def _command_length(call: ToolCall) -> int:
    command = call.parameters.get("command")
    if isinstance(command, str):
        return len(command)
    argv = call.parameters.get("argv")
    if isinstance(argv, list):
        return len(" ".join(str(a) for a in argv))
    return 0


def signals_of(call: ToolCall, input_taint: frozenset[str]) -> list[Signal]:
    """The security signals of a pending call, in the order they logically happen.

    Capability requests are explicit token requests (``Kernel.issue_token``), not calls.
    """
    cls, act, seq = call.tool_class, call.action, call.sequence
    out: list[Signal] = []
    if is_untrusted(input_taint):
        out.append(Signal("taint", cls, seq))
    texts = list(_strings(call.parameters))
    if cls in ("file", "shell") and any(SENSITIVE_PATH.search(t) for t in texts):
        out.append(Signal("sensitive_read", cls, seq))
    if any(SECRET_RESOURCE.search(t) for t in texts) and cls in ("database", "http", "file"):
        out.append(Signal("secret_access", cls, seq))
    if cls == "http":
        out.append(Signal("egress", cls, seq))
        if act in EGRESS_WRITE_ACTIONS:
            out.append(Signal("egress_write", cls, seq))
    if cls == "shell":
        out.append(Signal("shell_exec", cls, seq, _command_length(call)))
    if cls == "database" and act in DB_WRITE_ACTIONS:
        out.append(Signal("db_write", cls, seq))
    return out


def _matches(m: SignalMatch, sig: Signal, first: Signal | None = None) -> bool:
    if sig.kind not in m.kinds or sig.command_length < m.min_command_length:
        return False
    if m.riskier_than_first and first is not None:
        return CLASS_RISK.get(sig.tool_class, 0) > CLASS_RISK.get(first.tool_class, 0)
    return True


class RunState:
    """Counters, the signal window and quarantine of one run."""

    def __init__(self, *, quarantine_after: int = 5, window: int = 20,
                 rules: Iterable[SequenceRule] = BEHAVIOURAL_RULES) -> None:
        self.counters = Counters()
        self.quarantine: Quarantine | None = None
        self._threshold = quarantine_after
        self._window: deque[Signal] = deque(maxlen=window)
        self._rules = tuple(rules)
        # Most calls end no sequence: skip the window scan unless a pending signal could.
        self._then_kinds = frozenset(k for r in self._rules for k in r.then.kinds)

    @property
    def quarantined(self) -> bool:
        return self.quarantine is not None

    def match_sequence(self, pending: list[Signal]) -> tuple[SequenceRule, Signal] | None:
        """The first rule whose ``first`` is in the window (or earlier in ``pending``)."""
        if not any(sig.kind in self._then_kinds for sig in pending):
            return None
        for rule in self._rules:
            for i, sig in enumerate(pending):
                earlier = [*self._window, *pending[:i]]
                for before in earlier:
                    if _matches(rule.first, before) and _matches(rule.then, sig, before):
                        return rule, before
        return None

    def observe(self, signals: Iterable[Signal]) -> None:
        """Push a call's signals to the window (attempts count, allowed or not)."""
        for sig in signals:
            self._window.append(sig)
            if sig.kind == "capability_request":
                self.counters.capability_requests += 1
            elif sig.kind == "egress_write":
                self.counters.external_egress_attempts += 1
            elif sig.kind == "sensitive_read":
                self.counters.sensitive_file_read_attempts += 1

    def note_taint(self, seq: int, tool_class: str) -> None:
        """The output of a call brought untrusted content into the run."""
        if not any(s.kind == "taint" for s in self._window):
            self._window.append(Signal("taint", tool_class, seq))

    def note_denied(self, *, capability: bool, tool_class: str, seq: int) -> Quarantine | None:
        """Count a denial; quarantine when the threshold is reached. Returns a new quarantine."""
        self.counters.denied_actions += 1
        if capability:
            self.counters.denied_capability_requests += 1
            self._window.append(Signal("capability_denied", tool_class, seq))
        if self.quarantine is None and self.counters.denied_actions >= self._threshold:
            return self.enter_quarantine(
                "threshold", "run.denial-threshold",
                f"{self.counters.denied_actions} denied actions reached the threshold "
                f"of {self._threshold}",
            )
        return None

    def enter_quarantine(self, trigger: str, rule_id: str, reason: str,
                         matched: tuple[int, ...] = ()) -> Quarantine:
        if self.quarantine is None:
            self.quarantine = Quarantine(trigger, rule_id, reason, self.counters.snapshot(),
                                         matched)
        return self.quarantine

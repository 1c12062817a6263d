"""The secrets guard and the provenance (relay) guard: content remembered, then recognised.

**Secrets.** When a call reads something sensitive (a path like ``~/.ssh/id_rsa``, ``.env``,
``credentials``; see ``callgate.matchers._sensitive.SENSITIVE_PATH``) the guard fingerprints
the secret parts of what came back: credential shapes (PEM private keys, AWS keys, tokens), the
values of ``NAME=value`` lines named like secrets, and long high-entropy tokens (the whole text,
line by line, when none of those is found). Credential shapes are fingerprinted wherever they are
read. Any later call that sends data anywhere (HTTP, shell, a database write, a file write, any
other class) and carries a fingerprint, directly or encoded (hex, base64, URL and backslash escapes,
reversed or ROT13-ed; see ``_decode``), is denied; so is one that carries a credential shape.

**Provenance.** Content written (to a database, a file, any write action) while the run carries
untrusted taint (web, rag, email) is fingerprinted as *planted*. A later shell command, or an
HTTP request whose query, headers or body carry planted content, is denied, in this run or, with
a state file, in any later one: a web payload parked in a table cannot be executed by the next
agent that reads the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from callgate._model import UNTRUSTED_SOURCES, Reason, ToolCall, ToolResult
from callgate.guards._decode import Forms, decode_all
from callgate.guards._scan import scan_of
from callgate.guards._store import MAX_SCAN_CHARS, FingerprintStore
from callgate.guards._text import (
    high_entropy_tokens,
    key_shapes,
    secret_assignments,
    walk_strings,
)

#: (tool_class, action) pairs that only read inside the agent's own boundary: not checked.
INWARD_ACTIONS: frozenset[tuple[str, str]] = frozenset({
    ("file", "read"), ("file", "list"), ("database", "query"), ("retrieval", "search"),
})
#: Actions that write; their content is fingerprinted when the run is untrusted.
WRITE_ACTIONS = frozenset({"write", "append", "execute", "insert", "update", "put", "post",
                           "mutate"})
_PEM_ARMOUR = re.compile(r"-----(?:BEGIN|END) [A-Z0-9 ]*-----")
_SQL_STRING = re.compile(r"'((?:[^']|'')*)'")
#: Parameters that name where a write goes rather than what it carries.
_LOCATION_KEYS = frozenset({"path", "database", "table", "url", "encoding", "append"})


def _reason(guard: str, what: str, message: str) -> Reason:
    return Reason(id=f"guard.{guard}.{what}", check="guard", message=message)


#: A parameter value at least this long is taken out of the call's output before fingerprinting.
_ECHO_CHARS = 6
#: Parameter values taken out of an output, at most (the longest first).
_MAX_ECHOES = 32


def secret_parts(text: str, *, sensitive: bool) -> list[str]:
    """The parts of ``text`` worth fingerprinting; everything non-blank when ``sensitive``
    and nothing more specific is found."""
    parts = [_PEM_ARMOUR.sub("", found) for _, found in key_shapes(text)]
    if sensitive:
        parts += secret_assignments(text) + high_entropy_tokens(text)
        if not parts:
            parts = [line for line in text.splitlines() if len(line.strip()) >= 12]
    return parts


def _over_budget(guard: str) -> Reason:
    return _reason(guard, "budget", "the call's parameters decode to more forms than the guard "
                                    "checks; it is refused rather than checked in part")


class SecretsGuard:
    """Deny calls that carry fingerprints of secrets read earlier (this run or, persisted,
    any earlier run), or that carry a credential shape."""

    name = "secrets"

    def __init__(self, store: FingerprintStore) -> None:
        self.store = store

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        """A reason to deny ``call`` when it sends a secret out."""
        problem = self.store.refresh()
        if problem:
            return _reason("secrets", "state", problem)
        if (call.tool_class, call.action) in INWARD_ACTIONS:
            return None
        forms = scan_of(call).outbound
        if not forms.complete:
            return _over_budget("secrets")
        origin = self.store.find("secret", forms.texts) if self.store.holds("secret") else None
        if origin is not None:
            return _reason("secrets", "fingerprint",
                           f"the call carries content of a secret read earlier ({origin})")
        for text in forms.texts:
            shapes = key_shapes(text)
            if shapes:
                return _reason("secrets", "key-shape",
                               f"the call carries a credential ({shapes[0][0]})")
        return None

    def observe(self, call: ToolCall, result: ToolResult | None) -> None:
        """Fingerprint the secret parts of what a call returned (a failed call's output too:
        an error message can quote what it read)."""
        if result is None or result.status == "denied":
            return
        sensitive = scan_of(call).sensitive
        origin = f"{call.tool} at {call.run_id or 'run'}:{call.sequence}"
        # What the call itself sent is no secret it read: an output that repeats its own path
        # ("ENOENT: …/secret.txt") must not make that path a secret for the next call.
        sent = sorted({t for t in walk_strings(call.parameters) if len(t) >= _ECHO_CHARS},
                      key=len, reverse=True)[:_MAX_ECHOES]
        for found in walk_strings(result.output):
            text = found
            for echoed in sent:
                text = text.replace(echoed, " ")
            for part in secret_parts(text, sensitive=sensitive):
                self.store.add("secret", part, origin)


def _planted_texts(call: ToolCall) -> Iterable[str]:
    """What a write carries: content values and SQL string literals, not where it goes."""
    for key, value in call.parameters.items():
        if key in _LOCATION_KEYS:
            continue
        for text in walk_strings(value):
            if key == "sql":
                yield from (m.group(1).replace("''", "'") for m in _SQL_STRING.finditer(text))
            else:
                yield text


def _relay_surface(call: ToolCall) -> Forms:
    """The strings a relay could travel in, decoded: all of a shell call; an HTTP call's
    query, headers and body (its scheme, host and path name a place the agent may link to)."""
    if call.tool_class != "http":
        return scan_of(call).outbound
    texts: list[str] = []
    for key, value in call.parameters.items():
        if key == "url" and isinstance(value, str):
            texts.append(urlsplit(value).query)
        else:
            texts.extend(walk_strings(value))
    return decode_all(texts, max_chars=MAX_SCAN_CHARS)


class ProvenanceGuard:
    """Deny shell and HTTP calls carrying content written earlier under untrusted taint."""

    name = "provenance"
    checked_classes = frozenset({"shell", "http"})

    def __init__(self, store: FingerprintStore) -> None:
        self.store = store
        self._taint: dict[int, frozenset[str]] = {}

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        """Remember the call's taint for ``observe``; deny a relay of planted content."""
        self._taint[call.sequence] = taint
        if len(self._taint) > 64:  # only the pending call's entry is needed
            self._taint.pop(next(iter(self._taint)))
        problem = self.store.refresh()
        if problem:
            return _reason("relay", "state", problem)
        if call.tool_class not in self.checked_classes or not self.store.holds("planted"):
            return None  # nothing planted yet: nothing to recognise, nothing to decode
        forms = _relay_surface(call)
        if not forms.complete:
            return _over_budget("relay")
        origin = self.store.find("planted", forms.texts)
        if origin is None:
            return None
        return _reason("relay", "planted",
                       f"the call carries content written under untrusted input ({origin})")

    def observe(self, call: ToolCall, result: ToolResult | None) -> None:
        """Fingerprint what a write under untrusted taint stored."""
        taint = self._taint.pop(call.sequence, frozenset())
        if not taint & UNTRUSTED_SOURCES or call.action not in WRITE_ACTIONS:
            return
        if call.tool_class == "http" or (result is not None and result.status != "ok"):
            return  # an HTTP write leaves the boundary; the egress guard judges it
        origin = f"{call.tool} at {call.run_id or 'run'}:{call.sequence}"
        for text in _planted_texts(call):
            self.store.add("planted", text, origin)

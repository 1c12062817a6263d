"""The egress guard: the shapes data takes when it is smuggled out over HTTP.

It looks at ``http`` calls only and judges where data rides, not whether the host is allowed
(capabilities and rules do that). Rules, in the order they are checked (thresholds are
``EgressSettings`` fields; defaults in brackets):

``guard.egress.get-body``
    A GET, HEAD or OPTIONS request with a body (``body`` or ``json``). Such a request has no
    use for one; a body there is a channel.
``guard.egress.dns-label``
    A host name whose subdomain labels (everything left of the last two labels) hold data:
    a hex label of ``label_hex_chars`` [16] or more, a base64/base32-looking label of
    ``label_encoded_chars`` [20] or more, or more than ``subdomain_chars`` [48] characters of
    labels in all. DNS lookups leak the name even when the connection is refused.
``guard.egress.query-data`` / ``guard.egress.header-data``
    A query value (or path segment) or a caller-set header value that is encoded data of
    ``value_encoded_chars`` [32] or more characters (hex, or base64 with mixed case and digits
    and at least 3.5 bits per character). ``Authorization`` is exempt from the shape rule.
``guard.egress.sensitive-ping``
    A URL or header carrying a value fingerprinted as a secret (see ``secrets``), however low
    its entropy: ``?v=hunter22`` is a ping with a password in it.
``guard.egress.drip-budget``
    Per registrable domain, the bytes of data-like query values, path segments, subdomain
    labels and custom headers sent during the run exceed ``drip_budget_bytes`` [1024]. Data-like
    means a token of 8+ characters with both letters and digits, or hex/base64: words and
    ordinary search terms do not count, so browsing does not exhaust the budget.
``guard.egress.convergence``
    After the run read something sensitive, ``convergence_channels`` [3] distinct channels
    (query, path, header, subdomain label, body) have carried data to one registrable domain:
    a secret split over several channels so that each alone looks harmless.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from callgate._model import Reason, ToolCall, ToolResult
from callgate.guards._decode import decode
from callgate.guards._store import FingerprintStore
from callgate.guards._text import (
    entropy,
    is_hex,
    looks_encoded,
    walk_strings,
)
from callgate.matchers._sensitive import SECRET_RESOURCE, SENSITIVE_PATH
from callgate.policy._settings import EgressSettings

_BODYLESS = frozenset({"get", "head", "options"})
#: Headers every client sends; their values are not a data channel worth counting.
_STANDARD_HEADERS = frozenset({"accept", "accept-language", "user-agent", "content-type",
                               "cache-control", "pragma", "if-none-match", "if-modified-since",
                               "referer", "origin"})
_SHAPE_EXEMPT_HEADERS = frozenset({"authorization"})
_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{8,}")


def _reason(what: str, message: str) -> Reason:
    return Reason(id=f"guard.egress.{what}", check="guard", message=message)


def registrable(host: str) -> str:
    """The last two labels of a host (an IP literal is itself): the budget's unit."""
    host = host.lower().rstrip(".")
    if host.startswith("[") or host.replace(".", "").isdigit():
        return host
    return ".".join(host.split(".")[-2:])


def _data_bytes(text: str) -> int:
    """How many characters of ``text`` look like data rather than words."""
    total = 0
    for token in _TOKEN.findall(text):
        letters = any(c.isalpha() for c in token)
        digits = any(c.isdigit() for c in token)
        if (letters and digits) or looks_encoded(token, min_len=16):
            total += len(token)
    return total


def _encoded_label(label: str, size: int) -> bool:
    """A DNS label (case-folded by every resolver) that reads as base64/base32 data: long, no
    hyphen, at least 3.5 bits of entropy per character, and either three or more digits or
    fewer than one vowel in four letters (words have about two in five)."""
    if len(label) < size or "-" in label or entropy(label) < 3.5:
        return False
    letters = [c for c in label if c.isalpha()]
    vowels = sum(c in "aeiou" for c in letters)
    return sum(c.isdigit() for c in label) >= 3 or vowels < 0.25 * max(len(letters), 1)


class _Request:
    """The parts of an HTTP call the rules look at."""

    def __init__(self, call: ToolCall) -> None:
        params = call.parameters
        url = params.get("url")
        parts = urlsplit(url if isinstance(url, str) else "")
        self.host = (parts.hostname or "").lower()
        self.domain = registrable(self.host)
        labels = self.host.split(".")
        self.labels = labels[:-2] if not self.host.replace(".", "").isdigit() else []
        query = [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
        extra = params.get("params")
        if isinstance(extra, Mapping):
            query += list(walk_strings(dict(extra)))
        self.query = query
        self.segments = [unquote(s) for s in parts.path.split("/") if s]
        headers = params.get("headers")
        self.headers: dict[str, str] = {
            str(k).lower(): str(v) for k, v in headers.items()
        } if isinstance(headers, Mapping) else {}
        self.has_body = "body" in params or "json" in params
        self.body: Any = params.get("body", params.get("json"))
        self.url = url if isinstance(url, str) else ""

    def custom_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k not in _STANDARD_HEADERS}


class EgressGuard:
    """Deny HTTP calls whose shape carries data out: see the module docstring for the rules."""

    name = "egress"

    def __init__(self, settings: EgressSettings, store: FingerprintStore | None = None) -> None:
        self.settings = settings
        self.store = store
        self._spent: dict[str, int] = defaultdict(int)
        self._channels: dict[str, set[str]] = defaultdict(set)
        self._sensitive = False

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        """A reason to deny an HTTP call that carries data in an exfiltration shape."""
        if call.tool_class != "http":
            return None
        req = _Request(call)
        for rule in (self._get_body, self._dns_labels, self._values, self._ping,
                     self._drip, self._convergence):
            reason = rule(call, req)
            if reason is not None:
                return reason
        return None

    def observe(self, call: ToolCall, result: ToolResult | None) -> None:
        """Count what an allowed request sent; note sensitive reads for ``convergence``."""
        if result is not None and result.status != "ok" and call.tool_class != "http":
            return
        if call.tool_class != "http":
            texts = list(walk_strings(call.parameters))
            if any(SENSITIVE_PATH.search(t) or SECRET_RESOURCE.search(t) for t in texts):
                self._sensitive = True
            return
        req = _Request(call)
        self._spent[req.domain] += self._cost(req)
        self._channels[req.domain] |= self._used_channels(req)

    # -- rules ------------------------------------------------------------------------------
    def _get_body(self, call: ToolCall, req: _Request) -> Reason | None:
        if call.action in _BODYLESS and req.has_body:
            return _reason("get-body", f"a {call.action.upper()} request carries a body")
        return None

    def _dns_labels(self, call: ToolCall, req: _Request) -> Reason | None:
        s = self.settings
        for label in req.labels:
            if len(label) >= s.label_hex_chars and is_hex(label):
                return _reason("dns-label", f"subdomain label of {len(label)} hex characters")
            if _encoded_label(label, s.label_encoded_chars):
                return _reason("dns-label", f"subdomain label of {len(label)} encoded characters")
        if sum(len(label) for label in req.labels) > s.subdomain_chars:
            return _reason("dns-label", f"subdomain labels longer than {s.subdomain_chars}")
        return None

    def _values(self, call: ToolCall, req: _Request) -> Reason | None:
        size = self.settings.value_encoded_chars
        for value in req.query:
            if any(looks_encoded(t, min_len=size) for t in _TOKEN.findall(value)):
                return _reason("query-data", f"a URL value holds {size}+ characters of data")
        for segment in req.segments:
            # Commit ids and content digests (hex, up to SHA-256's 64) are ordinary in paths.
            tokens = [t for t in _TOKEN.findall(segment) if not (is_hex(t) and len(t) <= 64)]
            if any(looks_encoded(t, min_len=size) for t in tokens):
                return _reason("query-data", f"a URL path holds {size}+ characters of data")
        for name, value in req.custom_headers().items():
            if name in _SHAPE_EXEMPT_HEADERS:
                continue
            if any(looks_encoded(t, min_len=size) for t in _TOKEN.findall(value)):
                return _reason("header-data", f"header {name!r} holds {size}+ characters of "
                                              "data")
        return None

    def _ping(self, call: ToolCall, req: _Request) -> Reason | None:
        if self.store is None:
            return None
        texts: list[str] = []
        for text in [req.url, *req.headers.values()]:
            texts.extend(decode(text).texts)  # an incomplete decoding: the secrets guard denies
        origin = self.store.find("secret", texts)
        if origin is None:
            return None
        return _reason("sensitive-ping", f"the URL or a header carries a secret ({origin})")

    def _drip(self, call: ToolCall, req: _Request) -> Reason | None:
        budget = self.settings.drip_budget_bytes
        spent = self._spent[req.domain] + self._cost(req)
        if spent > budget:
            return _reason("drip-budget", f"{spent} bytes of data sent to {req.domain} in this "
                                          f"run; the budget is {budget}")
        return None

    def _convergence(self, call: ToolCall, req: _Request) -> Reason | None:
        if not self._sensitive:
            return None
        channels = self._channels[req.domain] | self._used_channels(req)
        limit = self.settings.convergence_channels
        if len(channels) >= limit:
            return _reason("convergence", f"after a sensitive read, {len(channels)} channels "
                                          f"({', '.join(sorted(channels))}) carried data to "
                                          f"{req.domain}")
        return None

    # -- accounting -------------------------------------------------------------------------
    @staticmethod
    def _cost(req: _Request) -> int:
        parts: Iterable[str] = [*req.query, *req.segments, *req.custom_headers().values()]
        return sum(map(_data_bytes, parts)) + sum(len(label) for label in req.labels
                                                  if _data_bytes(label))

    @staticmethod
    def _used_channels(req: _Request) -> set[str]:
        used = set()
        if any(_data_bytes(v) for v in req.query):
            used.add("query")
        if any(_data_bytes(s) for s in req.segments):
            used.add("path")
        if any(_data_bytes(v) for v in req.custom_headers().values()):
            used.add("header")
        if any(_data_bytes(label) for label in req.labels):
            used.add("subdomain")
        if req.has_body and req.body:
            used.add("body")
        return used

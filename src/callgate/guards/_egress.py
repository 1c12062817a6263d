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

from collections import defaultdict

from callgate._model import Reason, ToolCall, ToolResult
from callgate.guards._decode import decode
from callgate.guards._scan import TOKEN, HttpParts, scan_of
from callgate.guards._store import FingerprintStore
from callgate.guards._text import entropy, is_hex, looks_encoded
from callgate.policy._settings import EgressSettings

_BODYLESS = frozenset({"get", "head", "options"})
_SHAPE_EXEMPT_HEADERS = frozenset({"authorization"})


def _reason(what: str, message: str) -> Reason:
    return Reason(id=f"guard.egress.{what}", check="guard", message=message)


def _encoded_label(label: str, size: int) -> bool:
    """A DNS label (case-folded by every resolver) that reads as base64/base32 data: long, no
    hyphen, at least 3.5 bits of entropy per character, and either three or more digits or
    fewer than one vowel in four letters (words have about two in five)."""
    if len(label) < size or "-" in label or entropy(label) < 3.5:
        return False
    letters = [c for c in label if c.isalpha()]
    vowels = sum(c in "aeiou" for c in letters)
    return sum(c.isdigit() for c in label) >= 3 or vowels < 0.25 * max(len(letters), 1)


class EgressGuard:
    """Deny HTTP calls whose shape carries data out: see the module docstring for the rules."""

    name = "egress"

    def __init__(self, settings: EgressSettings, store: FingerprintStore | None = None) -> None:
        self.settings = settings
        self.store = store
        self._spent: dict[str, int] = defaultdict(int)
        self._channels: dict[str, frozenset[str]] = defaultdict(frozenset)
        self._sensitive = False

    def check(self, call: ToolCall, taint: frozenset[str]) -> Reason | None:
        """A reason to deny an HTTP call that carries data in an exfiltration shape."""
        if call.tool_class != "http":
            return None
        req = scan_of(call).http
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
        scan = scan_of(call)
        if call.tool_class != "http":
            if not self._sensitive and (scan.sensitive or scan.secret_resource):
                self._sensitive = True
            return
        req = scan.http
        self._spent[req.domain] += req.cost
        self._channels[req.domain] |= req.channels

    def _get_body(self, call: ToolCall, req: HttpParts) -> Reason | None:
        if call.action in _BODYLESS and req.has_body:
            return _reason("get-body", f"a {call.action.upper()} request carries a body")
        return None

    def _dns_labels(self, call: ToolCall, req: HttpParts) -> Reason | None:
        s = self.settings
        for label in req.labels:
            if len(label) >= s.label_hex_chars and is_hex(label):
                return _reason("dns-label", f"subdomain label of {len(label)} hex characters")
            if _encoded_label(label, s.label_encoded_chars):
                return _reason("dns-label", f"subdomain label of {len(label)} encoded characters")
        if sum(len(label) for label in req.labels) > s.subdomain_chars:
            return _reason("dns-label", f"subdomain labels longer than {s.subdomain_chars}")
        return None

    def _values(self, call: ToolCall, req: HttpParts) -> Reason | None:
        size = self.settings.value_encoded_chars
        for value in req.query:
            if len(value) >= size and any(looks_encoded(t, min_len=size)
                                          for t in TOKEN.findall(value)):
                return _reason("query-data", f"a URL value holds {size}+ characters of data")
        for segment in req.segments:
            if len(segment) < size:
                continue
            tokens = [t for t in TOKEN.findall(segment) if not (is_hex(t) and len(t) <= 64)]
            if any(looks_encoded(t, min_len=size) for t in tokens):
                return _reason("query-data", f"a URL path holds {size}+ characters of data")
        for name, value in req.custom_headers.items():
            if name in _SHAPE_EXEMPT_HEADERS or len(value) < size:
                continue
            if any(looks_encoded(t, min_len=size) for t in TOKEN.findall(value)):
                return _reason("header-data", f"header {name!r} holds {size}+ characters of "
                                              "data")
        return None

    def _ping(self, call: ToolCall, req: HttpParts) -> Reason | None:
        if self.store is None or not self.store.holds("secret"):
            return None  # no secret read yet: nothing to recognise, nothing to decode
        texts: list[str] = []
        for text in [req.url, *req.headers.values()]:
            texts.extend(decode(text).texts)  # an incomplete decoding: the secrets guard denies
        origin = self.store.find("secret", texts)
        if origin is None:
            return None
        return _reason("sensitive-ping", f"the URL or a header carries a secret ({origin})")

    def _drip(self, call: ToolCall, req: HttpParts) -> Reason | None:
        budget = self.settings.drip_budget_bytes
        spent = self._spent[req.domain] + req.cost
        if spent > budget:
            return _reason("drip-budget", f"{spent} bytes of data sent to {req.domain} in this "
                                          f"run; the budget is {budget}")
        return None

    def _convergence(self, call: ToolCall, req: HttpParts) -> Reason | None:
        if not self._sensitive:
            return None
        channels = self._channels[req.domain] | req.channels
        limit = self.settings.convergence_channels
        if len(channels) >= limit:
            return _reason("convergence", f"after a sensitive read, {len(channels)} channels "
                                          f"({', '.join(sorted(channels))}) carried data to "
                                          f"{req.domain}")
        return None

"""What the built-in guards read of one call, computed once for all of them.

The kernel shows each call to every guard twice (``check``, then ``observe``), and the guards
read the same things of it: every string of its parameters, whether one names a sensitive path
or a secret resource, the forms those strings decode to, an HTTP call's parts and how much data
each part carries. ``scan_of(call)`` computes each of these the first time a guard asks and
keeps it with that call object, so a string is walked, screened and decoded once per call, not
once per guard and again in ``observe``. (The run-state counters ask the same question.)

The scan of the last call is kept, nothing older: it is recognised by identity, so a different
call object, even an equal one, gets a fresh scan, and a guard never reads another call's.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from callgate._identifiers import URL_AUTHORITY, authority_hostname
from callgate._model import ToolCall
from callgate.guards._decode import Forms, decode_all
from callgate.guards._store import MAX_SCAN_CHARS
from callgate.guards._text import looks_encoded, walk_strings
from callgate.matchers._sensitive import SECRET_RESOURCE, SENSITIVE_PATH

#: The shortest token ``TOKEN`` finds.
_TOKEN_CHARS = 8
#: A token of a URL value, header or label that may be data (the egress guard's unit).
TOKEN = re.compile(rf"[A-Za-z0-9+/=_-]{{{_TOKEN_CHARS},}}")
_STANDARD_HEADERS = frozenset({"accept", "accept-language", "user-agent", "content-type",
                               "cache-control", "pragma", "if-none-match", "if-modified-since",
                               "referer", "origin"})


def registrable(host: str) -> str:
    """The last two labels of a host (an IP literal is itself): the egress budget's unit."""
    host = host.lower().rstrip(".")
    if host.startswith("[") or host.replace(".", "").isdigit():
        return host
    return ".".join(host.split(".")[-2:])


def data_bytes(text: str) -> int:
    """How many characters of ``text`` look like data rather than words: tokens of 8 or more
    characters mixing letters and digits, or hex / base64 of 16 or more."""
    if len(text) < _TOKEN_CHARS:  # too short to hold a token (most path segments and labels)
        return 0
    total = 0
    for token in TOKEN.findall(text):
        letters = any(c.isalpha() for c in token)
        digits = any(c.isdigit() for c in token)
        if (letters and digits) or looks_encoded(token, min_len=16):
            total += len(token)
    return total


@functools.lru_cache(maxsize=4096)
def _host_parts(hostname: str | None) -> tuple[str, str, tuple[str, ...]]:
    """A host (lower-cased), its registrable domain and its subdomain labels (none for an IP
    literal); worked out once per host."""
    host = (hostname or "").lower()
    labels = host.split(".")
    return host, registrable(host), tuple(labels[:-2]) if not host.replace(".", "").isdigit() \
        else ()


#: What ``urlsplit`` strips from or removes anywhere in a URL; a URL holding one is split whole.
_REMOVED = re.compile(r"[\t\r\n]")


def split_url(url: str) -> tuple[str, str, tuple[str, ...], str, str]:
    """``urlsplit``'s reading of ``url``: host (lower-cased), registrable domain, subdomain
    labels, path and query.

    The host depends on ``scheme://authority`` alone (``URL_AUTHORITY``), so it is parsed once
    for all the URLs below one authority; what follows it is cut as ``urlsplit`` cuts it (the
    fragment at the first ``#``, then the query at the first ``?``). A URL without that prefix,
    or holding a tab or line end (which ``urlsplit`` removes first), is split whole. A test
    holds the two readings equal.
    """
    found = URL_AUTHORITY.match(url)
    if found is None or _REMOVED.search(url):
        parts = urlsplit(url)
        return (*_host_parts(parts.hostname), parts.path, parts.query)
    rest = url[found.end():].split("#", 1)[0]
    path, _, query = rest.partition("?")
    return (*_host_parts(authority_hostname(found.group())), path, query)


def query_values(query: str) -> list[str]:
    """The values of a query string as ``parse_qsl(query, keep_blank_values=True)`` reads them
    (a name without ``=`` has the value ``""``). Without an escape (``%`` or ``+``) there is
    nothing to undo, and the pieces are cut here; a test holds the two readings equal."""
    if "%" in query or "+" in query:
        return [value for _, value in parse_qsl(query, keep_blank_values=True)]
    return [piece.partition("=")[2] for piece in query.split("&") if piece]


class HttpParts:
    """The parts of an HTTP call the egress rules look at, and the data each part carries."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        url = params.get("url")
        self.url = url if isinstance(url, str) else ""
        self.host, self.domain, labels, path, query_text = split_url(self.url)
        self.labels = list(labels)
        query = query_values(query_text)
        extra = params.get("params")
        if isinstance(extra, Mapping):
            query += list(walk_strings(dict(extra)))
        self.query = query
        self.segments = [unquote(s) if "%" in s else s for s in path.split("/") if s]
        headers = params.get("headers")
        self.headers: dict[str, str] = {
            str(k).lower(): str(v) for k, v in headers.items()
        } if isinstance(headers, Mapping) else {}
        self.custom_headers = {k: v for k, v in self.headers.items()
                               if k not in _STANDARD_HEADERS}
        self.has_body = "body" in params or "json" in params
        self.body: Any = params.get("body", params.get("json"))
        self._cost: int | None = None
        self._channels: frozenset[str] | None = None

    @property
    def cost(self) -> int:
        """Characters of data the request carries in its query, path, headers and labels."""
        if self._cost is None:
            self._measure()
        assert self._cost is not None
        return self._cost

    @property
    def channels(self) -> frozenset[str]:
        """The channels (query, path, header, subdomain, body) that carry data."""
        if self._channels is None:
            self._measure()
        assert self._channels is not None
        return self._channels

    def _measure(self) -> None:
        used: set[str] = set()
        total = 0
        for channel, parts in (("query", self.query), ("path", self.segments),
                               ("header", list(self.custom_headers.values()))):
            spent = 0
            for part in parts:  # (a loop: ``map`` calls the compiled function the slow way)
                spent += data_bytes(part)
            total += spent
            if spent:
                used.add(channel)
        labelled = 0
        for label in self.labels:
            if data_bytes(label):
                labelled += len(label)
        total += labelled
        if labelled:
            used.add("subdomain")
        if self.has_body and self.body:
            used.add("body")
        self._cost, self._channels = total, frozenset(used)


class Scan:
    """One call as the guards read it; each part computed on first use."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self._strings: tuple[str, ...] | None = None
        self._sensitive: bool | None = None
        self._secret_resource: bool | None = None
        self._outbound: Forms | None = None
        self._http: HttpParts | None = None

    @property
    def strings(self) -> tuple[str, ...]:
        """Every string of the parameters, keys included (``walk_strings``)."""
        if self._strings is None:
            self._strings = tuple(walk_strings(self.call.parameters))
        return self._strings

    @property
    def sensitive(self) -> bool:
        """Whether a string names a sensitive path (``SENSITIVE_PATH``)."""
        if self._sensitive is None:
            self._sensitive = any(SENSITIVE_PATH.search(t) for t in self.strings)
        return self._sensitive

    @property
    def secret_resource(self) -> bool:
        """Whether a string names a secret resource (``SECRET_RESOURCE``)."""
        if self._secret_resource is None:
            self._secret_resource = any(SECRET_RESOURCE.search(t) for t in self.strings)
        return self._secret_resource

    @property
    def outbound(self) -> Forms:
        """Every string with the forms it decodes to (incomplete past the scan budget)."""
        if self._outbound is None:
            self._outbound = decode_all(self.strings, max_chars=MAX_SCAN_CHARS)
        return self._outbound

    @property
    def http(self) -> HttpParts:
        """The call's HTTP parts (of its ``url``, ``params``, ``headers`` and body)."""
        if self._http is None:
            self._http = HttpParts(self.call.parameters)
        return self._http


_last = threading.local()


def scan_of(call: ToolCall) -> Scan:
    """The scan of ``call``: the one already made for this very object, or a new one."""
    scan: Scan | None = getattr(_last, "scan", None)
    if scan is None or scan.call is not call:
        scan = Scan(call)
        _last.scan = scan
    return scan


"""The HTTP executor: outbound requests that cannot be turned against internal addresses.

Server-side request forgery is stopped here, at execution time, whatever the policy allowed:

* only ``http`` / ``https`` (or a narrower allow-list); no credentials in the URL;
* the host is an IP literal in any spelling (decimal, octal, hex, short, IPv6 with embedded
  IPv4) or a DNS name resolved once through the resolver; *every* resolved address is checked
  against the special-purpose table (:mod:`callgate.executors._addresses`);
* the connection goes to the address that was checked (the URL is rewritten to the IP; the
  name travels in ``Host`` and TLS SNI), so DNS cannot rebind between check and connect;
* redirects are followed by hand, each hop re-checked: same host unless
  ``cross_host_redirects``, no https→http downgrade, at most ``max_redirects``;
* request and response sizes are capped (compressed bodies are inflated with a bound), and the
  whole exchange has one deadline, so a slow-drip server cannot hold the executor;
* proxies from the environment are ignored (a proxy would make the checks meaningless).

Loopback and private addresses are refused by default; tests and local deployments open
specific ones with ``allowed_addresses`` (addresses or CIDR networks, e.g. ``{"127.0.0.1"}``).
Output is tainted ``web`` with the host as origin.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from callgate._errors import ExecutorError
from callgate._model import TaintLabel, ToolCall, ToolResult
from callgate.executors._addresses import check_address, is_opened, parse_allowed, parse_ip
from callgate.executors._result import Outcome, check_action, denied, failed, guarded, param_str

Resolver = Callable[[str, int], list[str]]

_METHODS = {
    "get": "GET",
    "head": "HEAD",
    "options": "OPTIONS",
    "post": "POST",
    "put": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
}
_SUPPORTED_SCHEMES = frozenset({"http", "https"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Headers the executor owns: letting a caller set them would undo a check or smuggle a request.
_RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
    "keep-alive", "proxy-connection", "proxy-authorization", "accept-encoding", "expect",
})
_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie"})
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_-]{1,63})*$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the operating system (``getaddrinfo``), TCP addresses only."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class HttpExecutor:
    """SSRF-hardened HTTP: actions ``get head options post put patch delete``.

    Parameters: ``url``; ``headers`` (string map); ``params`` (query map); ``body`` (text) or
    ``json`` (any JSON value). Output: ``status``, ``url``, ``headers``, ``body`` (text),
    ``redirects``. ``ssl_context`` replaces the default certificate verification context (for
    a private CA); verification itself cannot be turned off.
    """

    tool_class = "http"

    def __init__(
        self,
        *,
        allowed_schemes: tuple[str, ...] = ("https", "http"),
        timeout_s: float = 10.0,
        max_response_bytes: int = 5 * 2**20,
        max_request_bytes: int = 1 * 2**20,
        max_redirects: int = 5,
        cross_host_redirects: bool = False,
        allowed_addresses: frozenset[str] = frozenset(),
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        schemes = frozenset(s.lower() for s in allowed_schemes)
        if not schemes or not schemes <= _SUPPORTED_SCHEMES:
            raise ExecutorError(f"allowed_schemes must be a subset of {sorted(_SUPPORTED_SCHEMES)}")
        if timeout_s <= 0 or max_response_bytes <= 0 or max_request_bytes <= 0:
            raise ExecutorError("timeout and size limits must be positive")
        if not 0 <= max_redirects <= 20:
            raise ExecutorError("max_redirects must be between 0 and 20")
        try:
            self._opened = parse_allowed(allowed_addresses)
        except ValueError as exc:
            raise ExecutorError(str(exc)) from exc
        self.allowed_schemes = schemes
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.max_request_bytes = max_request_bytes
        self.max_redirects = max_redirects
        self.cross_host_redirects = cross_host_redirects
        self._resolver: Resolver = resolver or system_resolver
        self._verify: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def close(self) -> None:
        """Release the underlying HTTP client (the executor can still be used afterwards)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _shared_client(self) -> httpx.Client:
        """One client per executor (building a TLS context is slow), created on first use.

        Keep-alive is off: a pooled TLS connection opened for one host name must never carry a
        request for another name that resolved to the same address.
        """
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(
                    trust_env=False,
                    follow_redirects=False,
                    verify=self._verify,
                    limits=httpx.Limits(max_keepalive_connections=0),
                )
            return self._client

    def __call__(self, call: ToolCall) -> ToolResult:
        """Same as ``execute``: lets the executor be registered where a callable is expected."""
        return self.execute(call)

    def execute(self, call: ToolCall) -> ToolResult:
        """Send the allowed request, re-checking every address and redirect on the way."""

        def run() -> Outcome:
            check_action(call, self.tool_class, _METHODS)
            return self._run(call.action, call.parameters)

        return guarded(call, run)

    # -- the request, hop by hop -----------------------------------------------------------
    def _run(self, action: str, params: Mapping[str, Any]) -> Outcome:
        method = _METHODS[action]
        url = self._checked_url(param_str(params, "url"))
        url = _with_query(url, params.get("params"))
        headers = _caller_headers(params.get("headers"))
        body = _request_body(params, headers)
        size = len(str(url)) + sum(len(k) + len(v) for k, v in headers.items()) + len(body or b"")
        if size > self.max_request_bytes:
            raise denied("http.request-too-large", f"request of {size} bytes exceeds the cap")
        deadline = time.monotonic() + self.timeout_s
        origin_host = _host_of(url)
        hops: list[str] = []
        while True:
            status, reply_headers, content, location = self._exchange(
                method=method, url=url, headers=headers, body=body, deadline=deadline
            )
            if location is None:
                break
            if len(hops) >= self.max_redirects:
                raise denied("ssrf.redirect-limit", f"more than {self.max_redirects} redirects")
            target = self._checked_redirect(url, location, origin_host)
            if _host_of(target) != _host_of(url):
                headers = {k: v for k, v in headers.items()
                           if k.lower() not in _CREDENTIAL_HEADERS}
            method, body, headers = _redirected_method(status, method, body, headers)
            hops.append(str(target))
            url = target
        output = {
            "status": status,
            "url": str(url),
            "headers": reply_headers,
            "body": _text(content, reply_headers.get("content-type", "")),
            "redirects": hops,
        }
        hosts = dict.fromkeys([origin_host, _host_of(url)])
        return Outcome(output, [TaintLabel(source="web", origin=h) for h in hosts])

    def _exchange(
        self,
        *,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        body: bytes | None,
        deadline: float,
    ) -> tuple[int, dict[str, str], bytes, str | None]:
        """One request to the pinned address; returns status, headers, body and any redirect."""
        host = _host_of(url)
        address = self._pin(host, url.port or (443 if url.scheme == "https" else 80))
        wire_headers = dict(headers)
        wire_headers["Host"] = url.netloc.decode("ascii")
        wire_headers["Accept-Encoding"] = "gzip, deflate, identity"
        extensions: dict[str, Any] = {}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise failed("http.timeout", f"no time left for {url}")
        if url.scheme == "https" and parse_ip(host) is None:
            extensions["sni_hostname"] = host
        client = self._shared_client()
        request = client.build_request(
            method, url.copy_with(host=address), headers=wire_headers, content=body,
            extensions=extensions, timeout=httpx.Timeout(remaining),
        )
        try:
            response = client.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    return response.status_code, _flat(response.headers), b"", location
                content = self._read_body(response, deadline)
            finally:
                response.close()
        except httpx.TimeoutException as exc:
            raise failed("http.timeout", f"{method} {url} timed out") from exc
        except httpx.HTTPError as exc:
            raise failed("http.transport", f"{method} {url}: {exc}") from exc
        return response.status_code, _flat(response.headers), content, None

    def _read_body(self, response: httpx.Response, deadline: float) -> bytes:
        cap = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise denied("http.response-too-large", f"declared {declared} bytes; cap is {cap}")
        inflate = _inflater(response.headers.get("content-encoding", ""))
        received = bytearray()
        for chunk in response.iter_raw():
            try:
                received += inflate.decompress(chunk, cap + 1 - len(received))
            except zlib.error as exc:
                raise failed("http.decode", f"bad compressed body: {exc}") from exc
            if len(received) > cap or inflate.unconsumed_tail:
                raise denied("http.response-too-large", f"response exceeds {cap} bytes")
            if time.monotonic() > deadline:
                raise failed("http.timeout", f"response not complete within {self.timeout_s}s")
        received += inflate.flush(cap + 1 - len(received))
        if len(received) > cap:
            raise denied("http.response-too-large", f"response exceeds {cap} bytes")
        return bytes(received)

    # -- checks ----------------------------------------------------------------------------
    def _checked_url(self, raw: str) -> httpx.URL:
        try:
            url = httpx.URL(raw)
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise denied("ssrf.invalid-url", f"{raw!r} is not a valid URL") from exc
        if url.scheme not in self.allowed_schemes:
            raise denied("ssrf.scheme", f"scheme {url.scheme!r} is not allowed")
        if url.userinfo:
            raise denied("ssrf.userinfo", "credentials in the URL are refused")
        if not url.host:
            raise denied("ssrf.invalid-url", f"{raw!r} has no host")
        if url.port is not None and not 0 < url.port < 65536:
            raise denied("ssrf.invalid-url", f"port {url.port} is out of range")
        return url

    def _checked_redirect(self, current: httpx.URL, location: str, origin: str) -> httpx.URL:
        try:
            target = current.join(location)
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise denied("ssrf.redirect-invalid", f"bad redirect location {location!r}") from exc
        target = self._checked_url(str(target))
        if current.scheme == "https" and target.scheme == "http":
            raise denied("ssrf.redirect-downgrade", f"redirect from https to {target}")
        if not self.cross_host_redirects and _host_of(target) != origin:
            raise denied("ssrf.redirect-cross-host", f"redirect from {origin} to {target.host}")
        return target

    def _pin(self, host: str, port: int) -> str:
        """The one address the connection will use, after every candidate passed the table."""
        literal = parse_ip(host)
        if literal is not None:
            candidates = [str(literal)]
        else:
            if not _HOSTNAME.match(host) or _NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
                raise denied("ssrf.invalid-host", f"{host!r} is neither an IP nor a host name")
            try:
                candidates = list(self._resolver(host, port))
            except (OSError, UnicodeError) as exc:
                raise failed("http.resolve", f"cannot resolve {host}: {exc}") from exc
            if not candidates:
                raise failed("http.resolve", f"{host} has no addresses")
        for candidate in candidates:
            reason = check_address(candidate)
            if reason is not None and not is_opened(candidate, self._opened):
                how = "is" if literal is not None else "resolves to"
                raise denied("ssrf.private-address", f"{host} {how} {candidate} ({reason})")
        pinned = parse_ip(candidates[0])
        if pinned is None:  # pragma: no cover - check_address refused it above
            raise denied("ssrf.private-address", f"{candidates[0]} is not an address")
        return str(pinned).split("%", 1)[0]


def _host_of(url: httpx.URL) -> str:
    """The host as compared and checked: IDNA ASCII, lower case, without a trailing dot."""
    host = url.raw_host.decode("ascii", "replace").lower()
    return host[:-1] if host.endswith(".") else host


def _with_query(url: httpx.URL, query: Any) -> httpx.URL:
    if query is None:
        return url
    if not isinstance(query, Mapping):
        raise failed("params.invalid", "parameter 'params' must be a mapping")
    return url.copy_merge_params({str(k): _query_value(v) for k, v in query.items()})


def _query_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return str(value)


def _caller_headers(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise failed("params.invalid", "parameter 'headers' must be a mapping")
    headers: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise failed("params.invalid", "header names and values must be strings")
        if any(c in name + value for c in "\r\n\x00"):
            raise denied("http.header-injection", f"header {name!r} contains a line break")
        if name.lower() in _RESERVED_HEADERS:
            raise denied("http.reserved-header", f"header {name!r} is set by the executor")
        headers[name] = value
    return headers


def _request_body(params: Mapping[str, Any], headers: dict[str, str]) -> bytes | None:
    if "body" in params and "json" in params:
        raise failed("params.invalid", "give either 'body' or 'json', not both")
    if "json" in params:
        try:
            encoded = json.dumps(params["json"], separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise failed("params.invalid", f"'json' is not JSON-serialisable: {exc}") from exc
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return encoded
    if "body" in params:
        return param_str(params, "body").encode("utf-8")
    return None


def _redirected_method(
    status: int, method: str, body: bytes | None, headers: dict[str, str]
) -> tuple[str, bytes | None, dict[str, str]]:
    """What a browser does: 303 (and 301/302 after POST) become a GET without a body."""
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        kept = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        return "GET", None, kept
    return method, body, headers


class _Identity:
    """A pass-through with the same interface as a zlib decompressor."""

    unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        return data

    def flush(self, length: int = 0) -> bytes:
        return b""


def _inflater(encoding: str) -> Any:
    """A bounded decompressor for the response's content coding; unknown codings are refused."""
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return _Identity()
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS)
    raise denied("http.content-encoding", f"content coding {encoding!r} is not supported")


def _flat(headers: httpx.Headers) -> dict[str, str]:
    flat: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.lower()
        flat[key] = f"{flat[key]}, {value}" if key in flat else value
    return flat


def _text(content: bytes, content_type: str) -> str:
    match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    charset = match.group(1) if match else "utf-8"
    try:
        return content.decode(charset, errors="replace")
    except LookupError:
        return content.decode("utf-8", errors="replace")

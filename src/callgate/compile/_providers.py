"""The model services the compiler asks, behind one small interface.

A :class:`Provider` turns a system prompt and a user prompt into the model's text. Two wire
protocols are spoken, chosen by the provider part of a ``PROVIDER:MODEL`` spec:

* ``openai:MODEL`` — OpenAI-compatible chat completions (``POST {base}/chat/completions``), which
  also covers local servers such as vLLM, llama.cpp and Ollama (they need no key);
* ``anthropic:MODEL`` — Anthropic messages (``POST {base}/v1/messages``; a key is required).

Every request asks for temperature 0. Every failure — refused connection, timeout, non-2xx
status, a body that is not JSON or lacks the expected fields, a body over
:data:`MAX_RESPONSE_BYTES` — is a :class:`ProviderError` naming the provider, the model and what
went wrong. The API key never appears in a message, an exception (the transport's exception is
not chained, since its request carries the key) or a ``repr``; nor do the base URL's userinfo and
query string (``http://user:pass@host/v1?api-key=…``), which a message shows as ``[redacted]``.
A base URL's query is kept for the requests (``?api-version=…``): the endpoint's path is joined
before it.

Configuration comes from the ``environ`` mapping given to :func:`provider_from` (``os.environ``,
read at call time, when none is given). When a mapping is given it is the whole configuration:
the process environment is not consulted for proxies or certificate settings either.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import SplitResult, unquote, unquote_plus, urlsplit, urlunsplit

from callgate._errors import CallgateError
from callgate._jsonlimits import loads_bounded

if TYPE_CHECKING:
    import httpx

#: The largest response body read from a model service (decoded); past it the read stops.
MAX_RESPONSE_BYTES = 2 * 1024 * 1024
#: How much of an error response's body a message quotes.
_QUOTED_BODY_CHARS = 300
#: How much of an error response's body is read (enough to quote, whatever the encoding).
_ERROR_BODY_BYTES = 4 * _QUOTED_BODY_CHARS
#: ``max_tokens`` sent to Anthropic (the field is required there).
ANTHROPIC_MAX_TOKENS = 4096
ANTHROPIC_VERSION = "2023-06-01"

_OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"
_ANTHROPIC_DEFAULT_BASE = "https://api.anthropic.com"
_REDACTED = "[redacted]"
#: A secret's beginning left at the end of a text cut short is redacted from this length on.
_MIN_CUT_SECRET = 4
#: ``scheme://userinfo@`` in any text a message quotes (a proxy's or a redirect's URL, say).
_USERINFO = re.compile(r"://[^/\s@]*@")


class ProviderError(CallgateError):
    """A model service could not be configured or asked, or its answer could not be read."""


class Provider(Protocol):
    """A model service: ``complete`` returns the model's text for one exchange.

    The providers here also have ``service``, where the model is served (the base URL without
    userinfo, query or fragment); when a provider has it, it is part of the response cache key.
    """

    #: ``PROVIDER:MODEL``, e.g. ``openai:gpt-4o-mini``; part of the response cache key.
    model: str

    def complete(self, system: str, user: str) -> str:
        """The model's answer to ``user`` under ``system``; raises :class:`ProviderError`."""
        ...


def provider_from(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 60.0,
    environ: Mapping[str, str] | None = None,
) -> Provider:
    """The provider a ``PROVIDER:MODEL`` spec names, configured from arguments, then ``environ``.

    ``openai``: base URL ``base_url``, else ``CALLGATE_OPENAI_BASE_URL``, else
    ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``; key ``api_key``, else
    ``CALLGATE_OPENAI_API_KEY``, else ``OPENAI_API_KEY``, else none (no ``Authorization``).

    ``anthropic``: base URL ``base_url``, else ``CALLGATE_ANTHROPIC_BASE_URL``, else
    ``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``; key ``api_key``, else
    ``CALLGATE_ANTHROPIC_API_KEY``, else ``ANTHROPIC_API_KEY`` — required.

    ``timeout_s`` bounds connecting and each read, and the whole exchange. Empty environment
    values count as unset. Raises :class:`ProviderError` for an unknown provider, a spec
    without ``:``, an empty model, a base URL that is not ``http(s)`` with a host (and a numeric
    port, if any), or a bad key.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    name, sep, model = spec.partition(":")
    name = name.strip().lower()
    model = model.strip()
    known = ", ".join(sorted(_PROVIDERS))
    if not sep:
        raise ProviderError(f"model spec {spec!r} is not PROVIDER:MODEL (known providers: {known})")
    if name not in _PROVIDERS:
        raise ProviderError(f"unknown model provider {name!r} in {spec!r} (known: {known})")
    if not model:
        raise ProviderError(f"model spec {spec!r} names no model after {name + ':'!r}")
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ProviderError(f"{name}:{model}: timeout must be a positive number of seconds")
    upper = name.upper()
    base = (
        _first(base_url, env.get(f"CALLGATE_{upper}_BASE_URL"), env.get(f"{upper}_BASE_URL"))
        or _DEFAULT_BASES[name]
    )
    key = _first(api_key, env.get(f"CALLGATE_{upper}_API_KEY"), env.get(f"{upper}_API_KEY"))
    return _PROVIDERS[name](
        model,
        base_url=base,
        api_key=key,
        timeout_s=float(timeout_s),
        trust_env=environ is None,
    )


def _first(*values: str | None) -> str | None:
    for value in values:
        if value is not None and value.strip():
            return value.strip()
    return None


class _HttpProvider:
    """What both protocols share: configuration, the bounded exchange, error messages."""

    provider = ""
    path = ""
    #: Set when the service refuses a request without a key: how to give one.
    key_needed = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        timeout_s: float,
        trust_env: bool,
    ) -> None:
        self.model_name = model
        self.model = f"{self.provider}:{model}"
        self.timeout_s = timeout_s
        self._trust_env = trust_env
        parts = _split_http(base_url)
        if parts is None:
            raise ProviderError(
                f"{self.model}: base URL {_shown_url(base_url)!r} is not an http(s) URL"
            )
        path = parts.path.rstrip("/")
        self.base_url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
        #: The endpoint: the base URL's path, then the protocol's, then the base URL's query.
        self.url = urlunsplit((parts.scheme, parts.netloc, path + self.path, parts.query, ""))
        #: Where the model is served, normalised, without userinfo, query or fragment (the cache
        #: key holds it, so two services never share an answer).
        self.service = f"{parts.scheme}://{parts.netloc.rpartition('@')[2].lower()}{path}"
        self._shown_url = _shown_url(self.url)
        if api_key is not None and not _header_safe(api_key):
            # the key itself is never quoted, not even in part
            raise ProviderError(
                f"{self.model}: the API key has characters an HTTP header cannot carry"
            )
        if self.key_needed and not api_key:
            raise ProviderError(f"{self.model}: no API key ({self.key_needed})")
        self.__key = api_key
        self.__secrets = _secrets(api_key, parts)

    def __repr__(self) -> str:
        key = "set" if self.__key else "unset"
        return f"<{type(self).__name__} {self.model} at {self._shown_url} key={key}>"

    @property
    def _key(self) -> str | None:
        return self.__key

    def _fail(self, what: str) -> ProviderError:
        return ProviderError(f"{self.model} at {self._shown_url}: {self._redact(what)}")

    def _redact(self, text: str, *, cut: bool = False) -> str:
        """``text`` without the key, the base URL's userinfo and query values, or any URL's
        userinfo; ``cut``: the text may have been cut off inside a secret, so a secret's
        beginning at its end goes too."""
        for secret in self.__secrets:
            text = text.replace(secret, _REDACTED)
        if cut:
            text = _without_cut_secret(text, self.__secrets)
        return _USERINFO.sub(f"://{_REDACTED}@", text)

    def _quote(self, data: bytes, chars: int) -> str:
        """The beginning of a body, redacted before it is shortened to ``chars`` characters."""
        head = data[:_ERROR_BODY_BYTES].decode("utf-8", "replace")
        return self._redact(head, cut=True)[:chars]

    # -- the exchange ------------------------------------------------------------------------

    def _post(self, headers: dict[str, str], body: dict[str, Any]) -> Any:
        """POST ``body`` as JSON; the decoded JSON answer of a 2xx response."""
        try:
            import httpx
        except ImportError:  # pragma: no cover - httpx ships with the executors extra
            raise ProviderError(
                f"{self.model}: asking a model service needs httpx (pip install httpx)"
            ) from None
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            # a compressed body is inflated below with a bound, but plain text is simpler
            "accept-encoding": "identity",
            **headers,
        }
        deadline = time.monotonic() + self.timeout_s
        cutoff = _Cutoff(self.timeout_s)
        try:
            with (
                cutoff,
                httpx.Client(
                    timeout=httpx.Timeout(self.timeout_s),
                    trust_env=self._trust_env,
                    follow_redirects=False,
                ) as client,
                client.stream(
                    "POST",
                    self.url,
                    headers=headers,
                    # ASCII JSON: a prompt holding a lone surrogate (from a tool's description,
                    # say) cannot be encoded as UTF-8, as httpx's own ``json=`` would
                    content=json.dumps(body).encode("ascii"),
                    extensions={"trace": cutoff.trace},
                ) as response,
            ):
                status = response.status_code
                ok = 200 <= status < 300
                data = self._read(response, deadline, ok=ok)
        except ProviderError:
            raise
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
            # OSError, ValueError: the client's own set-up (a missing SSL_CERT_FILE, a proxy URL
            # of no known scheme); the transport's exception is not chained (it holds the key)
            raise self._fail(_transport_problem(exc, self.timeout_s, cutoff.expired)) from None
        if cutoff.expired:
            # the connection was shut at the deadline, perhaps ending a body that runs to the close
            raise self._fail(f"no complete answer within {self.timeout_s:g}s (timed out)")
        if not ok:
            raise self._fail(f"HTTP status {status}: {self._quote(data, _QUOTED_BODY_CHARS)!r}")
        try:
            return loads_bounded(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._fail(
                f"the answer is not JSON ({_describe(exc)}; it begins {self._quote(data, 80)!r})"
            ) from None

    def _read(self, response: httpx.Response, deadline: float, *, ok: bool) -> bytes:
        """The response body, decoded, at most :data:`MAX_RESPONSE_BYTES`, before ``deadline``.

        An error response (``ok`` false) is only read as far as its message is quoted.
        """
        declared = response.headers.get("content-length")
        if not ok:
            body = bytearray()
            for chunk in _decoded(response, self._fail):
                body += chunk
                if len(body) >= _ERROR_BODY_BYTES or time.monotonic() > deadline:
                    break
            return bytes(body[:_ERROR_BODY_BYTES])
        if declared is not None and declared.strip().isascii() and declared.strip().isdigit():
            length = int(declared)
            encoded = response.headers.get("content-encoding", "identity").strip().lower()
            if length > MAX_RESPONSE_BYTES and encoded in {"", "identity"}:
                raise self._fail(
                    f"the answer is {length} bytes, over the {MAX_RESPONSE_BYTES}-byte limit"
                )
        body = bytearray()
        for chunk in _decoded(response, self._fail):
            if time.monotonic() > deadline:
                raise self._fail(f"no complete answer within {self.timeout_s:g}s (timed out)")
            if len(body) + len(chunk) > MAX_RESPONSE_BYTES:
                raise self._fail(f"the answer is over the {MAX_RESPONSE_BYTES}-byte limit")
            body += chunk
        return bytes(body)


def _decoded(response: httpx.Response, fail: Callable[[str], ProviderError]) -> Iterator[bytes]:
    """The body's bytes with any gzip/deflate content-coding undone, never inflating more than
    one chunk past the limit (the raw stream is read as it arrives)."""
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding in {"", "identity"}:
        yield from response.iter_raw()
        return
    if coding not in {"gzip", "x-gzip", "deflate"}:
        raise fail(f"the answer uses content-coding {coding!r}, which is not read")
    # 32 + MAX_WBITS: a zlib or gzip header, detected
    inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)
    step = 64 * 1024
    try:
        for raw in response.iter_raw():
            data = inflater.decompress(raw, step)
            yield data
            while inflater.unconsumed_tail:
                yield inflater.decompress(inflater.unconsumed_tail, step)
        yield inflater.flush()
    except zlib.error as exc:
        raise fail(f"the {coding} answer does not inflate ({exc})") from None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _transport_problem(exc: Exception, timeout_s: float, expired: bool) -> str:
    """What a failed exchange is reported as (``expired``: the deadline shut the connection)."""
    import httpx

    if expired:
        return f"no complete answer within {timeout_s:g}s (timed out)"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"timed out connecting after {timeout_s:g}s"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout_s:g}s (timed out)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({_describe(exc)})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the connection broke off mid-answer (truncated body: {_describe(exc)})"
    return f"request failed ({_describe(exc)})"


class _Cutoff:
    """Shuts the exchange's connection down once ``seconds`` have passed since it began.

    The transport's timeout bounds each read, not the exchange: a server sending its status line
    and headers a byte at a time, each byte within the timeout, would hold a request open for
    hours. The socket comes from the transport's ``trace`` extension as it connects; a shutdown
    from the timer's thread wakes a read blocked on it, and ``expired`` tells why it ended.
    """

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Cutoff:
        self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """The ``trace`` extension's callback: keeps each socket the exchange connects."""
        if not event.endswith(("connect_tcp.complete", "start_tls.complete")):
            return
        extra = getattr(info.get("return_value"), "get_extra_info", None)
        sock = extra("socket") if callable(extra) else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, also under TLS: it wakes the reader without touching the
    # TLS state another thread is using; a socket already closed is left alone
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _split_http(url: str) -> SplitResult | None:
    """``url`` split, when it is an ``http(s)`` URL with a host and a numeric port, if any;
    else ``None`` (``http://user:pa#ss@host`` is host ``user``, port ``pa``: refused)."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number
        return None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return None
    return parts


def _shown_url(url: str) -> str:
    """``url`` as a message shows it: any userinfo and anything from a ``?`` or ``#`` on are
    ``[redacted]``. Plain string work, so that a URL too malformed to parse is redacted too,
    and generous: everything before the last ``@`` counts as userinfo."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        rest = f"{_REDACTED}@{rest.rpartition('@')[2]}"
    ends = [at for at in (rest.find("?"), rest.find("#")) if at >= 0]
    if ends:
        rest = rest[: min(ends) + 1] + _REDACTED
    return scheme + sep + rest


def _secrets(api_key: str | None, parts: SplitResult) -> tuple[str, ...]:
    """What a message must never quote: the key, the base URL's userinfo, password (or a lone
    user name, which some services take as the key), query and query values, each as written,
    percent-decoded and JSON-escaped, and the Basic credentials httpx makes of the userinfo;
    longest first, so that a longer one is redacted whole. Parts of the URL shorter than
    :data:`_MIN_CUT_SECRET` are left out (``?v=1`` would otherwise redact every ``1``)."""
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    found = [userinfo, password or user, parts.query]
    found += [pair.partition("=")[2] for pair in parts.query.split("&")]
    found = [value for value in found if len(value) >= _MIN_CUT_SECRET]
    found += [api_key] if api_key else []
    found += [form(value) for value in found for form in (unquote, unquote_plus)]
    found += [json.dumps(value)[1:-1] for value in found]
    if userinfo:
        basic = f"{unquote(user)}:{unquote(password)}".encode()
        found.append(base64.b64encode(basic).decode("ascii"))
    return tuple(sorted({value for value in found if value}, key=len, reverse=True))


def _without_cut_secret(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with a secret's beginning at its very end (where the text was cut) redacted."""
    for secret in secrets:
        for size in range(len(secret) - 1, _MIN_CUT_SECRET - 1, -1):
            if text.endswith(secret[:size]):
                return text[:-size] + _REDACTED
    return text


def _header_safe(value: str) -> bool:
    return bool(value) and all(0x21 <= ord(ch) <= 0x7E for ch in value)


def _field(value: Any, *path: str | int) -> Any:
    """``value[path[0]][path[1]]...``, or ``None`` when any step is missing or the wrong type."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or len(value) <= step:
                return None
        elif not isinstance(value, dict) or step not in value:
            return None
        value = value[step]
    return value


class OpenAIProvider(_HttpProvider):
    """OpenAI-compatible chat completions: ``POST {base}/chat/completions``.

    Sends ``Authorization: Bearer KEY`` only when a key is configured (local servers need none).
    The answer is ``choices[0].message.content``.
    """

    provider = "openai"
    path = "/chat/completions"

    def complete(self, system: str, user: str) -> str:
        """The model's text for ``user`` under ``system``; raises :class:`ProviderError`."""
        headers = {"authorization": f"Bearer {self._key}"} if self._key else {}
        answer = self._post(
            headers,
            {
                "model": self.model_name,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                "temperature": 0,
            },
        )
        text = _field(answer, "choices", 0, "message", "content")
        if not isinstance(text, str):
            if _field(answer, "choices", 0, "message") is not None:
                raise self._fail("the answer's choices[0].message has no text content")
            raise self._fail("the JSON answer has no choices[0].message.content")
        return text


class AnthropicProvider(_HttpProvider):
    """Anthropic messages: ``POST {base}/v1/messages`` with ``x-api-key`` (required).

    The answer is the concatenated ``text`` of the ``content`` blocks of type ``text``.
    """

    provider = "anthropic"
    path = "/v1/messages"
    key_needed = "pass one, or set CALLGATE_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY"

    def complete(self, system: str, user: str) -> str:
        """The model's text for ``user`` under ``system``; raises :class:`ProviderError`."""
        answer = self._post(
            {"x-api-key": self._key or "", "anthropic-version": ANTHROPIC_VERSION},
            {
                "model": self.model_name,
                "max_tokens": ANTHROPIC_MAX_TOKENS,
                "system": system,
                "messages": [{"role": "user", "content": user}],
                "temperature": 0,
            },
        )
        blocks = _field(answer, "content")
        if not isinstance(blocks, list):
            raise self._fail("the JSON answer has no content list")
        texts = [
            block["text"]
            for block in blocks
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ]
        if not texts:
            raise self._fail("the answer's content has no text block")
        return "".join(texts)


_PROVIDERS: dict[str, type[OpenAIProvider] | type[AnthropicProvider]] = {
    "openai": OpenAIProvider,
    "anthropic": AnthropicProvider,
}
_DEFAULT_BASES = {"openai": _OPENAI_DEFAULT_BASE, "anthropic": _ANTHROPIC_DEFAULT_BASE}

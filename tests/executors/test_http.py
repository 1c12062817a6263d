"""The HTTP executor against a real server on 127.0.0.1 (DNS only through injected resolvers)."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate import ExecutorError, TaintLabel, ToolResult
from callgate.executors import HttpExecutor
from callgate.testing import tool_call as make_call

from .conftest import LoopbackServer

LOOPBACK = frozenset({"127.0.0.1"})


class FakeDns:
    """A resolver hook: fixed answers per name, counting lookups; no real DNS ever."""

    def __init__(self, answers: dict[str, list[list[str]] | list[str]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        answer = self.answers.get(host)
        if answer is None:
            raise OSError(f"no such host {host}")
        if answer and isinstance(answer[0], list):
            rounds = answer
            return list(rounds[min(len(self.lookups), len(rounds)) - 1])
        return list(answer)  # type: ignore[arg-type]


def get(executor: HttpExecutor, url: str, action: str = "get", **params: object) -> ToolResult:
    return executor.execute(make_call("http", action, url=url, **params))


def test_loopback_is_denied_by_default_and_nothing_is_sent(fresh_server: LoopbackServer) -> None:
    result = get(HttpExecutor(), fresh_server.url("/echo"))
    assert result.status == "denied"
    assert result.error is not None and result.error.startswith("ssrf.private-address:")
    assert fresh_server.recorder.paths() == []


def test_an_explicitly_opened_address_is_reached_and_the_output_is_tainted_web(
    http_server: LoopbackServer,
) -> None:
    result = get(HttpExecutor(allowed_addresses=LOOPBACK), http_server.url("/echo"))
    assert result.status == "ok", result.error
    assert result.output["status"] == 200
    assert json.loads(result.output["body"])["method"] == "GET"
    assert result.taint == (TaintLabel(source="web", origin="127.0.0.1"),)


def test_a_name_is_resolved_once_and_the_connection_goes_to_the_checked_address(
    http_server: LoopbackServer,
) -> None:
    dns = FakeDns({"svc.test": ["127.0.0.1"]})
    executor = HttpExecutor(allowed_addresses=LOOPBACK, resolver=dns)
    result = get(executor, http_server.url("/echo", host="svc.test"))
    assert result.status == "ok", result.error
    seen = json.loads(result.output["body"])
    assert seen["headers"]["host"] == f"svc.test:{http_server.port}"
    assert dns.lookups == ["svc.test"]
    assert result.taint[0].origin == "svc.test"


def test_a_name_with_any_private_address_is_denied(fresh_server: LoopbackServer) -> None:
    dns = FakeDns({"mixed.test": ["127.0.0.1", "10.0.0.7"]})
    executor = HttpExecutor(allowed_addresses=LOOPBACK, resolver=dns)
    result = get(executor, fresh_server.url("/echo", host="mixed.test"))
    assert result.status == "denied"
    assert "10.0.0.7 (private)" in str(result.error)
    assert fresh_server.recorder.paths() == []


def test_a_rebinding_name_is_rechecked_on_every_redirect_hop(fresh_server: LoopbackServer) -> None:
    dns = FakeDns({"rebind.test": [["127.0.0.1"], ["169.254.169.254"]]})
    executor = HttpExecutor(allowed_addresses=LOOPBACK, resolver=dns)
    result = get(executor, fresh_server.url("/chain?n=1", host="rebind.test"))
    assert result.status == "denied"
    assert "169.254.169.254 (link-local)" in str(result.error)
    assert fresh_server.recorder.paths() == ["/chain?n=1"]


@st.composite
def loopback_spellings(draw: st.DrawFn) -> str:
    """A loopback or metadata address written as IPv4 in some base/short form, or as IPv6."""
    net = draw(st.sampled_from(["127.0.0.0/8", "169.254.169.254/32", "10.0.0.0/8", "0.0.0.0/8"]))
    network = ipaddress.IPv4Network(net)
    address = network[draw(st.integers(0, network.num_addresses - 1))]
    n = int(address)
    forms = [
        str(n),
        hex(n),
        "0" + format(n, "o"),
        f"{n >> 24}.{n & 0xFFFFFF}",
        f"0x{n >> 24:x}.{(n >> 16) & 0xFF}.{n & 0xFFFF}",
        ".".join(f"0{b:o}" for b in address.packed),
        f"[::ffff:{address}]",
        f"[{ipaddress.IPv6Address((0x64FF9B << 96) | n)}]",
        f"[{ipaddress.IPv6Address((0x2002 << 112) | (n << 80))}]",
        f"{address}.",
    ]
    return draw(st.sampled_from(forms))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(host=loopback_spellings(), path=st.text("abc/?=&%.", max_size=12))
def test_every_spelling_of_an_internal_address_is_denied_before_any_traffic(
    fresh_server: LoopbackServer, host: str, path: str
) -> None:
    dns = FakeDns({})
    result = get(HttpExecutor(resolver=dns), f"http://{host}:{fresh_server.port}/{path}")
    assert result.status == "denied", (host, result.error)
    assert str(result.error).startswith(("ssrf.private-address", "ssrf.invalid-url"))
    assert dns.lookups == []
    assert fresh_server.recorder.paths() == []


@pytest.mark.parametrize(
    "url",
    ["http://ex%41mple.com/", "http://1.2.3.4.5/", "http://0x7f.1.2.3.4/", "http://a_b..c/",
     "http://999.1.1.1/"],
)
def test_hosts_that_are_neither_names_nor_addresses_are_denied_without_a_lookup(url: str) -> None:
    dns = FakeDns({})
    result = get(HttpExecutor(resolver=dns), url)
    assert result.status == "denied"
    assert str(result.error).startswith(("ssrf.invalid-host", "ssrf.invalid-url"))
    assert dns.lookups == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/", "gopher://127.0.0.1:25/", "dict://x/"]
)
def test_schemes_outside_the_allow_list_are_denied(url: str) -> None:
    result = get(HttpExecutor(resolver=FakeDns({})), url)
    assert result.status == "denied"
    assert str(result.error).startswith(("ssrf.scheme", "ssrf.invalid-url"))


def test_a_narrower_scheme_list_refuses_plain_http(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_schemes=("https",), allowed_addresses=LOOPBACK)
    result = get(executor, http_server.url("/echo"))
    assert result.status == "denied"
    assert str(result.error).startswith("ssrf.scheme")


def test_schemes_httpx_cannot_confine_are_rejected_at_construction() -> None:
    with pytest.raises(ExecutorError, match="allowed_schemes"):
        HttpExecutor(allowed_schemes=("https", "file"))


def test_credentials_in_the_url_are_denied(http_server: LoopbackServer) -> None:
    url = f"http://api.example.com@127.0.0.1:{http_server.port}/echo"
    result = get(HttpExecutor(allowed_addresses=LOOPBACK), url)
    assert result.status == "denied"
    assert str(result.error).startswith("ssrf.userinfo")


def test_same_host_redirects_are_followed_and_listed(http_server: LoopbackServer) -> None:
    result = get(HttpExecutor(allowed_addresses=LOOPBACK), http_server.url("/chain?n=3"))
    assert result.status == "ok", result.error
    assert result.output["body"] == "end of chain"
    assert len(result.output["redirects"]) == 3


def test_redirects_beyond_the_limit_are_denied(fresh_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, max_redirects=2)
    result = get(executor, fresh_server.url("/chain?n=5"))
    assert result.status == "denied"
    assert str(result.error).startswith("ssrf.redirect-limit")
    assert len(fresh_server.recorder.paths()) == 3


def test_a_redirect_to_another_host_is_denied_by_default(fresh_server: LoopbackServer) -> None:
    dns = FakeDns({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]})
    executor = HttpExecutor(allowed_addresses=LOOPBACK, resolver=dns)
    target = fresh_server.url("/echo", host="b.test")
    result = get(executor, fresh_server.url(f"/redirect?to={target}", host="a.test"))
    assert result.status == "denied"
    assert str(result.error).startswith("ssrf.redirect-cross-host")
    assert len(fresh_server.recorder.paths()) == 1


def test_a_cross_host_redirect_to_a_private_address_is_denied_when_enabled(
    fresh_server: LoopbackServer,
) -> None:
    dns = FakeDns({"a.test": ["127.0.0.1"]})
    executor = HttpExecutor(allowed_addresses=LOOPBACK, resolver=dns, cross_host_redirects=True)
    target = "http://169.254.169.254/latest/meta-data/"
    result = get(executor, fresh_server.url(f"/redirect?to={target}", host="a.test"))
    assert result.status == "denied"
    assert str(result.error).startswith("ssrf.private-address")


def test_a_cross_host_redirect_drops_credentials(http_server: LoopbackServer) -> None:
    dns = FakeDns({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]})
    executor = HttpExecutor(allowed_addresses=LOOPBACK, resolver=dns, cross_host_redirects=True)
    target = http_server.url("/echo", host="b.test")
    result = get(
        executor,
        http_server.url(f"/redirect?to={target}", host="a.test"),
        headers={"Authorization": "Bearer secret", "X-Trace": "1"},
    )
    assert result.status == "ok", result.error
    seen = json.loads(result.output["body"])["headers"]
    assert "authorization" not in seen
    assert seen["x-trace"] == "1"
    assert {label.origin for label in result.taint} == {"a.test", "b.test"}


def test_a_303_after_post_becomes_a_get_without_body(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK)
    url = http_server.url("/redirect?code=303&to=/echo")
    result = get(executor, url, action="post", json={"a": 1})
    assert result.status == "ok", result.error
    seen = json.loads(result.output["body"])
    assert (seen["method"], seen["body"]) == ("GET", "")


def test_a_json_body_is_sent_with_its_content_type(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK)
    result = get(executor, http_server.url("/echo"), action="put", json={"k": [1, 2]},
                 params={"q": "x y"})
    seen = json.loads(result.output["body"])
    assert seen["method"] == "PUT"
    assert json.loads(seen["body"]) == {"k": [1, 2]}
    assert seen["headers"]["content-type"] == "application/json"
    assert seen["path"] == "/echo?q=x+y"


def test_a_declared_oversized_response_is_denied(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, max_response_bytes=1000)
    result = get(executor, http_server.url("/big?n=5000"))
    assert result.status == "denied"
    assert str(result.error).startswith("http.response-too-large")


def test_an_undeclared_oversized_response_is_cut_off(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, max_response_bytes=1000)
    result = get(executor, http_server.url("/big?n=200000&undeclared=1"))
    assert result.status == "denied"
    assert str(result.error).startswith("http.response-too-large")


def test_a_response_at_the_cap_is_returned_whole(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, max_response_bytes=1000)
    result = get(executor, http_server.url("/big?n=1000&undeclared=1"))
    assert result.status == "ok", result.error
    assert result.output["body"] == "x" * 1000


def test_a_compressed_body_is_inflated(http_server: LoopbackServer) -> None:
    result = get(HttpExecutor(allowed_addresses=LOOPBACK), http_server.url("/gzip"))
    assert result.output["body"] == "small and compressed"


def test_a_decompression_bomb_is_stopped_at_the_cap(http_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, max_response_bytes=2**20)
    result = get(executor, http_server.url("/gzip?bomb=1"))
    assert result.status == "denied"
    assert str(result.error).startswith("http.response-too-large")


def test_an_oversized_request_is_denied_before_sending(fresh_server: LoopbackServer) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, max_request_bytes=1024)
    result = get(executor, fresh_server.url("/echo"), action="post", body="y" * 2048)
    assert result.status == "denied"
    assert str(result.error).startswith("http.request-too-large")
    assert fresh_server.recorder.paths() == []


def test_a_slow_drip_response_is_stopped_by_the_overall_deadline(
    http_server: LoopbackServer,
) -> None:
    executor = HttpExecutor(allowed_addresses=LOOPBACK, timeout_s=0.8)
    started = time.monotonic()
    result = get(executor, http_server.url("/slow"))
    assert result.status == "error"
    assert str(result.error).startswith("http.timeout")
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Host": "internal.admin"}, "http.reserved-header"),
        ({"Transfer-Encoding": "chunked"}, "http.reserved-header"),
        ({"X-A": "1\r\nX-Injected: 1"}, "http.header-injection"),
    ],
)
def test_headers_that_would_undo_a_check_are_denied(
    fresh_server: LoopbackServer, headers: dict[str, str], reason: str
) -> None:
    result = get(HttpExecutor(allowed_addresses=LOOPBACK), fresh_server.url("/echo"),
                 headers=headers)
    assert result.status == "denied"
    assert str(result.error).startswith(reason)
    assert fresh_server.recorder.paths() == []


def test_proxy_settings_from_the_environment_are_ignored(
    http_server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    result = get(HttpExecutor(allowed_addresses=LOOPBACK), http_server.url("/echo"))
    assert result.status == "ok", result.error


def test_an_unknown_name_is_an_error_not_a_crash() -> None:
    result = get(HttpExecutor(resolver=FakeDns({})), "http://nowhere.test/")
    assert result.status == "error"
    assert str(result.error).startswith("http.resolve")


def test_a_call_of_another_tool_class_is_refused() -> None:
    result = HttpExecutor().execute(make_call("file", "get", url="http://x.test/"))
    assert result.status == "denied"
    assert str(result.error).startswith("executor.tool-class")


def test_ipv6_loopback_is_denied_by_default_and_reachable_when_opened() -> None:
    class V6Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6
        daemon_threads = True

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"v6")

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    try:
        server = V6Server(("::1", 0), Hello)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback on this machine: {exc}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        url = f"http://[::1]:{server.server_address[1]}/"
        refused = get(HttpExecutor(), url)
        assert str(refused.error).startswith("ssrf.private-address: ::1 is ::1 (loopback)")
        opened = get(HttpExecutor(allowed_addresses=frozenset({"::1"})), url)
        assert opened.output["body"] == "v6"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

"""Host extraction and allow-list matching against the tricks used to smuggle a host past them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.matchers._hosts import (
    _parse,
    _parse_whole,
    _unsafe_char,
    check_host,
    host_matches,
    host_of,
)

ALLOWED = ["api.github.com", "*.example.org"]


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://api.github.com/repos", "api.github.com"),
        ("HTTPS://API.GitHub.com./x", "api.github.com"),
        ("http://api.github.com@evil.com/", "evil.com"),
        ("http://user:pw@api.github.com:8443/x", "api.github.com"),
        ("http://a@b@evil.com/", "evil.com"),
        ("http://evil.com#@api.github.com/", "evil.com"),
        ("http://evil.com?@api.github.com/", "evil.com"),
        ("http://bücher.de/", "xn--bcher-kva.de"),
        ("http://аpi.github.com/", "xn--pi-6kc.github.com"),
        ("http://127.0.0.1:8080/", "127.0.0.1"),
        ("http://[::1]:80/", "[::1]"),
        ("http://[0:0:0:0:0:0:0:1]/", "[::1]"),
    ],
)
def test_host_of_returns_the_host_a_client_would_connect_to(url: str, host: str) -> None:
    assert host_of(url) == host


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.com\\@api.github.com/",
        "http://api.github.com\\.evil.com/",
        "http://api.github .com/",
        "http://api.github.com\t/",
        " http://api.github.com/",
        "http://api.github.com\n.evil.com/",
        "http://api.github.com\x00.evil.com/",
        "http://%65vil.com/",
        "http://0x7f.1/",
        "http://2130706433/",
        "http://1.2.3.4.5/",
        "http://x.com:99999/",
        "http://x.com:abc/",
        "http://[fe80::1%25eth0]/",
        "http://exa_mple..com/",
        "http://-bad.com/",
        "http://ex!ample.com/",
        "http:///path-only",
        "api.github.com/no-scheme",
        "http://" + "a" * 64 + ".com/",
        "",
    ],
)
def test_host_of_refuses_urls_parsers_read_differently(url: str) -> None:
    assert host_of(url) is None


@pytest.mark.parametrize(
    "host", ["ａpi.github.com", "faß.de", "a\u200db.com", "api\u200b.github.com", "σας.gr"]
)
def test_hosts_that_idna_would_rewrite_are_refused(host: str) -> None:
    # IDNA 2003 maps these (fullwidth a -> a, ß -> ss, joiners -> nothing); IDNA 2008 clients
    # keep or refuse them, so the host checked could differ from the host reached.
    assert host_of(f"http://{host}/") is None
    assert check_host(f"http://{host}/", None) is not None


def test_exact_patterns_match_only_the_same_host() -> None:
    assert host_matches("api.github.com", "api.github.com")
    assert host_matches("API.GITHUB.COM.", "api.github.com")
    assert not host_matches("api.github.com.evil.com", "api.github.com")
    assert not host_matches("evilapi.github.com", "api.github.com")
    assert not host_matches("github.com", "api.github.com")


def test_wildcard_patterns_match_one_or_more_labels_but_not_the_bare_suffix() -> None:
    assert host_matches("docs.example.org", "*.example.org")
    assert host_matches("a.b.example.org", "*.example.org")
    assert not host_matches("example.org", "*.example.org")
    assert not host_matches("evilexample.org", "*.example.org")
    assert not host_matches("evil.example.org.attacker.net", "*.example.org")


@pytest.mark.parametrize("pattern", ["*", "api.*.com", "*example.org", "https://api.github.com"])
def test_malformed_patterns_never_match(pattern: str) -> None:
    assert not host_matches("api.github.com", pattern)
    assert not host_matches("example.org", pattern)


def test_internationalised_patterns_match_their_ascii_form() -> None:
    assert host_matches("xn--bcher-kva.de", "bücher.de")
    assert host_matches("bücher.de", "*.de")


@pytest.mark.parametrize(
    "url",
    [
        "https://api.github.com/repos/x",
        "http://API.GitHub.com./",
        "https://api.github.com:443/",
        "https://docs.example.org/a",
        "https://a.b.example.org/",
    ],
)
def test_check_host_allows_listed_hosts(url: str) -> None:
    assert check_host(url, ALLOWED) is None


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://api.github.com.evil.com/", "api.github.com.evil.com"),
        ("https://evil.example.org.attacker.net/", "evil.example.org.attacker.net"),
        ("https://example.org/", "example.org"),
        ("http://api.github.com@evil.com/", "evil.com"),
        ("http://аpi.github.com/", "xn--pi-6kc.github.com"),
    ],
)
def test_check_host_denies_unlisted_hosts_naming_them(url: str, host: str) -> None:
    assert check_host(url, ALLOWED) == (
        f"host {host} is not in the allowed hosts (api.github.com, *.example.org)"
    )


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("ftp://api.github.com/x", "ftp"),
        ("file:///etc/passwd", "file"),
        ("gopher://api.github.com:70/_x", "gopher"),
        ("javascript:alert(1)", "javascript"),
        ("data:text/plain,hi", "data"),
        ("ws://api.github.com/", "ws"),
    ],
)
def test_check_host_denies_schemes_other_than_http_and_https(url: str, scheme: str) -> None:
    reason = check_host(url, ALLOWED)
    assert reason is not None
    assert reason.startswith(f"scheme '{scheme}' is not allowed (only http and https)")
    # The scheme rule holds even when hosts are unconstrained.
    assert check_host(url, None) == reason


def test_non_text_urls_are_denied_not_raised() -> None:
    assert check_host(None, ALLOWED) == "URL None is not text"  # type: ignore[arg-type]
    assert host_of(b"http://api.github.com/") is None  # type: ignore[arg-type]


def test_check_host_denies_backslash_tricks_with_a_reason() -> None:
    reason = check_host("http://evil.com\\@api.github.com/", ALLOWED)
    assert reason is not None and "'\\\\'" in reason


def test_unconstrained_hosts_allow_any_valid_host_and_empty_lists_allow_none() -> None:
    assert check_host("https://anything.test/", None) is None
    assert check_host("https://api.github.com/", []) == (
        "host api.github.com is not in the allowed hosts (none)"
    )
    assert check_host("http://0x7f.1/", None) is not None


_LABELS = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_TLDS = st.from_regex(r"[a-z]{2,6}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.lists(_LABELS, min_size=0, max_size=3),
    middle=st.lists(_LABELS, min_size=1, max_size=2),
    tld=_TLDS,
)
def test_a_wildcard_matches_exactly_the_names_strictly_below_its_suffix(
    prefix: list[str], middle: list[str], tld: str
) -> None:
    suffix = ".".join([*middle, tld])
    host = ".".join([*prefix, suffix])
    pattern = "*." + suffix
    assert host_matches(host, pattern) == bool(prefix)
    assert host_matches(host.upper() + ".", pattern) == bool(prefix)
    # Appending a foreign suffix or gluing a letter onto the suffix never matches.
    assert not host_matches(host + ".evil.x0", pattern)
    assert not host_matches("x" + suffix, pattern)


_SCHEMES = st.sampled_from(["http", "HTTPS", "ftp", "h1+x.y-z", "1http", "", "a b"])
_JOINS = st.sampled_from(["://", "://", ":", "//", ":///", ""])
_URL_PARTS = st.sampled_from([
    "/", "?", "#", "@", "[", "]", ":", "::1", "%2e", "\\", " ", "\t", "a", "api.github.com",
    "EVIL.com.", "bücher.de", "０", "ß", "user:pw@", ":8443", ":99999", ":x", "127.0.0.1",
    "0x7f", "[::1]", "[v1.x]", ".",
])


@settings(max_examples=800, deadline=None)
@given(_SCHEMES, _JOINS, st.lists(_URL_PARTS, max_size=8).map("".join))
def test_a_host_parsed_from_its_authority_alone_is_the_host_of_the_whole_url(
        scheme: str, join: str, rest: str) -> None:
    # The parse of ``scheme://authority`` is remembered for every URL below it: the answer
    # must be the one the whole URL gives, and a refusal keeps naming the whole URL.
    url = scheme + join + rest
    if _unsafe_char(url) is None:  # (refused before any parse)
        expected = _parse_whole(url)
        assert _parse(url) == expected
        assert _parse(url) == expected  # remembered

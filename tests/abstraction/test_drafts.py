"""The host an abstracted URL names (``_host_of``), held to ``urlsplit`` on the whole URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.abstraction._drafts import _host_of


def _whole(url: str) -> str | None:
    try:
        return urlsplit(url if "://" in url else f"//{url}").hostname
    except ValueError:
        return None


# Characters that move where urlsplit cuts a URL, or that it removes before cutting.
_PIECES = st.sampled_from(["http", "https", "HTTP", "x+y.z-", "://", ":", "/", "//", "?", "#",
                           "@", "[", "]", "::1", "%", "\t", "\n", "\r", " ", "\x00", "a", "B",
                           "evil.com", "Example.ORG", "8080", "user:pw", ".", "\u2100", "\uff0e",
                           "é"])


@settings(max_examples=3000)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_host_of_equals_urlsplit_of_the_whole_url(url: str) -> None:
    assert _host_of(url) == _whole(url)


@settings(max_examples=500)
@given(st.text(max_size=40))
def test_host_of_any_text_equals_urlsplit_of_the_whole_url(url: str) -> None:
    assert _host_of(url) == _whole(url)


def test_host_of_urls_below_one_authority_share_its_parse() -> None:
    assert _host_of("https://API.github.com:443/repos?page=1") == "api.github.com"
    assert _host_of("https://user@Evil.com\t/x") == "evil.com"
    assert _host_of("evil.com/path") == "evil.com"
    assert _host_of("http://[::1/x") is None  # an unclosed IPv6 literal: no host
    assert _host_of(["not", "text"]) is None

"""Host matching for network constraints: the host a URL really reaches, and allow-list patterns.

``host_of`` reduces a URL to the host a client would connect to: userinfo and port removed
(``http://api.github.com@evil.com/`` reaches ``evil.com``), lowercased, trailing dot stripped,
internationalised names in their ASCII (``xn--``) form, so a Cyrillic lookalike of
``api.github.com`` stays distinct from it; names that IDNA would rewrite rather than encode
(``faß.de``, fullwidth letters, zero-width joiners) are refused, since IDNA 2003 and 2008 clients
rewrite them differently. Anything a parser could read two ways (backslashes,
whitespace, control characters, percent-encoded or numeric-shorthand hosts) yields ``None``, and
callers deny.

Patterns are exact hosts or ``*.suffix``; ``*.example.org`` matches one or more labels below
``example.org`` but not ``example.org`` itself (list it too to allow it).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import urlsplit

from callgate._identifiers import URL_AUTHORITY

#: Schemes ``check_host`` lets through; everything else (file, gopher, ftp, data…) is denied.
ALLOWED_SCHEMES: frozenset[str] = frozenset({"http", "https"})

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_MAX_HOST = 253
_SHOW = 120


def _show(url: str) -> str:
    return repr(url if len(url) <= _SHOW else url[:_SHOW] + "…")


_UNSAFE = re.compile(r"[\\\s\x00-\x1f\x7f]")


def _unsafe_char(url: str) -> str | None:
    """The first character that parsers disagree about, or ``None``."""
    found = _UNSAFE.search(url)
    return None if found is None else found.group()


def _normalize_ip(host: str) -> str | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return f"[{address}]" if address.version == 6 else str(address)


def _to_ascii(host: str) -> str | None:
    """The ``xn--`` form of a name, or ``None`` when IDNA would rewrite it rather than encode it.

    The standard library's IDNA 2003 maps some characters to others (``ß`` to ``ss``, fullwidth
    letters to ASCII, zero-width joiners to nothing) where IDNA 2008 clients, httpx among them,
    keep or refuse them: the host checked and the host reached could differ, so any name that does
    not survive the round trip unchanged is refused.
    """
    if host.isascii():
        return host
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
        back = ascii_host.encode("ascii").decode("idna")
    except UnicodeError:
        return None
    return ascii_host if back == unicodedata.normalize("NFC", host) else None


@functools.lru_cache(maxsize=4096)
def normalize_host(host: str) -> str | None:
    """A host name in canonical form (lowercase, ASCII, no trailing dot), or ``None`` if invalid.

    IP literals come back in their standard text form. Dotted names whose last label is numeric
    but that are not a plain dotted quad (``0x7f.1``, ``2130706433``) are refused, because
    resolvers read them as IPv4 addresses in ways that differ from one library to the next.
    """
    if ":" in host:  # only an IPv6 literal may hold a colon here (zone ids are refused)
        return _normalize_ip(host.strip("[]")) if "%" not in host else None
    if not host or "%" in host or _unsafe_char(host):
        return None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    ascii_host = _to_ascii(host)
    if ascii_host is None:
        return None
    labels = ascii_host.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        return _normalize_ip(ascii_host) if len(labels) == 4 else None
    if len(ascii_host) > _MAX_HOST or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return ascii_host


def _parse(url: object) -> tuple[str, str] | str:
    """``(scheme, host)`` of a URL, or the reason there is no trustworthy host."""
    if not isinstance(url, str):  # callers pass agent input: fail closed on anything else
        return f"URL {url!r} is not text"
    bad = _unsafe_char(url)
    if bad is not None:
        return f"URL {_show(url)} contains {bad!r}, which parsers read differently"
    # The scheme and host follow from ``scheme://authority`` alone: a host's parse is made once
    # for all the URLs below it. A failure is parsed again whole, so its message shows the URL.
    found = URL_AUTHORITY.match(url)
    if found is not None:
        parsed = _parse_authority(found.group())
        if not isinstance(parsed, str):
            return parsed
    return _parse_whole(url)


def _parse_whole(url: str) -> tuple[str, str] | str:
    """``_parse`` of a URL with no unsafe character, from the whole URL."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port validates it (non-numeric, out of range)
    except ValueError as exc:
        return f"URL {_show(url)} is malformed: {exc}"
    if not parts.scheme or not parts.netloc:
        return f"URL {_show(url)} has no scheme://host"
    hostname = parts.hostname
    host = normalize_host(hostname) if hostname else None
    if host is None:
        return f"URL {_show(url)} has no valid host"
    return parts.scheme.lower(), host


_parse_authority = functools.lru_cache(maxsize=4096)(_parse_whole)


def host_of(url: object) -> str | None:
    """The host ``url`` reaches, in canonical form, or ``None`` when it has no trustworthy host."""
    parsed = _parse(url)
    return parsed[1] if isinstance(parsed, tuple) else None


@functools.lru_cache(maxsize=4096)
def _compile_pattern(pattern: str) -> tuple[bool, str] | None:
    """``(wildcard, host)`` for an allow-list pattern, or ``None`` if it can never match."""
    wildcard = pattern.startswith("*.")
    host = normalize_host(pattern[2:] if wildcard else pattern)
    if host is None:
        return None
    return wildcard, host


def host_matches(host: str, pattern: str) -> bool:
    """Whether ``host`` is ``pattern`` or, for ``*.suffix``, a name one or more labels below it.

    Both sides are normalised first; an invalid host or pattern (a ``*`` anywhere but a leading
    ``*.``, a port, a scheme) never matches.
    """
    compiled = _compile_pattern(pattern)
    normal = normalize_host(host)
    if compiled is None or normal is None:
        return False
    wildcard, suffix = compiled
    if not wildcard:
        return normal == suffix
    return normal.endswith("." + suffix)


def check_host(url: object, allowed: Sequence[str] | None) -> str | None:
    """``None`` when ``url`` may be fetched, else the reason it may not.

    The scheme must be http or https and the URL must have a trustworthy host, whatever
    ``allowed`` says: an http tool handed ``file:`` or ``gopher:`` is the classic way out.
    ``allowed=None`` leaves hosts unchecked; an empty list allows no host.
    """
    if not isinstance(url, str):  # agent input: fail closed on anything else
        return f"URL {url!r} is not text"
    parsed = _parse(url)
    if isinstance(parsed, str):
        # A URL with no host may still have a scheme, and the scheme is the better reason.
        found = _SCHEME.match(url)
        if found and found.group(1).lower() not in ALLOWED_SCHEMES:
            scheme = found.group(1).lower()
            return f"scheme {scheme!r} is not allowed (only http and https): {_show(url)}"
        return parsed
    scheme, host = parsed
    if scheme not in ALLOWED_SCHEMES:
        return f"scheme {scheme!r} is not allowed (only http and https): {_show(url)}"
    if allowed is None or any(host_matches(host, pattern) for pattern in allowed):
        return None
    listed = ", ".join(allowed) if allowed else "none"
    return f"host {host} is not in the allowed hosts ({listed})"

"""Which network addresses an outbound request may reach: the SSRF table.

An address is *public* only when it is in no special-purpose range. IPv6 forms that carry an
IPv4 address (mapped, compatible, translated, NAT64, 6to4) are judged by the IPv4 address they
carry, because that is where the packets end up. Teredo is refused outright: its client address
is obfuscated and its relay is an arbitrary host. Anything outside global unicast ``2000::/3``
is refused, so a range missing from the table fails closed instead of open.

Host spellings are also handled here: ``inet_aton`` (and so most resolvers) accept decimal
(``2130706433``), octal (``0177.0.0.1``), hexadecimal (``0x7f.1``) and short (``127.1``) IPv4
forms; :func:`parse_ipv4_spelling` turns each into the dotted quad it really means.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

#: IPv4 special-purpose ranges (IANA registry, RFC 6890 and successors) with the reason named.
IPV4_TABLE: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "this-network"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "cgnat"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "ietf-protocol"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.31.196.0/24"), "as112"),
    (_V4("192.52.193.0/24"), "amt"),
    (_V4("192.88.99.0/24"), "6to4-relay"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("192.175.48.0/24"), "as112"),
    (_V4("198.18.0.0/15"), "benchmark"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),
)

#: IPv6 special-purpose ranges that do not embed an IPv4 address.
IPV6_TABLE: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("64:ff9b:1::/48"), "nat64-local"),
    (_V6("100::/64"), "discard"),
    (_V6("2001::/32"), "teredo"),
    (_V6("2001::/23"), "ietf-protocol"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("5f00::/16"), "srv6-sid"),
    (_V6("fc00::/7"), "unique-local"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local"),
    (_V6("ff00::/8"), "multicast"),
)

_GLOBAL_UNICAST = _V6("2000::/3")
_MAPPED = _V6("::ffff:0:0/96")
_TRANSLATED = _V6("::ffff:0:0:0/96")
_COMPATIBLE = _V6("::/96")
_NAT64 = _V6("64:ff9b::/96")
_SIXTOFOUR = _V6("2002::/16")

_IPV4_PART = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")


def parse_ipv4_spelling(host: str) -> str | None:
    """The dotted quad an ``inet_aton`` spelling of IPv4 means, or ``None`` if it is not one.

    Accepts one to four parts, each decimal, octal (leading ``0``) or hex (``0x``); the last
    part fills the remaining bytes (``127.1`` is ``127.0.0.1``, ``2130706433`` likewise). A
    single trailing dot is ignored, as resolvers ignore it.
    """
    text = host[:-1] if host.endswith(".") else host
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.match(p) for p in parts):
        return None
    values = [_part_value(p) for p in parts]
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return str(ipaddress.IPv4Address(number))


def _part_value(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:], 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part[1:], 8)
    return int(part)


def parse_ip(text: str) -> IPAddress | None:
    """An IP address from a literal (any IPv4 spelling, IPv6 with or without brackets/zone)."""
    candidate = text.strip()
    if candidate.startswith("[") and candidate.endswith("]"):
        candidate = candidate[1:-1]
    dotted = parse_ipv4_spelling(candidate)
    if dotted is not None:
        return ipaddress.IPv4Address(dotted)
    try:
        return ipaddress.IPv6Address(candidate)
    except ValueError:
        return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, translated, compatible, NAT64, 6to4)."""
    plain = ipaddress.IPv6Address(int(address))  # drop any zone id before range checks
    low32 = ipaddress.IPv4Address(int(plain) & 0xFFFFFFFF)
    if plain in _MAPPED or plain in _TRANSLATED or plain in _NAT64:
        return low32
    if plain in _COMPATIBLE and int(plain) > 1:
        return low32
    if plain in _SIXTOFOUR:
        return ipaddress.IPv4Address((int(plain) >> 80) & 0xFFFFFFFF)
    return None


def check_address(ip: str) -> str | None:
    """Why ``ip`` is not a public address (e.g. ``"loopback"``), or ``None`` when it is public.

    Text that is not an IP address at all is refused (``"not-an-address"``): callers check
    resolved addresses, and anything unexpected must fail closed.
    """
    address = parse_ip(ip)
    if address is None:
        return "not-an-address"
    return _check(address)


def _check(address: IPAddress) -> str | None:
    if isinstance(address, ipaddress.IPv4Address):
        for network, reason in IPV4_TABLE:
            if address in network:
                return reason
        return None if address.is_global else "reserved"
    inner = embedded_ipv4(address)
    if inner is not None:
        inner_reason = _check(inner)
        return None if inner_reason is None else f"embedded-ipv4-{inner_reason}"
    plain = ipaddress.IPv6Address(int(address))
    for network6, reason in IPV6_TABLE:
        if plain in network6:
            return reason
    if plain not in _GLOBAL_UNICAST:
        return "reserved"
    return None


def parse_allowed(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Addresses or CIDR networks an operator explicitly opened (e.g. ``127.0.0.1`` in tests)."""
    networks: list[IPNetwork] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        except ValueError:
            address = parse_ip(entry)
            if address is None:
                raise ValueError(f"not an IP address or network: {entry!r}") from None
            networks.append(ipaddress.ip_network(address))
    return tuple(networks)


def is_opened(ip: str, allowed: tuple[IPNetwork, ...]) -> bool:
    """Whether ``ip`` lies in one of the explicitly opened networks (same family only)."""
    address = parse_ip(ip)
    if address is None:
        return False
    plain: IPAddress = address
    if isinstance(address, ipaddress.IPv6Address):
        plain = ipaddress.IPv6Address(int(address))
    return any(plain.version == net.version and plain in net for net in allowed)

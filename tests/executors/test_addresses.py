"""The SSRF address table and IPv4 spellings."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.executors import check_address, parse_ipv4_spelling
from callgate.executors._addresses import embedded_ipv4, is_opened, parse_allowed

NON_PUBLIC_V4 = [
    ("0.0.0.0", "this-network"),
    ("0.1.2.3", "this-network"),
    ("10.1.2.3", "private"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.254", "cgnat"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.169.254", "link-local"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.0.0.8", "ietf-protocol"),
    ("192.0.2.1", "documentation"),
    ("192.88.99.1", "6to4-relay"),
    ("192.168.1.1", "private"),
    ("198.18.0.1", "benchmark"),
    ("198.19.255.255", "benchmark"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
]
NON_PUBLIC_V6 = [
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "embedded-ipv4-loopback"),
    ("::ffff:7f00:1", "embedded-ipv4-loopback"),
    ("::ffff:10.0.0.1", "embedded-ipv4-private"),
    ("::ffff:0:169.254.169.254", "embedded-ipv4-link-local"),
    ("::127.0.0.1", "embedded-ipv4-loopback"),
    ("::10.0.0.1", "embedded-ipv4-private"),
    ("64:ff9b::127.0.0.1", "embedded-ipv4-loopback"),
    ("64:ff9b::a9fe:a9fe", "embedded-ipv4-link-local"),
    ("2002:7f00:1::", "embedded-ipv4-loopback"),
    ("2002:c0a8:101::1", "embedded-ipv4-private"),
    ("64:ff9b:1::1", "nat64-local"),
    ("100::1", "discard"),
    ("2001::1", "teredo"),
    ("2001:db8::1", "documentation"),
    ("fc00::1", "unique-local"),
    ("fd12:3456::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("4000::1", "reserved"),
    ("::2:3:4:5:6", "reserved"),
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8",
          "64:ff9b::808:808", "2002:808:808::1", "100.128.0.1", "172.32.0.1", "198.20.0.1"]


@pytest.mark.parametrize(("ip", "reason"), NON_PUBLIC_V4 + NON_PUBLIC_V6)
def test_non_public_addresses_are_refused_with_their_range_named(ip: str, reason: str) -> None:
    assert check_address(ip) == reason


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses_pass(ip: str) -> None:
    assert check_address(ip) is None


@pytest.mark.parametrize("text", ["", "localhost", "example.com", "1.2.3.4.5", "::g", "[::1"])
def test_text_that_is_not_an_address_is_refused(text: str) -> None:
    assert check_address(text) == "not-an-address"


@pytest.mark.parametrize(
    ("spelling", "dotted"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7F.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("10.0x10203", "10.1.2.3"),
        ("0", "0.0.0.0"),
        ("169.254.169.254.", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
    ],
)
def test_alternative_ipv4_spellings_resolve_to_the_address_they_mean(
    spelling: str, dotted: str
) -> None:
    assert parse_ipv4_spelling(spelling) == dotted


@pytest.mark.parametrize(
    "text", ["", "08", "0x", "1.2.3.4.5", "256.1.1.1", "1.2.65536", "4294967296", "a.b.c.d",
             "1..2", "example.com", " 1.2.3.4", "1.2.3.4 x"],
)
def test_text_that_is_not_an_ipv4_spelling_is_not_parsed(text: str) -> None:
    assert parse_ipv4_spelling(text) is None


def _spell(part: int, style: int) -> str:
    return [str(part), f"0{part:o}", f"0x{part:x}", f"0X{part:X}"][style]


@st.composite
def ipv4_spellings(draw: st.DrawFn) -> tuple[int, str]:
    """An IPv4 number and one of its inet_aton spellings (1-4 parts, mixed bases)."""
    number = draw(st.integers(0, 2**32 - 1))
    parts = draw(st.integers(1, 4))
    octets = number.to_bytes(4, "big")
    head = list(octets[: parts - 1])
    tail = int.from_bytes(octets[parts - 1 :], "big")
    styles = draw(st.lists(st.integers(0, 3), min_size=parts, max_size=parts))
    text = ".".join(_spell(v, s) for v, s in zip([*head, tail], styles, strict=True))
    return number, text


@settings(max_examples=300, deadline=None)
@given(ipv4_spellings())
def test_every_generated_spelling_means_the_same_address_as_for_the_c_library(
    case: tuple[int, str],
) -> None:
    number, text = case
    assert parse_ipv4_spelling(text) == str(ipaddress.IPv4Address(number))
    assert socket.inet_aton(text) == number.to_bytes(4, "big")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789xXabcdefABCDEF.", max_size=20))
def test_parser_agrees_with_the_c_library_on_arbitrary_numeric_text(text: str) -> None:
    try:
        expected: str | None = socket.inet_ntoa(socket.inet_aton(text))
    except OSError:
        expected = None
    if text.endswith(".") and expected is None:
        return  # resolvers drop one trailing dot; the parser deliberately does too
    assert parse_ipv4_spelling(text) == expected


NON_PUBLIC_V4_NETS = [
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
]


@st.composite
def private_ipv4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    net = ipaddress.IPv4Network(draw(st.sampled_from(NON_PUBLIC_V4_NETS)))
    offset = draw(st.integers(0, net.num_addresses - 1))
    return net[offset]


def _embeddings(v4: ipaddress.IPv4Address) -> list[str]:
    n = int(v4)
    return [
        str(ipaddress.IPv6Address((0xFFFF << 32) | n)),  # mapped
        str(ipaddress.IPv6Address((0xFFFF << 48) | n)),  # translated
        str(ipaddress.IPv6Address(n)),  # compatible (deprecated)
        str(ipaddress.IPv6Address((0x64FF9B << 96) | n)),  # NAT64
        str(ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1)),  # 6to4
        f"::ffff:{v4}",
    ]


@settings(max_examples=200, deadline=None)
@given(private_ipv4())
def test_private_ipv4_stays_refused_in_every_ipv6_embedding(v4: ipaddress.IPv4Address) -> None:
    assert check_address(str(v4)) is not None
    for form in _embeddings(v4):
        if int(v4) <= 1 and form == str(ipaddress.IPv6Address(int(v4))):
            continue  # ::, ::1 are judged as themselves (unspecified, loopback)
        assert check_address(form) is not None, form


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_an_ipv4_address_passes_only_if_python_also_deems_it_global(number: int) -> None:
    address = ipaddress.IPv4Address(number)
    if check_address(str(address)) is None:
        assert address.is_global


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**128 - 1))
def test_an_ipv6_address_passes_only_in_global_unicast_or_a_public_embedding(number: int) -> None:
    address = ipaddress.IPv6Address(number)
    if check_address(str(address)) is None:
        inner = embedded_ipv4(address)
        assert address in ipaddress.IPv6Network("2000::/3") or (
            inner is not None and inner.is_global
        )


def test_opened_addresses_accept_single_addresses_and_networks_of_the_same_family() -> None:
    opened = parse_allowed(["127.0.0.1", "10.0.0.0/8", "[::1]"])
    assert is_opened("127.0.0.1", opened)
    assert is_opened("10.9.8.7", opened)
    assert is_opened("::1", opened)
    assert not is_opened("127.0.0.2", opened)
    assert not is_opened("::ffff:127.0.0.1", opened)
    assert not is_opened("not-an-ip", opened)


def test_an_opened_entry_that_is_not_an_address_is_rejected() -> None:
    with pytest.raises(ValueError, match="not an IP"):
        parse_allowed(["localhost"])

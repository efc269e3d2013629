"""The SSRF guard: a hand-written table, then a differential check against a
slow reference built from first/last addresses typed out by hand."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from service.net.guard import is_public, parse_ip

REFUSED = [
    # IPv4
    "0.0.0.0", "0.255.255.255", "10.0.0.1", "10.255.255.255", "100.64.0.1",
    "100.127.255.255", "127.0.0.1", "127.255.255.254", "169.254.169.254",
    "169.254.170.2", "172.16.0.1", "172.31.255.255", "192.0.0.170", "192.0.2.1",
    "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.255",
    "198.51.100.1", "203.0.113.1", "224.0.0.1", "239.255.255.250", "240.0.0.1",
    "255.255.255.255",
    # IPv6 outside 2000::/3
    "::", "::1", "::127.0.0.1", "::8.8.8.8", "::ffff:0:8.8.8.8", "64:ff9b::7f00:1",
    "64:ff9b::808:808", "64:ff9b:1::a00:1", "100::1", "fc00::1", "fd00:ec2::254",
    "fe80::1", "febf::1", "fec0::1", "ff02::1", "ff0e::1",
    # IPv4-mapped with a refused IPv4 inside
    "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
    "::ffff:0.0.0.0",
    # special ranges inside 2000::/3
    "2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:2::1", "2001:10::1",
    "2001:20::1", "2001:db8::1", "2001:db8:ffff::1", "2002:7f00:1::1",
    "2002:a9fe:a9fe::1", "2002:808:808::1", "3fff::1",
]

ALLOWED = [
    "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255",
    "100.128.0.0", "126.255.255.255", "128.0.0.0", "169.253.255.255",
    "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.0.1.255", "192.0.3.0",
    "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0",
    "203.0.112.255", "203.0.114.0", "223.255.255.255", "93.184.216.34",
    "2000::1", "2001:4860:4860::8888", "2606:4700:4700::1111", "2001:1::1",
    "2a00:1450::1", "3ffe::1", "::ffff:8.8.8.8", "::ffff:808:808",
]


@pytest.mark.parametrize("text", REFUSED)
def test_refused(text):
    assert is_public(ip_address(text)) is False


@pytest.mark.parametrize("text", ALLOWED)
def test_allowed(text):
    assert is_public(ip_address(text)) is True


def test_rejects_non_address():
    with pytest.raises(TypeError):
        is_public("8.8.8.8")  # type: ignore[arg-type]


def test_parse_ip_drops_scope():
    assert parse_ip("fe80::1%lo") == IPv6Address("fe80::1")
    assert parse_ip("8.8.8.8") == IPv4Address("8.8.8.8")


# --- reference implementation -------------------------------------------

def _n(text: str) -> int:
    return int(ip_address(text))


V4_DENIED_RANGES = [  # (first, last), inclusive
    ("0.0.0.0", "0.255.255.255"),
    ("10.0.0.0", "10.255.255.255"),
    ("100.64.0.0", "100.127.255.255"),
    ("127.0.0.0", "127.255.255.255"),
    ("169.254.0.0", "169.254.255.255"),
    ("172.16.0.0", "172.31.255.255"),
    ("192.0.0.0", "192.0.0.255"),
    ("192.0.2.0", "192.0.2.255"),
    ("192.88.99.0", "192.88.99.255"),
    ("192.168.0.0", "192.168.255.255"),
    ("198.18.0.0", "198.19.255.255"),
    ("198.51.100.0", "198.51.100.255"),
    ("203.0.113.0", "203.0.113.255"),
    ("224.0.0.0", "255.255.255.255"),  # multicast, reserved, broadcast
]

V6_PUBLIC_SPAN = ("2000::", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")

V6_DENIED_RANGES = [
    ("2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff"),
    ("2001:2::", "2001:2:0:ffff:ffff:ffff:ffff:ffff"),
    ("2001:10::", "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff"),
    ("2001:20::", "2001:2f:ffff:ffff:ffff:ffff:ffff:ffff"),
    ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"),
    ("2002::", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
    ("3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff"),
]


def _inside(value: int, ranges) -> bool:
    return any(_n(first) <= value <= _n(last) for first, last in ranges)


def reference_is_public(ip) -> bool:
    value = int(ip)
    if ip.version == 4:
        return not _inside(value, V4_DENIED_RANGES)
    if value >> 32 == 0xFFFF:  # ::ffff:a.b.c.d
        return reference_is_public(IPv4Address(value & 0xFFFFFFFF))
    if not _inside(value, [V6_PUBLIC_SPAN]):
        return False
    return not _inside(value, V6_DENIED_RANGES)


def _samples(rng: random.Random):
    """Random addresses, biased towards range edges and embedded forms."""
    edges4 = [_n(x) for pair in V4_DENIED_RANGES for x in pair]
    edges6 = [_n(x) for pair in V6_DENIED_RANGES + [V6_PUBLIC_SPAN] for x in pair]
    for _ in range(3000):
        yield IPv4Address(rng.getrandbits(32))
        yield IPv6Address(rng.getrandbits(128))
        yield IPv6Address((rng.choice([0x2000, 0x2001, 0x2002, 0x3fff]) << 112) | rng.getrandbits(112))
        yield IPv6Address(rng.getrandbits(3) << 125 | rng.getrandbits(100))
        edge = rng.choice(edges4) + rng.randint(-2, 2)
        if 0 <= edge < 2**32:
            yield IPv4Address(edge)
            yield IPv6Address(0xFFFF << 32 | edge)  # IPv4-mapped
            yield IPv6Address(edge)  # IPv4-compatible
            yield IPv6Address(_n("64:ff9b::") | edge)  # NAT64
            yield IPv6Address(_n("2002::") | edge << 80)  # 6to4
        edge6 = rng.choice(edges6) + rng.randint(-2, 2)
        if 0 <= edge6 < 2**128:
            yield IPv6Address(edge6)


def test_matches_reference_on_random_addresses():
    rng = random.Random(20261121)
    checked = 0
    seen = {True: 0, False: 0}
    for ip in _samples(rng):
        expected = reference_is_public(ip)
        assert is_public(ip) is expected, ip
        seen[expected] += 1
        checked += 1
    assert checked > 20000
    assert min(seen.values()) > 3000  # both verdicts well exercised


def test_reference_agrees_with_table():
    for text in REFUSED:
        assert reference_is_public(ip_address(text)) is False, text
    for text in ALLOWED:
        assert reference_is_public(ip_address(text)) is True, text

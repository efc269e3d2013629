"""Which IP addresses an outgoing webhook may connect to (the SSRF guard).

IPv4 uses a deny list. IPv6 uses an allow list: only global unicast
(2000::/3) can be public, minus the special ranges carved out of it, so an
IPv6 range we forgot about is refused rather than allowed.

Embedded IPv4: an IPv4-mapped address (::ffff:a.b.c.d) is judged by the IPv4
address inside it, because a dual-stack socket connects to exactly that.
Every other IPv6 form that carries an IPv4 address (IPv4-compatible ::/96,
SIIT ::ffff:0:0:0/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16,
Teredo 2001::/32) is refused outright: a real webhook receiver has no reason
to publish one, and where it leads depends on gateways we cannot see.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

_IPV4_DENIED = tuple(
    IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, includes broadcast 255.255.255.255
    )
)

_IPV6_GLOBAL_UNICAST = IPv6Network("2000::/3")

_IPV6_DENIED = tuple(
    IPv6Network(n)
    for n in (
        "2001::/32",  # Teredo (embeds IPv4)
        "2001:2::/48",  # benchmarking
        "2001:10::/28",  # ORCHID
        "2001:20::/28",  # ORCHIDv2
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4 (embeds IPv4)
        "3fff::/20",  # documentation (RFC 9637)
    )
)

_IPV4_MAPPED = IPv6Network("::ffff:0:0/96")


def is_public(ip: IPv4Address | IPv6Address) -> bool:
    """True when a webhook may connect to `ip` with the private switch off."""
    if isinstance(ip, IPv6Address):
        if ip in _IPV4_MAPPED:
            return is_public(IPv4Address(int(ip) & 0xFFFFFFFF))
        # Everything outside 2000::/3 is refused: ::, ::1, IPv4-compatible,
        # NAT64, discard 100::/64, ULA fc00::/7, link-local fe80::/10,
        # site-local fec0::/10, multicast ff00::/8.
        if ip not in _IPV6_GLOBAL_UNICAST:
            return False
        return not any(ip in net for net in _IPV6_DENIED)
    if isinstance(ip, IPv4Address):
        return not any(ip in net for net in _IPV4_DENIED)
    raise TypeError(f"expected an IPv4Address or IPv6Address, got {type(ip).__name__}")


def parse_ip(text: str) -> IPv4Address | IPv6Address:
    """Parse an address as getaddrinfo returns it (IPv6 may carry a %scope)."""
    return ipaddress.ip_address(text.split("%", 1)[0])

"""Turn a webhook URL string into the httpcore URL we will call, or refuse it.

httpx.URL does the parsing (IDNA, brackets, percent-encoding); this module
only adds what a webhook target must satisfy: absolute http(s), a host that
is a plain DNS name or IP literal, and a real port.
"""

from __future__ import annotations

import ipaddress
import re

import httpcore
import httpx

# After IDNA encoding a DNS name is ASCII letters, digits, hyphens,
# underscores and dots. Anything else (percent-escapes, spaces) is refused
# here rather than handed to the resolver.
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$")


def parse_url(url: str) -> httpcore.URL | None:
    """The URL to call, or None when it is not an absolute http(s) URL with a host."""
    if not isinstance(url, str):
        return None
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.is_absolute_url:
        return None
    host = parsed.raw_host.decode("ascii", "replace")
    if not host or not _host_ok(host):
        return None
    port = parsed.port
    if port is not None and not 0 < port < 65536:
        return None
    return httpcore.URL(
        scheme=parsed.raw_scheme,
        host=parsed.raw_host,
        port=port,
        target=parsed.raw_path,
    )


def _host_ok(host: str) -> bool:
    if ":" in host:  # IPv6 literal, brackets already removed
        if "%" in host:  # a zone id names a local interface: never a webhook target
            return False
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    return _NAME.match(host.lower()) is not None

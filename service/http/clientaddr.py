"""The client's address: the peer's, or, when the peer is a trusted proxy
(`GENSERVICE_TRUSTED_PROXIES`, addresses or networks), the nearest address in
`X-Forwarded-For` that is not itself a trusted proxy. A header from anyone else is ignored:
a client could write any address there."""

from __future__ import annotations

from functools import lru_cache
from ipaddress import ip_address, ip_network

from quart import request


@lru_cache(maxsize=8)
def _networks(setting: str | None) -> tuple:
    if not setting:
        return ()
    return tuple(ip_network(part.strip(), strict=False) for part in setting.split(",") if part.strip())


def _trusted(address: str, networks: tuple) -> bool:
    try:
        ip = ip_address(address.strip().strip("[]"))
    except ValueError:
        return False
    return any(ip in net for net in networks)


def client_address(trusted_proxies: str | None) -> str:
    peer = request.remote_addr or "?"
    networks = _networks(trusted_proxies)
    if not networks or not _trusted(peer, networks):
        return peer
    hops = [h.strip() for h in ",".join(request.headers.getlist("X-Forwarded-For")).split(",") if h.strip()]
    for hop in reversed(hops):  # the nearest hop first: only our own proxies append honestly
        if not _trusted(hop, networks):
            return hop
    return hops[0] if hops else peer


def check_setting(trusted_proxies: str | None) -> None:
    """Refuse a malformed setting at start (ValueError names the bad entry)."""
    _networks(trusted_proxies)

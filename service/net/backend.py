"""An httpcore network backend that only connects to vetted addresses.

httpcore asks the backend to connect to the URL's host name. We resolve the
name ourselves, drop every address the guard refuses, and connect to a kept
address given as an IP literal, so the address checked is the address
connected to (a DNS answer that changes between check and connect cannot
slip through). TLS is layered on afterwards by httpcore with the URL's host
name, so certificate checks and SNI still use the name, not the IP.

A name with both public and refused addresses is not refused: only its public
addresses are tried, in resolver order, one after another.

Lookups run in worker threads of their own (`DNS_THREADS`), not in trio's default thread
limiter: a lookup abandoned at its post's timeout keeps its thread until the system resolver
gives up, and receivers whose names resolve slowly must only make deliveries wait, never
the node's file work and uploads that share the default limiter. Engine output fetches
(service/engines/common.py) have threads of their own again (`OUTPUT_DNS_THREADS`): slow
names of one kind never hold up the other.
"""

from __future__ import annotations

import socket
import typing

import httpcore
import trio
from trio.lowlevel import RunVar

from service.net.guard import is_public, parse_ip

DNS_THREADS = 8  # system lookups at once for outgoing webhooks, node-wide; more wait their turn
OUTPUT_DNS_THREADS = 8  # the same for engine output fetches, apart from the webhooks'
_dns_limiter: RunVar[trio.CapacityLimiter] = RunVar("webhook_dns_limiter")
_output_dns_limiter: RunVar[trio.CapacityLimiter] = RunVar("output_dns_limiter")


def dns_limiter() -> trio.CapacityLimiter:
    """The webhook lookups' own thread limiter (one per trio run)."""
    return _limiter(_dns_limiter, DNS_THREADS)


def output_dns_limiter() -> trio.CapacityLimiter:
    """The engine output fetches' lookups' own thread limiter (one per trio run)."""
    return _limiter(_output_dns_limiter, OUTPUT_DNS_THREADS)


def _limiter(var: RunVar[trio.CapacityLimiter], threads: int) -> trio.CapacityLimiter:
    try:
        return var.get()
    except LookupError:
        limiter = trio.CapacityLimiter(threads)
        var.set(limiter)
        return limiter


async def getaddrinfo(host: str, port: int, limiter: trio.CapacityLimiter | None = None) -> list:
    """`trio.socket.getaddrinfo(host, port, type=SOCK_STREAM)`, with a system lookup in a
    thread of `limiter` (default `dns_limiter()`) instead of trio's default limiter.

    IP literals are answered without a thread, and a custom hostname resolver set with
    `trio.socket.set_custom_hostname_resolver` is used as trio would (tests inject DNS so).
    `host` is ASCII already (httpx applied IDNA), so trio's own IDNA step has nothing to do.
    """
    custom = trio.socket.set_custom_hostname_resolver(None)  # read it: trio has no getter
    trio.socket.set_custom_hostname_resolver(custom)
    if custom is not None:
        return await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    await trio.lowlevel.checkpoint()
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0,
                                  socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
    except socket.gaierror as exc:
        if exc.errno != socket.EAI_NONAME:
            raise
    return await trio.to_thread.run_sync(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM,
                                         abandon_on_cancel=True, limiter=limiter or dns_limiter())


class AddressNotAllowed(Exception):
    """Every address of the host is refused by the guard."""


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """One per attempt: also remembers every stream it opened, to close them all. `limiter`:
    the threads its lookups take (default: the webhooks', `dns_limiter()`)."""

    def __init__(self, *, allow_private: bool, limiter: trio.CapacityLimiter | None = None):
        self._allow_private = allow_private
        self._limiter = limiter
        self._trio = httpcore.TrioBackend()
        self._streams: list[httpcore.AsyncNetworkStream] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.vetted_addresses(host, port)
        last_error: Exception | None = None
        for address in addresses:
            try:
                stream = await self._trio.connect_tcp(
                    address, port, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                last_error = exc
                continue
            self._streams.append(stream)
            return stream
        assert last_error is not None
        raise last_error

    async def vetted_addresses(self, host: str, port: int) -> list[str]:
        """Resolve `host`, keep the allowed addresses as IP literals, in resolver order."""
        try:
            infos = await getaddrinfo(host, port, self._limiter)
        except OSError as exc:
            raise httpcore.ConnectError(f"could not resolve {host!r}") from exc
        kept: list[str] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            literal = str(sockaddr[0])
            if not self._allow_private and not is_public(parse_ip(literal)):
                continue
            if len(sockaddr) == 4 and sockaddr[3]:  # IPv6 scope id, private mode only
                literal = f"{literal.split('%')[0]}%{sockaddr[3]}"
            if literal not in kept:
                kept.append(literal)
        if not kept:
            raise AddressNotAllowed(host)
        return kept

    async def close_all(self) -> None:
        """Close every socket this attempt opened, whatever state httpcore left it in."""
        streams, self._streams = self._streams, []
        for stream in streams:
            await trio.aclose_forcefully(_Closable(stream))

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not used")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _Closable(trio.abc.AsyncResource):
    """Lets trio.aclose_forcefully close an httpcore stream."""

    def __init__(self, stream: httpcore.AsyncNetworkStream):
        self._stream = stream

    async def aclose(self) -> None:
        await self._stream.aclose()

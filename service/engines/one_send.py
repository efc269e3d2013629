"""The engine client's connections send a request's head and body in one socket write.

httpcore writes an HTTP/1.1 request as two writes (the head, then the body), and each is a
`send` that wakes the engine's process. Every HTTP/1.1 client reads the answer after it
has written the request, so here the writes wait in a buffer and go out as one when the
connection is next read, or as soon as they pass FLUSH_AT bytes (a big upload is not held
in memory twice). On a plain TCP connection the write goes at once when the socket has
room, without trio's scheduler step (`service/net/write_now.py`). A failed write still
raises httpcore's `WriteError`, from the read that flushed it. Measured: one `sendto` a
Cog job fewer and about 5 % less node CPU a job (bench/README.md, "Throughput IV").
"""

from __future__ import annotations

import ssl
import typing

import httpcore
import trio

from service.net.write_now import Budget, write_now

FLUSH_AT = 64 * 1024


class OneSendBackend(httpcore.AsyncNetworkBackend):
    """`httpcore.AsyncNetworkBackend` whose streams are `OneSendStream`s."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.inner = inner if inner is not None else httpcore.TrioBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.AsyncNetworkStream:
        return OneSendStream(await self.inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.AsyncNetworkStream:
        return OneSendStream(await self.inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class OneSendStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self.inner = inner
        self.pending: list[bytes] = []
        self.plain = _plain_socket(inner)
        self.budget = Budget()

    async def flush(self, timeout: float | None = None) -> None:
        if self.pending:
            data = self.pending[0] if len(self.pending) == 1 else b"".join(self.pending)
            self.pending = []
            sent = 0
            if self.plain is not None and self.budget.take():
                await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled request is not sent, as with `write`
                try:
                    sent = write_now(self.plain, data)  # the common case: all of it, no step
                except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
                    raise httpcore.WriteError(str(e)) from e  # what the stream's `write` raises
            if sent < len(data):
                await self.inner.write(data[sent:] if sent else data, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self.pending.append(bytes(buffer))
        if sum(map(len, self.pending)) >= FLUSH_AT:  # a head and a body chunk or a few
            await self.flush(timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self.flush(timeout)
        return await self.inner.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self.pending = []  # a closed connection's unsent request is dropped with it
        await self.inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        await self.flush(timeout)
        return OneSendStream(await self.inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self.inner.get_extra_info(info)


def _plain_socket(stream: httpcore.AsyncNetworkStream) -> trio.socket.SocketType | None:
    """The socket under httpcore's trio stream for plain TCP, written at once when it has
    room (`flush`); None for TLS (its bytes must go through the TLS layer) and for any other
    stream."""
    if stream.get_extra_info("ssl_object") is not None:
        return None
    sock = stream.get_extra_info("socket")
    return sock if isinstance(sock, trio.socket.SocketType) else None

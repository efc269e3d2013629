"""A TCP proxy in front of one engine that injects the soak's network faults, and sees
what the engine sent back.

Modes, read when a request starts (a client chunk beginning with an HTTP method) and when
a connection opens:

    pass     bytes go through both ways
    reset    the client's connection is reset (RST, SO_LINGER 0); `reset_all()` also
             resets every connection open now (a router dropping state)
    slow     the next answer on that connection is held `slow_s` seconds (past the
             node's per-call timeout), then sent
    5xx      the request is answered `503 Service Unavailable` by the proxy and the
             connection closed; the engine never sees it

`tags_done`: prompt tags (`soak-N`) of requests whose answer carried `[DONE]` to the
client: an OpenAI-compatible stream that the engine finished and the node received.
"""

from __future__ import annotations

import re
import socket
import struct

import trio

METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"PATCH ", b"HEAD ", b"OPTIONS ")
TAG = re.compile(rb"soak-(\d+)")
ANSWER_503 = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 19\r\n"
              b"connection: close\r\n\r\nService Unavailable")


def _rst(stream: trio.SocketStream) -> None:
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


class _Conn:
    def __init__(self, client: trio.SocketStream) -> None:
        self.client = client
        self.upstream: trio.SocketStream | None = None
        self.scope = trio.CancelScope()
        self.delay = 0.0
        self.tag: bytes | None = None
        self.tail = b""


class FaultProxy:
    def __init__(self, name: str, target: str, slow_s: float = 8.0) -> None:
        host, _, port = target.removeprefix("http://").split("/")[0].partition(":")
        self.name, self.host, self.target_port = name, host, int(port)
        self.slow_s = slow_s
        self.mode = "pass"
        self.port = 0
        self.conns: set[_Conn] = set()
        self.tags_done: set[int] = set()
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    def reset_all(self) -> None:
        for conn in list(self.conns):
            self._reset(conn)

    def _reset(self, conn: _Conn) -> None:
        _rst(conn.client)
        if conn.upstream is not None:
            _rst(conn.upstream)
        conn.scope.cancel()

    async def _handle(self, client: trio.SocketStream) -> None:
        conn = _Conn(client)
        try:
            if self.mode == "reset":
                _rst(client)
                return
            try:
                conn.upstream = await trio.open_tcp_stream(self.host, self.target_port)
            except OSError:
                _rst(client)  # the engine is down: the client sees what it would see
                return
            self.conns.add(conn)
            with conn.scope:
                async with trio.open_nursery() as n:
                    n.start_soon(self._up, conn, n.cancel_scope)
                    n.start_soon(self._down, conn, n.cancel_scope)
        finally:
            self.conns.discard(conn)
            for s in (conn.client, conn.upstream):
                if s is not None:
                    with trio.CancelScope(shield=True):
                        await s.aclose()

    async def _up(self, conn: _Conn, scope: trio.CancelScope) -> None:
        assert conn.upstream is not None
        try:
            async for data in conn.client:
                if data.startswith(METHODS):
                    self.requests += 1
                    if self.mode == "reset":
                        self._reset(conn)
                        return
                    if self.mode == "5xx":
                        await conn.client.send_all(ANSWER_503)
                        return
                    if self.mode == "slow":
                        conn.delay = self.slow_s
                found = TAG.search(data)  # in the body: a chunk of its own after the head
                if found:
                    conn.tag = found.group(1)
                await conn.upstream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            scope.cancel()

    async def _down(self, conn: _Conn, scope: trio.CancelScope) -> None:
        assert conn.upstream is not None
        try:
            async for data in conn.upstream:
                if conn.delay:
                    delay, conn.delay = conn.delay, 0.0
                    await trio.sleep(delay)
                await conn.client.send_all(data)
                window = conn.tail + data
                if conn.tag is not None and b"data: [DONE]" in window:
                    self.tags_done.add(int(conn.tag))
                    conn.tag = None
                conn.tail = window[-16:]
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            scope.cancel()

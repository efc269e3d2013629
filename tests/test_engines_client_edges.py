"""The engine client's fast paths against httpx/httpcore: a plain send's answer
carries the server's headers only; a request cancelled between getting a new connection
and starting on it does not leave that connection holding a pool slot for good
(encode/httpcore#1093, which httpcore 1.0.9's own pool still has)."""

from __future__ import annotations

from functools import partial

import httpcore
import pytest
import trio
import trio.testing
from keepalive_server import Server

from service.engines import one_send
from service.engines.http_pool import Pool
from service.engines.transport import engine_client, send_plain


@pytest.fixture
async def server(nursery):
    s = Server()
    await s.serve(nursery)
    return s


async def answer_once(answer: bytes, stream: trio.SocketStream) -> None:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            return
        buf += data
    await stream.send_all(answer)
    await stream.aclose()


@pytest.mark.parametrize("answer", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
     b"f\r\n{\"status\":\"ok\"}\r\n0\r\n\r\n"),
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n\r\n{\"status\":\"ok\"}",
    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"status\":\"ok\"}",
], ids=["chunked", "close-delimited", "http/1.0"])
async def test_a_plain_sends_answer_has_the_servers_headers_only(nursery, monkeypatch, answer):
    """A body without Content-Length (chunked, or read to the close): httpx's answer has no
    Content-Length header; the plain send's must not make one up."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    listeners = await nursery.start(partial(trio.serve_tcp, partial(answer_once, answer), 0, host="127.0.0.1"))
    url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/health-check"
    async with engine_client() as c:
        short = await send_plain(c, "GET", url, timeout=5)
        long = await c.get(url, timeout=5)
    assert type(short).__name__ == "_Answer"  # the short path was taken
    assert short.json() == long.json() == {"status": "ok"}
    assert "content-length" not in short.headers
    assert short.headers.raw == long.headers.raw
    assert short.num_bytes_downloaded == long.num_bytes_downloaded == len(b'{"status":"ok"}')


class CancelAfterConnect(one_send.OneSendBackend):
    """Cancels `scope` as a connect finishes: a job's cancel that lands in that step."""

    scope: trio.CancelScope | None = None

    async def connect_tcp(self, *args, **kwargs):
        stream = await super().connect_tcp(*args, **kwargs)
        if self.scope is not None:
            self.scope.cancel()
            self.scope = None
        return stream


async def test_a_request_cancelled_as_its_connect_finishes_gives_the_slot_back(server, autojump_clock):
    """The new connection is connected but never started (HTTP/1.1 state NEW): neither idle,
    closed nor expired, held by no request. httpcore's pass keeps it for good, and the
    next request waits out its pool timeout (httpcore.PoolTimeout)."""
    backend = CancelAfterConnect()
    async with Pool(max_connections=1, max_keepalive_connections=1, network_backend=backend) as pool:
        with trio.CancelScope() as scope:
            backend.scope = scope
            await pool.request("GET", f"http://127.0.0.1:{server.port}/x")
        assert scope.cancelled_caught
        assert pool.connections == [] and pool._requests == []  # dropped by the cancel's own pass
        r = await pool.request("GET", f"http://127.0.0.1:{server.port}/x", extensions={"timeout": {"pool": 5}})
        assert r.status == 200 and server.accepted == 2


async def test_a_queued_request_cancelled_as_a_connection_is_made_for_it_gives_the_slot_back(server, nursery,
                                                                                             autojump_clock):
    """A request queued for a full pool is cancelled; before it runs, a response closed in
    the same step makes room and the pass opens a connection for it. It never starts on it."""
    other = Server()
    await other.serve(nursery)
    async with Pool(max_connections=1, max_keepalive_connections=1) as pool:
        await pool.request("GET", f"http://127.0.0.1:{server.port}/x")  # so the next one's locks take no step
        resp = await pool.handle_async_request(httpcore.Request(
            "GET", f"http://127.0.0.1:{server.port}/x", headers=[(b"Host", b"engine")]))
        await resp.aread()  # its connection busy until the response is closed: the pool is full
        scope = trio.CancelScope()

        async def queued() -> None:
            with scope:
                await pool.request("GET", f"http://127.0.0.1:{other.port}/x")

        nursery.start_soon(queued)
        await trio.testing.wait_all_tasks_blocked()
        assert len(pool._requests) == 2
        scope.cancel()
        await resp.aclose()  # its pass closes the idle connection and makes one for the queued request
        await trio.testing.wait_all_tasks_blocked()
        assert scope.cancelled_caught and pool._requests == []
        assert pool.connections == []  # the one made for the cancelled request, dropped
        r = await pool.request("GET", f"http://127.0.0.1:{other.port}/x", extensions={"timeout": {"pool": 5}})
        assert r.status == 200 and other.accepted == 1


def test_httpcores_own_pool_keeps_the_orphan():
    """What the two tests above guard against, in httpcore 1.0.9's own pool (so the pass
    here differs from httpcore's on purpose)."""
    async def main() -> str:
        async with trio.open_nursery() as n:
            s = Server()
            await s.serve(n)
            backend = CancelAfterConnect()
            async with httpcore.AsyncConnectionPool(max_connections=1, network_backend=backend) as pool:
                with trio.CancelScope() as scope:
                    backend.scope = scope
                    await pool.request("GET", f"http://127.0.0.1:{s.port}/x")
                with pytest.raises(httpcore.PoolTimeout):
                    await pool.request("GET", f"http://127.0.0.1:{s.port}/x", extensions={"timeout": {"pool": 5}})
                info = pool.connections[0].info()
            n.cancel_scope.cancel()
        return info

    info = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert info.endswith("HTTP/1.1, NEW, Request Count: 0")  # connected, never started, kept

"""The engine client's sharded connection pool (service/engines/transport.py): connections
are reused across requests, the shards share the load, a shard's slot is given back
however a request ends; a plain send goes the client's route; each request leaves in one
socket write (service/engines/one_send.py)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import httpcore
import httpx
import pytest
import trio
from conftest import steps_taken
from engine_support import cog_catalog, engine_node
from keepalive_server import Server
from test_generation_support import submit, wait_status
from waiting import wait_until

from service.engines import one_send
from service.engines.transport import (
    MAX_CONNECTIONS,
    MAX_KEEPALIVE,
    Sharded,
    engine_client,
    send_plain,
)
from service.net.write_now import write_now


@pytest.fixture
async def server(nursery):
    s = Server()
    await s.serve(nursery)
    return s


async def test_one_request_at_a_time_uses_one_connection(server):
    async with httpx.AsyncClient(transport=Sharded(256, 64)) as c:
        for _ in range(20):
            r = await c.get(f"http://127.0.0.1:{server.port}/x")
            assert r.text == "ok"
        assert server.accepted == 1
        assert c._transport.busy == [0] * 8  # type: ignore[attr-defined]
        assert c._transport.load == {}  # type: ignore[attr-defined]


async def test_requests_in_flight_together_spread_over_the_shards_and_their_connections_are_reused(server):
    transport = Sharded(256, 64)
    async with httpx.AsyncClient(transport=transport) as c:
        async def get() -> None:
            assert (await c.get(f"http://127.0.0.1:{server.port}/x")).text == "ok"

        for round_ in range(3):
            server.hold, server.waiting, server.go = 64, 0, trio.Event()
            async with trio.open_nursery() as n:
                for _ in range(64):
                    n.start_soon(get)
                await server.go.wait()
                assert transport.busy == [8] * 8  # every shard holds its share, none more
            assert transport.busy == [0] * 8
            assert server.accepted == 64, round_  # the second and third rounds open none


async def test_many_servers_at_low_load_each_reuse_their_connection(nursery):
    """16 servers called in turn, one call at a time: each keeps its one connection, as in
    one pool of 64 kept alive (a server's home shard is always tried first)."""
    servers = [Server() for _ in range(16)]
    for s in servers:
        await s.serve(nursery)
    async with httpx.AsyncClient(transport=Sharded(256, 64)) as c:
        for _ in range(5):
            for s in servers:
                assert (await c.get(f"http://127.0.0.1:{s.port}/x")).text == "ok"
    assert [s.accepted for s in servers] == [1] * 16


async def test_a_fleet_of_servers_with_a_request_each_keeps_its_connections(nursery):
    """64 single-slot servers, each sent a request at the same time, round after round (a
    fleet's creates and health checks): each server's one connection is used again every
    round. A server spills past its home shard only with 8 requests of its own in flight
    there, and the node keeps alive as many connections as it may open. With the spill
    decided by all the requests in a shard and 64 kept alive in all (8 a shard), idle ones
    were closed as surplus and opened again: about 17 a round, for good."""
    servers = [Server() for _ in range(64)]
    for s in servers:
        await s.serve(nursery)
    transport = Sharded(MAX_CONNECTIONS, MAX_KEEPALIVE)
    async with httpx.AsyncClient(transport=transport) as c:
        for _ in range(30):
            async with trio.open_nursery() as n:
                for s in servers:
                    n.start_soon(c.get, f"http://127.0.0.1:{s.port}/x")
        assert transport.load == {}  # no server with a request in flight is remembered
    assert [s.accepted for s in servers] == [1] * 64


async def test_a_failed_or_cancelled_request_gives_its_slot_back(server):
    transport = Sharded(256, 64)
    async with httpx.AsyncClient(transport=transport) as c:
        with trio.socket.socket() as s:  # a port nobody listens on
            await s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        with pytest.raises(httpx.ConnectError):
            await c.get(f"http://127.0.0.1:{closed}/x")
        assert transport.busy == [0] * 8
        server.hold, server.go = 2, trio.Event()  # never 2 requests: the one sent waits

        async def cancelled_get(scope: trio.CancelScope) -> None:
            with scope:
                await c.get(f"http://127.0.0.1:{server.port}/x")

        scope = trio.CancelScope()
        async with trio.open_nursery() as n:
            n.start_soon(cancelled_get, scope)
            await wait_until(lambda: server.waiting >= 1)
            assert sorted(transport.busy) == [0] * 7 + [1]
            scope.cancel()
        assert scope.cancelled_caught
        assert transport.busy == [0] * 8
        async with c.stream("GET", f"http://127.0.0.1:{server.port}/x") as r:
            server.go.set()
            assert sorted(transport.busy) == [0] * 7 + [1]  # until the streamed response is closed
            assert await r.aread() == b"ok"
        assert transport.busy == [0] * 8
        assert transport.load == {}  # the failed, the cancelled and the streamed: none remembered


def clear_proxies(monkeypatch) -> None:
    """No proxy setting of the machine running the tests leaks into them."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_the_engine_client_still_goes_through_an_environment_proxy(server, monkeypatch):
    """A client given its own transport drops the environment's proxies: the engine client
    mounts the shards instead, so HTTP_PROXY still applies (the counting server is the proxy
    here: an absolute-form request for a host that does not resolve reaches it)."""
    clear_proxies(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    async with engine_client() as c:
        r = await c.get("http://engine.invalid/x")
        assert r.text == "ok" and server.accepted == 1
    monkeypatch.delenv("HTTP_PROXY")
    async with engine_client() as c:
        with pytest.raises(httpx.ConnectError):  # no proxy: the name is looked up, and fails
            await c.get("http://engine.invalid/x")
        r = await c.get(f"http://127.0.0.1:{server.port}/x")
        assert r.text == "ok" and server.accepted == 2


async def test_all_proxy_applies_and_no_proxy_hosts_keep_the_shards(server, monkeypatch):
    """ALL_PROXY covers every scheme (httpx names it `all://`, the pattern the shards once
    took over); a NO_PROXY host goes direct, through the shards."""
    clear_proxies(monkeypatch)
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with engine_client() as c:
        r = await c.get("http://engine.invalid/x")  # reaches the counting server: it is the proxy
        assert r.text == "ok" and server.accepted == 1
        assert isinstance(c._transport, Sharded)
        r = await c.get(f"http://127.0.0.1:{server.port}/x")  # NO_PROXY: direct
        assert r.text == "ok" and server.accepted == 2
        assert c._transport_for_url(httpx.URL(f"http://127.0.0.1:{server.port}/x")) is c._transport


def test_the_limits_are_split_over_the_shards():
    t = Sharded(max_connections=256, max_keepalive_connections=64)
    assert len(t.shards) == 8
    pools = [s._pool for s in t.shards]
    assert {(p._max_connections, p._max_keepalive_connections) for p in pools} == {(32, 8)}


def sockets_to(port: int) -> set[int]:
    """Local ports of this machine's TCP sockets to 127.0.0.1:`port` (any state: a closed
    one lingers in TIME_WAIT), from /proc/net/tcp."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote = line.split()[1:3]
        if remote == f"0100007F:{port:04X}":
            ports.add(int(local.split(":")[1], 16))
    return ports


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="counts sockets from /proc/net/tcp")
async def test_jobs_through_cog_reuse_the_engine_connection(cog, tmp_path):
    """One job after another through a real Cog server: the node's create (PUT) and health
    checks go over the connection the first job opened; later jobs open none."""
    before = sockets_to(cog.port)
    async with engine_node(tmp_path, cog_catalog(cog.url)) as n:
        key = (await n.create_org())["api_key"]
        opened = []
        for i in range(4):
            rid = (await submit(n, key, {"prompt": f"fox {i}", "seed": i}, path="/v1/generation/models/cog-image"))[
                "request_id"]
            assert (await wait_status(n, key, rid))["status"] == "completed"
            opened.append(len(sockets_to(cog.port) - before))
    assert opened[0] >= 1
    assert opened == [opened[0]] * 4, opened  # no new connection after the first job


async def test_a_plain_send_is_read_in_full_and_keeps_its_connection(server):
    async with engine_client() as c:
        for _ in range(3):
            r = await send_plain(c, "PUT", f"http://127.0.0.1:{server.port}/predictions/1", json={"input": {}},
                                 headers={"Prefer": "respond-async"}, timeout=5)
            assert r.status_code == 200 and r.text == "ok" and r.is_closed
            assert r.request.method == "PUT" and r.request.headers["prefer"] == "respond-async"
            assert r.request.headers["content-type"] == "application/json"
        assert server.accepted == 1 and server.bodies == [len(b'{"input":{}}')] * 3
        assert c._transport.busy == [0] * 8  # type: ignore[attr-defined]  # the slot given back


async def test_a_plain_send_writes_what_httpx_would_and_reads_the_same_answer(server, socket_writes, monkeypatch):
    """The shards' short path (no httpx request or response layers) against httpx's own:
    the same bytes on the socket, the same answer; a path httpx would escape goes httpx's way."""
    clear_proxies(monkeypatch)
    base = f"http://127.0.0.1:{server.port}"
    calls = [("PUT", "/predictions/j-1", {"id": "j-1", "input": {"prompt": "caf\u00e9 \u2603", "n": [1, 2.5]}},
              {"Prefer": "respond-async"}),
             ("GET", "/health-check", None, None),
             ("POST", "/predictions/j-1/cancel", None, None)]
    async with engine_client() as c:
        for method, path, body, headers in calls:
            short = await send_plain(c, method, base + path, json=body, headers=headers, timeout=5)
            request = httpx.Request(method, base + path, json=body, headers=headers,
                                    extensions={"timeout": httpx.Timeout(5).as_dict()})
            long = await c._transport.handle_async_request(request)
            await long.aread()
            assert socket_writes[-1] == socket_writes[-2] and socket_writes[-1].startswith(f"{method} {path} ".encode())
            assert (short.status_code, short.text, short.headers.raw) == (long.status_code, long.text, long.headers.raw)
            assert type(short).__name__ == "_Answer"  # the short path was taken
            assert short.request.method == method and short.request.headers.raw == request.headers.raw
        escaped = await send_plain(c, "GET", base + "/a path?x=1", timeout=5)
        assert type(escaped) is httpx.Response and escaped.text == "ok"
        assert socket_writes[-1].startswith(b"GET /a%20path?x=1 HTTP/1.1\r\n")
        dotted = await send_plain(c, "GET", base + "/a/../health-check", timeout=5)  # httpx drops dot segments
        assert type(dotted) is httpx.Response and socket_writes[-1].startswith(b"GET /health-check HTTP/1.1\r\n")
        assert c._transport.busy == [0] * 8  # type: ignore[attr-defined]


async def test_a_plain_send_goes_through_an_environment_proxy(server, monkeypatch):
    clear_proxies(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    async with engine_client() as c:
        r = await send_plain(c, "PUT", "http://engine.invalid/predictions/1", json={}, timeout=5)
        assert r.text == "ok" and server.accepted == 1


async def test_a_plain_send_fails_with_the_clients_own_errors(server, monkeypatch, autojump_clock, socket_writes):
    clear_proxies(monkeypatch)
    async with engine_client() as c:
        with pytest.raises(httpx.ConnectError):  # nothing listens on the discard port
            await send_plain(c, "PUT", "http://127.0.0.1:9/predictions/1", json={}, timeout=5)
        assert socket_writes == []
        server.hold = 2  # the one request waits for a second that never comes: no answer
        with pytest.raises(httpx.ReadTimeout):
            await send_plain(c, "PUT", f"http://127.0.0.1:{server.port}/predictions/1", json={}, timeout=3)
        assert c._transport.busy == [0] * 8  # type: ignore[attr-defined]


# One write per request (service/engines/one_send.py), counted where writes reach the socket


class Recorded(httpcore.AsyncNetworkStream):
    """A stream that logs each write it passes on."""

    def __init__(self, inner, writes: list[bytes]) -> None:
        self.inner, self.writes = inner, writes

    async def read(self, max_bytes, timeout=None):
        return await self.inner.read(max_bytes, timeout)

    async def write(self, buffer, timeout=None):
        self.writes.append(bytes(buffer))
        await self.inner.write(buffer, timeout)

    async def aclose(self):
        await self.inner.aclose()

    def get_extra_info(self, info):
        return self.inner.get_extra_info(info)


@pytest.fixture
def socket_writes(monkeypatch) -> list[bytes]:
    """Every write the engine client's connections make to their sockets."""
    writes: list[bytes] = []
    connect = httpcore.TrioBackend.connect_tcp

    async def recorded(self, *args, **kwargs):
        return Recorded(await connect(self, *args, **kwargs), writes)

    def recorded_now(sock, data):
        n = write_now(sock, data)
        writes.append(bytes(data[:n]))
        return n

    monkeypatch.setattr(httpcore.TrioBackend, "connect_tcp", recorded)
    monkeypatch.setattr(one_send, "write_now", recorded_now)  # writes that went at once
    return writes


async def test_the_engine_client_sends_each_request_in_one_write(server, socket_writes):
    bodies = [f'{{"input":{{"prompt":"{"x" * i}"}}}}' for i in range(3)]
    async with engine_client() as c:
        for i in range(3):
            r = await c.put(f"http://127.0.0.1:{server.port}/predictions/{i}", json={"input": {"prompt": "x" * i}})
            assert r.status_code == 200 and r.text == "ok"
    assert server.bodies == [len(b) for b in bodies] and server.accepted == 1
    assert len(socket_writes) == 3
    for i, w in enumerate(socket_writes):
        assert w.startswith(f"PUT /predictions/{i} HTTP/1.1\r\n".encode()) and w.endswith(bodies[i].encode())


async def test_a_body_past_the_flush_size_goes_out_without_waiting_for_the_read(server, socket_writes):
    big = b"y" * (one_send.FLUSH_AT * 3)
    async with engine_client() as c:
        r = await c.post(f"http://127.0.0.1:{server.port}/upload", content=big)
    assert r.text == "ok" and server.bodies == [len(big)]
    # head and body, past FLUSH_AT, go out together at once: the first write carries the
    # head with the body's start (the socket may take part; the rest follows in turn)
    assert socket_writes[0].startswith(b"POST /upload HTTP/1.1\r\n") and b"\r\n\r\nyy" in socket_writes[0]
    assert b"".join(socket_writes).endswith(big) and b"".join(socket_writes).count(b"POST") == 1


class Failing(httpcore.AsyncNetworkStream):
    def __init__(self) -> None:
        self.closed = False

    async def write(self, buffer, timeout=None):
        raise httpcore.WriteError("the engine reset the connection")

    async def read(self, max_bytes, timeout=None):  # pragma: no cover - never reached
        raise AssertionError("read before the write was flushed")

    async def aclose(self):
        self.closed = True


async def test_a_write_that_fails_raises_write_error_from_the_read_that_flushes_it():
    stream = one_send.OneSendStream(Failing())
    await stream.write(b"PUT /predictions/1 HTTP/1.1\r\n\r\n")  # held: nothing sent yet
    with pytest.raises(httpcore.WriteError, match="the engine reset the connection"):
        await stream.read(65536)


async def test_closing_drops_what_was_never_sent():
    inner = Failing()
    stream = one_send.OneSendStream(inner)
    await stream.write(b"head")
    await stream.aclose()  # no write attempted, so no WriteError
    assert inner.closed and stream.pending == []


# A plain connection's request goes at once (service/net/write_now.py)


async def plain_stream(port: int) -> one_send.OneSendStream:
    return await one_send.OneSendBackend().connect_tcp("127.0.0.1", port)  # type: ignore[return-value]


async def test_a_plain_connection_writes_its_request_without_a_step(server, socket_writes):
    stream = await plain_stream(server.port)
    assert stream.plain is not None
    await stream.write(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
    with steps_taken() as steps:
        await stream.flush()
    assert steps.taken == 0  # trio's send_all takes one (its checkpoint after the send)
    assert socket_writes == [b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"]
    assert b"ok" in await stream.read(65536)
    await stream.aclose()


async def test_a_cancelled_request_is_not_sent(server, socket_writes):
    stream = await plain_stream(server.port)
    await stream.write(b"PUT /predictions/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    with trio.CancelScope() as scope:
        scope.cancel()
        await stream.read(65536)
    assert scope.cancelled_caught and socket_writes == []
    await stream.aclose()


async def test_a_write_to_a_connection_the_server_closed_is_a_write_error(socket_writes):
    async def close_at_once(s: trio.SocketStream) -> None:
        await s.aclose()

    async with trio.open_nursery() as n:
        listeners = await n.start(partial(trio.serve_tcp, close_at_once, 0, host="127.0.0.1"))
        stream = await plain_stream(listeners[0].socket.getsockname()[1])
        await trio.sleep(0.2)  # the server has closed its end
        with pytest.raises(httpcore.WriteError, match="socket connection broken"):
            for _ in range(3):  # a first write may still land before the reset comes back
                await stream.write(b"x" * 1024)
                await stream.flush()
                await trio.sleep(0.05)
        await stream.aclose()
        n.cancel_scope.cancel()


async def test_a_tls_stream_is_not_written_around_its_tls_layer():
    with trio.socket.socket() as sock:
        class TLSLike(httpcore.AsyncNetworkStream):
            def get_extra_info(self, info):
                return {"ssl_object": object(), "socket": sock}.get(info)  # as httpcore's TLS stream

        assert one_send.OneSendStream(TLSLike()).plain is None

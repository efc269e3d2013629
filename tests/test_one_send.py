"""A request or an answer goes out in one socket write: the engine client's requests
(service/engines/one_send.py) and Hypercorn's answers with a declared length
(service/http/head_with_body.py). Writes are counted where they reach the socket."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import httpcore
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.trio.tcp_server import TCPServer

from service.config import Settings
from service.engines import one_send
from service.engines.transport import engine_client
from service.http import head_with_body
from service.main import hypercorn_config


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


class Echo:
    """A keep-alive HTTP/1.1 server on loopback that answers each request with its body's length."""

    async def serve(self, nursery) -> None:
        listeners = await nursery.start(partial(trio.serve_tcp, self.handle, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]

    async def handle(self, stream) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")) or 0)
                while len(buf) < length:
                    buf += await stream.receive_some(65536)
                buf = buf[length:]
                answer = str(length).encode()
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
        except trio.BrokenResourceError:
            pass


@pytest.fixture
async def echo(nursery):
    e = Echo()
    await e.serve(nursery)
    return e


@pytest.fixture
def socket_writes(monkeypatch) -> list[bytes]:
    """Every write the engine client's connections make to their sockets."""
    writes: list[bytes] = []
    connect = httpcore.TrioBackend.connect_tcp

    async def recorded(self, *args, **kwargs):
        return Recorded(await connect(self, *args, **kwargs), writes)

    monkeypatch.setattr(httpcore.TrioBackend, "connect_tcp", recorded)
    return writes


async def test_the_engine_client_sends_each_request_in_one_write(echo, socket_writes):
    async with engine_client() as c:
        for i in range(3):
            r = await c.put(f"http://127.0.0.1:{echo.port}/predictions/{i}", json={"input": {"prompt": "x" * i}})
            assert r.status_code == 200 and r.text == str(len(f'{{"input":{{"prompt":"{"x" * i}"}}}}'))
    assert len(socket_writes) == 3
    for i, w in enumerate(socket_writes):
        assert w.startswith(f"PUT /predictions/{i} HTTP/1.1\r\n".encode()) and w.endswith(b'"}}')


async def test_a_body_past_the_flush_size_goes_out_without_waiting_for_the_read(echo, socket_writes):
    big = b"y" * (one_send.FLUSH_AT * 3)
    async with engine_client() as c:
        r = await c.post(f"http://127.0.0.1:{echo.port}/upload", content=big)
    assert r.text == str(len(big))
    assert b"".join(socket_writes).endswith(big)
    assert len(socket_writes) == 1  # the head and the one big chunk: past FLUSH_AT, sent at once


async def test_a_request_to_a_closed_port_still_fails_as_a_connect_error(socket_writes):
    async with engine_client() as c:
        with trio.fail_after(5):
            with pytest.raises(Exception) as info:
                await c.get("http://127.0.0.1:9/")
    assert type(info.value).__name__ == "ConnectError"
    assert socket_writes == []


# Hypercorn's side


async def app(scope, receive, send):
    """Plain answers with a length; /stream holds its body until told to go."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await scope["state"]["go"].wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    body = b"" if scope["path"] == "/empty" else b'{"ok":true}'
    await send({"type": "http.response.start", "status": 204 if not body else 200,
                "headers": [(b"content-length", str(len(body)).encode())] if body else []})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def hyper(nursery, monkeypatch):
    """Hypercorn with the node's configuration on a free port; (port, its non-empty socket
    writes, the stream's go event)."""
    writes: list[bytes] = []
    protocol_send = TCPServer.protocol_send

    async def recorded(self, event):
        if getattr(event, "data", b""):
            writes.append(event.data)
        await protocol_send(self, event)

    monkeypatch.setattr(TCPServer, "protocol_send", recorded)
    go = trio.Event()

    async def lifespan_state(scope, receive, send):
        if scope["type"] == "lifespan":
            scope["state"]["go"] = go
            while True:
                m = await receive()
                await send({"type": m["type"] + ".complete"})
                if m["type"] == "lifespan.shutdown":
                    return
        await app(scope, receive, send)

    cfg: Config = hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))
    urls = await nursery.start(partial(hypercorn_serve, lifespan_state, cfg, mode="asgi"))
    return int(urls[0].rsplit(":", 1)[1]), writes, go


async def ask(port: int, request: bytes, until: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        got = b""
        with trio.fail_after(5):
            while until not in got:
                got += await stream.receive_some(65536)
        return got


async def test_an_answer_with_a_length_leaves_in_one_write(hyper):
    port, writes, _ = hyper
    got = await ask(port, b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", b'{"ok":true}')
    assert got.startswith(b"HTTP/1.1 200 ")
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200 ") and writes[0].endswith(b'{"ok":true}')


async def test_the_head_of_an_answer_without_a_body_is_not_held_back(hyper):
    port, writes, _ = hyper
    got = await ask(port, b"GET /empty HTTP/1.1\r\nHost: a\r\n\r\n", b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 204 ")
    got = await ask(port, b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n", b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"\r\n\r\n")
    assert len(writes) == 2


async def test_a_stream_shows_its_head_before_its_first_event(hyper):
    port, writes, go = hyper
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: a\r\n\r\n")
        head = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in head:
                head += await stream.receive_some(65536)
        assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head.lower()
        assert not go.is_set()
        go.set()
        rest = b""
        with trio.fail_after(5):
            while not rest.endswith(b"0\r\n\r\n"):
                rest += await stream.receive_some(65536)
        assert b"data: 1" in rest


def test_another_hypercorn_runs_unpatched_and_says_so(monkeypatch, caplog):
    from hypercorn.protocol.h11 import H11Protocol
    monkeypatch.setattr(H11Protocol, "_send_h11_event", head_with_body.HYPERCORNS)
    monkeypatch.setattr(head_with_body, "version", lambda name: "0.19.0")
    with caplog.at_level(logging.WARNING, logger="service.http"):
        assert head_with_body.install() is False
    assert "hypercorn 0.19.0: answers go out as head and body in two writes" in caplog.text
    assert H11Protocol._send_h11_event is head_with_body.HYPERCORNS


async def test_unpatched_the_same_answer_takes_two_writes(hyper, monkeypatch):
    """The count above is the patch's doing (this is what it saves)."""
    from hypercorn.protocol.h11 import H11Protocol
    monkeypatch.setattr(H11Protocol, "_send_h11_event", head_with_body.HYPERCORNS)
    port, writes, _ = hyper
    await ask(port, b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", b'{"ok":true}')
    assert len(writes) == 2 and writes[1] == b'{"ok":true}'

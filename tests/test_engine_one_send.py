"""The engine client sends each request in one socket write (service/engines/one_send.py).
Writes are counted where they reach the socket."""

from __future__ import annotations

from functools import partial

import httpcore
import pytest
import trio

from service.engines import one_send
from service.engines.transport import engine_client


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

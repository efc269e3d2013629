"""HTTP/2 (here cleartext prior knowledge; ALPN h2 over TLS alike) to the node's connection
class with EndShielded, on trio's mock clock: a client that grants no flow-control window
has a response wait in Hypercorn for room that never comes, shielded for its last message.
Once the client has gone, or the shutdown's grace is over, that wait must end, as an
HTTP/1 write ends when its socket closes; a client that stays is closed after HTTP/1's
stall bound (service/http/h2_bound.py)."""

from __future__ import annotations

from pathlib import Path

import h2.config
import h2.connection
import h2.settings
import pytest
import trio
from hypercorn.trio import serve

from service.config import Settings
from service.http.connection import SEND_STALL_S, TCPServer, install
from service.main import EndShielded, hypercorn_config

BIG = 100_000  # bytes of the slow reader's answer
GRACE_S = hypercorn_config(Settings(data_dir=Path("unused"))).graceful_timeout


async def app(scope, receive, send) -> None:
    """Answers as Quart does: the body, then an empty last message."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b"x" * BIG if scope["path"] == "/big" else b"ok"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture
def servers(monkeypatch) -> list[tuple[TCPServer, list[float]]]:
    """Each connection and the (virtual) time its task ended (empty while it runs)."""
    made: list[tuple[TCPServer, list[float]]] = []
    run = TCPServer.run

    async def tracked(self):
        made.append((self, ended := []))
        try:
            await run(self)
        finally:
            ended.append(trio.current_time())

    monkeypatch.setattr(TCPServer, "run", tracked)
    return made


async def unstick(servers) -> None:
    """Ends the waits the bug left for ever (else this test's server never stops)."""
    for server, ended in servers:
        if not ended:
            for buffer in list(server.protocol.protocol.stream_buffers.values()):
                await buffer.close()


async def served(nursery: trio.Nursery) -> int:
    """The node's HTTP stack (its connection class, EndShielded) serving `app` until the
    nursery ends: its port."""
    install()
    config = hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))
    binds = await nursery.start(lambda task_status: serve(EndShielded(app), config, task_status=task_status,
                                                          shutdown_trigger=trio.sleep_forever))
    return int(binds[0].rsplit(":", 1)[1])


async def windowless_get(port: int) -> trio.SocketStream:
    """An HTTP/2 connection whose client grants no window, with one GET answered (its head)."""
    s = await trio.open_tcp_stream("127.0.0.1", port)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.local_settings = h2.settings.Settings(client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    c.initiate_connection()
    c.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "t")], end_stream=True)
    await s.send_all(c.data_to_send())
    events: list = []
    while not any(type(e).__name__ == "ResponseReceived" for e in events):
        data = await s.receive_some()
        assert data, events
        events += c.receive_data(data)
        if out := c.data_to_send():
            await s.send_all(out)
    return s


async def test_a_windowless_http2_client_that_leaves_ends_its_connection_at_once(autojump_clock, servers):
    """It held the connection's task and descriptor (in CLOSE_WAIT) for ever, and the node's stop."""
    async with trio.open_nursery() as nursery:
        port = await served(nursery)
        try:
            s = await windowless_get(port)
            await trio.sleep(10)
            assert servers[0][1] == []  # within the bound: held while the client is there
            t0 = trio.current_time()
            await s.aclose()
            await trio.sleep(1)
            assert servers[0][1] == [t0]
        finally:
            await unstick(servers)
            nursery.cancel_scope.cancel()


async def test_a_windowless_http2_client_does_not_hold_the_nodes_stop_past_its_grace(autojump_clock, servers):
    install()
    config = hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))
    shutdown = trio.Event()
    stopped: list[float] = []

    async def run_server(task_status):
        await serve(EndShielded(app), config, task_status=task_status, shutdown_trigger=shutdown.wait)
        stopped.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(run_server)
        try:
            s = await windowless_get(int(binds[0].rsplit(":", 1)[1]))
            t0 = trio.current_time()
            shutdown.set()
            await trio.sleep(3 * GRACE_S)
            assert servers[0][1] == [t0 + GRACE_S] and stopped == [t0 + GRACE_S]
            await s.aclose()
        finally:
            await unstick(servers)


async def test_a_windowless_http2_client_that_stays_is_closed_after_the_stall_bound(autojump_clock, servers):
    """HTTP/1's rule for a client that takes nothing (SEND_STALL_S, MIN_RATE), over HTTP/2:
    Hypercorn alone held such a client's streams for as long as it stayed."""
    async with trio.open_nursery() as nursery:
        port = await served(nursery)
        try:
            t0 = trio.current_time()
            s = await windowless_get(port)
            await trio.sleep(3 * SEND_STALL_S)
            assert servers[0][1] == [t0 + SEND_STALL_S]  # the first watch that found its answer waiting
            assert await s.receive_some() == b""  # closed on the node's side
            await s.aclose()
        finally:
            await unstick(servers)
            nursery.cancel_scope.cancel()


async def test_an_http2_client_that_takes_its_answer_slowly_gets_all_of_it(autojump_clock, servers):
    """A client that takes more than MIN_RATE (16 KiB of window each 10 s: 1.6 KiB/s) keeps
    its connection past the bound and gets its whole answer."""
    async with trio.open_nursery() as nursery:
        port = await served(nursery)
        s = await trio.open_tcp_stream("127.0.0.1", port)
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
        c.initiate_connection()
        c.send_headers(1, [(":method", "GET"), (":path", "/big"), (":scheme", "http"), (":authority", "t")],
                       end_stream=True)
        await s.send_all(c.data_to_send())
        t0, got, ended = trio.current_time(), 0, False
        while not ended:
            data = await s.receive_some()
            assert data, got
            events = c.receive_data(data)
            ended = any(type(e).__name__ == "StreamEnded" for e in events)
            for e in events:
                if type(e).__name__ == "DataReceived":
                    got += len(e.data)
                    await trio.sleep(10 * len(e.data) / 16384)  # a slow reader
                    if not ended:  # no window to grant a stream that has ended
                        c.increment_flow_control_window(len(e.data), stream_id=1)
                        c.increment_flow_control_window(len(e.data))
            if out := c.data_to_send():
                await s.send_all(out)
        assert got == BIG and trio.current_time() - t0 > 2 * SEND_STALL_S  # past the bound, whole
        assert servers[0][1] == []
        await s.aclose()
        await trio.sleep(1)
        assert len(servers[0][1]) == 1
        nursery.cancel_scope.cancel()


async def test_a_windowless_client_sending_pings_is_closed_all_the_same(autojump_clock, servers):
    """PING answers are frames the client takes, not answers: they do not count."""
    async with trio.open_nursery() as nursery:
        port = await served(nursery)
        try:
            t0 = trio.current_time()
            s = await windowless_get(port)
            c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            c.initiate_connection()
            c.clear_outbound_data_buffer()
            for i in range(int(2 * SEND_STALL_S * 100)):  # 100 a second: 51 kB of PING answers each 30 s
                c.ping(b"%08d" % i)
                try:
                    await s.send_all(c.data_to_send())
                except trio.BrokenResourceError:
                    break  # closed by the node
                await trio.sleep(0.01)
            await trio.sleep(SEND_STALL_S)
            assert servers[0][1] == [t0 + SEND_STALL_S]
            await s.aclose()
        finally:
            await unstick(servers)
            nursery.cancel_scope.cancel()

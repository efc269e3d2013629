"""The node's HTTP/1 connection (service/http/connection.py), Hypercorn's own with some
costs taken out and two bounds added, on trio's mock clock: keep-alive and the
trickled-head cut still at `keep_alive_timeout`, never during a request, a connection the
client ends or closes closed at once, a write the client takes too little of reset (over
TLS, at the bound of the whole write; a TLS close likewise), a slow reader that keeps
taking served whole, shutdown closing idle connections at once, busy ones after their
answer and stalled writes at the end of the grace; a sized response in one write, a
streamed response's head at once; a connection the server closes, closed once; messages
for the app put at once while its queue has room."""

from __future__ import annotations

import fcntl
import math
import socket
import ssl
import struct
import termios
from pathlib import Path

import hypercorn.trio.run
import hypercorn.trio.tcp_server
import pytest
import trio
import trio._highlevel_serve_listeners as trio_listeners
import trio._socket as trio_socket
import trio.testing
from hypercorn.trio import serve

from service.config import Settings
from service.http import connection
from service.http.connection import MIN_RATE, SEND_STALL_S, TaskGroup, TCPServer, _sized_head, install
from service.net.write_now import IN_A_ROW, write_now
from service.main import hypercorn_config


def node_config():
    """The node's own Hypercorn settings, on a free loopback port."""
    return hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))


_NODE = node_config()
KEEP_ALIVE_S = _NODE.keep_alive_timeout  # 5 s
GRACE_S = _NODE.graceful_timeout  # 10 s: what a request in flight gets at shutdown
BIG = bytes(range(256)) * 16384  # 4 MiB: more than a socket takes at once
HUGE = BIG * 8  # 32 MiB: more than both ends' socket buffers hold


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    await receive()  # the request's (empty) body
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await trio.sleep(10)
        await send({"type": "http.response.body", "body": b"late", "more_body": False})
        return
    if scope["path"] in ("/many", "/big", "/huge"):  # a streamed body: many chunks, or one larger than a socket holds
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/big":
            await send({"type": "http.response.body", "body": BIG, "more_body": True})
        elif scope["path"] == "/huge":
            await send({"type": "http.response.body", "body": HUGE, "more_body": True})
        else:
            for i in range(3 * IN_A_ROW):
                await send({"type": "http.response.body", "body": b"c%03d" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if scope["path"] == "/slow":
        await trio.sleep(3 * KEEP_ALIVE_S)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def served(nursery: trio.Nursery, config=None, shutdown: trio.Event | None = None) -> int:
    """The port of Hypercorn serving `app` with the node's connection class, under `config`
    (the node's settings when None), until `shutdown` is set (never when None)."""
    install()
    trigger = shutdown.wait if shutdown is not None else trio.sleep_forever
    binds = await nursery.start(lambda task_status: serve(app, config or node_config(), shutdown_trigger=trigger,
                                                          task_status=task_status))
    return int(binds[0].rsplit(":", 1)[1])


@pytest.fixture
async def server(nursery):
    """(port, shutdown event) of Hypercorn serving `app` with the node's connection class."""
    shutdown = trio.Event()
    return await served(nursery, shutdown=shutdown), shutdown


async def answer(stream: trio.SocketStream) -> bytes:
    """One whole response with a 2-byte body (or b"" when the server closed first)."""
    buf = b""
    while not buf.endswith(b"\r\n\r\nok"):
        data = await stream.receive_some()
        if not data:
            return buf
        buf += data
    return buf


async def closed_at(stream: trio.SocketStream) -> float:
    """The (virtual) time the server closed `stream`."""
    while await stream.receive_some():
        pass
    return trio.current_time()


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()


def test_the_node_serves_with_this_connection_class():
    install()
    assert hypercorn.trio.run.TCPServer is TCPServer


async def test_an_idle_connection_closes_after_the_keep_alive_timeout(server, autojump_clock):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/"))
        assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t0 = trio.current_time()
        await trio.sleep(KEEP_ALIVE_S - 1)  # idle, but not for long enough: still served
        await s.send_all(get("/"))
        assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t1 = trio.current_time()
        assert t1 - t0 >= KEEP_ALIVE_S - 1
        assert await closed_at(s) - t1 == pytest.approx(KEEP_ALIVE_S, abs=0.01)


async def test_a_connection_the_client_ends_is_closed_at_once(server, autojump_clock):
    """The client ends its sending after an answer: the server closes its side then, not
    at the keep-alive timeout (it held the socket, in CLOSE_WAIT, for those 5 s)."""
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/"))
        assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t0 = trio.current_time()
        await s.send_eof()
        assert await closed_at(s) - t0 < 0.01


async def test_a_connection_the_client_closes_ends_its_task_at_once(server, autojump_clock, ended):
    """As Cog sends a webhook: a new connection, one request, closed by the client once it
    has the answer. The server's connection task ends with it, at the same (virtual) time."""
    port, _ = server
    for _ in range(3):
        s = await trio.open_tcp_stream("127.0.0.1", port)
        await s.send_all(get("/"))
        assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t0 = trio.current_time()
        await s.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert len(ended) == 1 and ended.pop() - t0 < 0.01
    # a connection the client leaves open still waits out its keep-alive time
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/"))
        await answer(s)
        t0 = trio.current_time()
        await trio.testing.wait_all_tasks_blocked()
        assert ended == []
        assert await closed_at(s) - t0 == pytest.approx(KEEP_ALIVE_S, abs=0.01)


@pytest.fixture
def ended(monkeypatch) -> list[float]:
    """The (virtual) times the server's connection tasks ended, in order."""
    times: list[float] = []
    run = TCPServer.run

    async def tracked(self):
        try:
            await run(self)
        finally:
            times.append(trio.current_time())

    monkeypatch.setattr(TCPServer, "run", tracked)
    return times


def waiting_bytes(stream: trio.SocketStream) -> int:
    """Bytes the kernel holds for the client, not yet read (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


async def assert_reset(stream: trio.SocketStream) -> None:
    """The server reset the connection: what the client had not read is gone with it."""
    with pytest.raises(trio.BrokenResourceError):
        while await stream.receive_some():
            pass


async def test_a_client_that_takes_nothing_of_an_answer_is_reset_after_the_stall_bound(server, settling_clock, ended):
    """It asked for a large body and reads nothing: the server's write waited for ever (the
    connection and its descriptor held until the node stopped). Now the connection ends
    SEND_STALL_S after the client last took anything, with a reset."""
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/huge"))
        t0 = last = trio.current_time()
        had = 0
        with trio.fail_after(3 * SEND_STALL_S):
            while not ended:
                await trio.sleep(1)
                # what the kernel took for the client (nothing is read): it fills both
                # sockets' buffers in real time, and on a busy machine may still be doing
                # so when this clock jumps
                if (now_has := waiting_bytes(s)) != had:
                    had, last = now_has, trio.current_time()
        assert ended[0] - t0 >= SEND_STALL_S - 0.5
        # the write is judged over each SEND_STALL_S: it ends at the end of the first whole
        # one in which the client took nothing (the first, when the kernel was done at once)
        bound = SEND_STALL_S if last - t0 <= 1 else 2 * SEND_STALL_S
        assert ended[0] - last <= bound + 5
        await assert_reset(s)


async def test_a_slow_reader_that_keeps_taking_gets_the_whole_answer(server, settling_clock, ended):
    """A slow reader that keeps taking (1 MiB every SEND_STALL_S - 5 s, above MIN_RATE)
    keeps its connection and gets the whole body, though the server's write waits far
    longer than the bound."""
    port, _ = server
    step = 1024 * 1024
    assert step / (SEND_STALL_S - 5) > MIN_RATE
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/huge"))
        got, whole = b"", None
        while whole is None or len(got) < whole:
            await trio.sleep(SEND_STALL_S - 5)
            taken = 0
            while taken < step and (whole is None or len(got) < whole):
                data = await s.receive_some(step - taken)
                assert data, "the server closed the connection"
                taken += len(data)
                got += data
                if whole is None and b"\r\n\r\n" in got:  # head, the chunk's size line, HUGE, the end
                    head_end = got.index(b"\r\n\r\n") + 4
                    whole = head_end + len(b"%x\r\n" % len(HUGE)) + len(HUGE) + len(b"\r\n0\r\n\r\n")
        assert got.endswith(HUGE[-1024:] + b"\r\n0\r\n\r\n")
        assert trio.current_time() > 4 * SEND_STALL_S  # it took far longer than the bound


async def test_a_reader_that_takes_too_little_is_reset(server, settling_clock, ended):
    """1 KiB every SEND_STALL_S - 5 s is less than MIN_RATE: cut within two periods."""
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/huge"))
        t0 = trio.current_time()
        with trio.fail_after(5 * SEND_STALL_S):
            while not ended:
                await trio.sleep(SEND_STALL_S - 5)
                await s.receive_some(1024)
        assert SEND_STALL_S - 0.5 <= ended[0] - t0 <= 2 * SEND_STALL_S + 5
        await assert_reset(s)


async def tls_server(nursery: trio.Nursery, tmp_path: Path) -> tuple[int, ssl.SSLContext]:
    """(port, a client's TLS context) of Hypercorn serving `app` over TLS with the node's
    connection class, a trustme certificate."""
    import trustme

    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "node.pem"))
    config = node_config()
    config.certfile = config.keyfile = str(tmp_path / "node.pem")
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return await served(nursery, config), client_ctx


async def test_over_tls_a_client_that_takes_nothing_is_reset_at_the_bound_of_the_write(settling_clock, ended, tmp_path):
    """Over TLS the bound is on the whole write (trio's TLS write cannot be watched part by
    part): SEND_STALL_S plus what was queued and the write itself at MIN_RATE."""
    async with trio.open_nursery() as nursery:
        port, client_ctx = await tls_server(nursery, tmp_path)
        async with await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=client_ctx) as s:
            await s.send_all(get("/huge"))
            t0 = trio.current_time()
            bound = SEND_STALL_S + 2 * len(HUGE) / MIN_RATE  # the body with TLS's framing, and what was queued
            await trio.sleep(bound)  # one jump of the clock to the server's bound, one to here
            assert ended and SEND_STALL_S < ended[0] - t0 < bound
        nursery.cancel_scope.cancel()


async def test_over_tls_a_close_the_client_takes_nothing_of_is_reset_at_the_stall_bound(settling_clock, ended, tmp_path,
                                                                                        monkeypatch):
    """The keep-alive timer closes an idle TLS connection with a close_notify, a write: one
    that never goes (a client that reads nothing, its socket full; here a close that never
    returns) held the shielded close for ever. It is reset SEND_STALL_S later."""
    async with trio.open_nursery() as nursery:
        port, client_ctx = await tls_server(nursery, tmp_path)
        async with await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=client_ctx) as s:
            await s.send_all(get("/"))
            assert (await answer(s)).startswith(b"HTTP/1.1 200")
            t0 = trio.current_time()
            monkeypatch.setattr(trio.SSLStream, "aclose", lambda self: trio.sleep_forever())
            await trio.sleep(KEEP_ALIVE_S + SEND_STALL_S + 5)
            assert ended and ended[0] - t0 == pytest.approx(KEEP_ALIVE_S + SEND_STALL_S, abs=1.5)
            monkeypatch.undo()
        nursery.cancel_scope.cancel()


async def test_a_stalled_write_ends_with_the_shutdown_grace(autojump_clock, ended):
    """A shutdown gives connections GRACE_S; a write the client takes nothing of no longer
    holds the node past it (a shielded write kept it from stopping at all)."""
    shutdown = trio.Event()
    with trio.fail_after(3 * SEND_STALL_S):
        async with trio.open_nursery() as nursery:
            port = await served(nursery, shutdown=shutdown)
            s = await trio.open_tcp_stream("127.0.0.1", port)
            await s.send_all(get("/huge"))
            await trio.sleep(2)  # the server's write is waiting for room
            t0 = trio.current_time()
            shutdown.set()
        assert ended and ended[0] - t0 == pytest.approx(GRACE_S, abs=1.5)
        assert GRACE_S < SEND_STALL_S - 2  # so the grace, not the stall bound, ended it
        await s.aclose()


async def test_a_trickled_request_head_is_cut_at_the_keep_alive_timeout(server, autojump_clock):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        t0 = trio.current_time()
        for piece in (b"GET / HT", b"TP/1.1\r\n", b"Host: t\r\n"):  # never complete
            await s.send_all(piece)
            await trio.sleep(1.5)  # each piece in time: the timer runs from the accept
        assert await closed_at(s) - t0 == pytest.approx(KEEP_ALIVE_S, abs=0.01)


async def test_reads_take_no_timeout_scope_when_the_node_sets_no_read_timeout(server, autojump_clock, monkeypatch):
    """Hypercorn wrapped every read in `fail_after(inf)`: none now, and the keep-alive
    timer still bounds an idle connection."""
    assert _NODE.read_timeout is None
    port, _ = server
    scopes: list[float] = []
    fail_after = trio.fail_after

    def counted(seconds, *args, **kwargs):
        scopes.append(seconds)
        return fail_after(seconds, *args, **kwargs)

    monkeypatch.setattr(trio, "fail_after", counted)
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        for _ in range(3):
            await s.send_all(get("/"))
            assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t0 = trio.current_time()
        assert await closed_at(s) - t0 == pytest.approx(KEEP_ALIVE_S, abs=0.01)
    assert math.inf not in scopes  # (the 60 s one is Hypercorn's TLS handshake bound, entered once)


async def test_a_read_timeout_when_set_still_cuts_a_silent_connection(nursery, autojump_clock):
    """A configured `read_timeout` keeps Hypercorn's own read loop, and its bound."""
    config = node_config()
    config.read_timeout = 2
    async with await trio.open_tcp_stream("127.0.0.1", await served(nursery, config)) as s:
        await s.send_all(get("/"))
        assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t0 = trio.current_time()
        assert await closed_at(s) - t0 == pytest.approx(2, abs=0.01)  # before the 5 s keep-alive


async def test_a_request_longer_than_the_timeout_is_answered(server, autojump_clock):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        t0 = trio.current_time()
        await s.send_all(get("/slow"))
        assert (await answer(s)).startswith(b"HTTP/1.1 200")
        t1 = trio.current_time()
        assert t1 - t0 == pytest.approx(3 * KEEP_ALIVE_S, abs=0.01)
        assert await closed_at(s) - t1 == pytest.approx(KEEP_ALIVE_S, abs=0.01)  # idle again from the answer


async def test_shutdown_closes_idle_connections_at_once_and_busy_ones_after_their_answer(server, autojump_clock):
    port, shutdown = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as idle, \
            await trio.open_tcp_stream("127.0.0.1", port) as busy:
        await busy.send_all(get("/slow"))
        await trio.sleep(7)
        await idle.send_all(get("/"))
        await answer(idle)
        await trio.sleep(1)  # idle for 1 s
        slow_left = 3 * KEEP_ALIVE_S - 8  # /slow answers 3 timeouts after its request: 7 s from now
        assert slow_left < GRACE_S  # within the grace a busy connection gets at shutdown
        t0 = trio.current_time()
        shutdown.set()
        assert await closed_at(idle) - t0 < 0.01
        got = await answer(busy)
        assert got.startswith(b"HTTP/1.1 200"), got
        assert trio.current_time() - t0 == pytest.approx(slow_left, abs=0.01)
        assert await closed_at(busy) - trio.current_time() < 0.01


class Writes(list):
    """Every write that reached a socket (the client's among them); `stepped`, those that
    waited for room (a scheduler step each: the client's through trio's `send_all`, the
    server's through `_send_rest`) rather than going at once."""

    def __init__(self) -> None:
        super().__init__()
        self.stepped: list[bytes] = []


@pytest.fixture
def writes(monkeypatch) -> Writes:
    seen = Writes()
    send_all = trio.SocketStream.send_all

    async def counted(self, data):
        seen.append(bytes(data))
        seen.stepped.append(bytes(data))
        await send_all(self, data)

    def counted_now(sock, data):
        n = write_now(sock, data)
        seen.append(bytes(data[:n]))
        return n

    send_rest = TCPServer._send_rest

    async def counted_rest(self, data):
        seen.stepped.append(bytes(data))
        await send_rest(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", counted)
    monkeypatch.setattr(TCPServer, "_send_rest", counted_rest)
    monkeypatch.setattr(connection, "write_now", counted_now)
    return seen


async def test_a_sized_response_goes_in_one_write(server, autojump_clock, writes):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/"))
        await answer(s)
        answers = [w for w in writes if w.startswith(b"HTTP/1.1")]
        assert len(answers) == 1 and answers[0].endswith(b"\r\n\r\nok"), writes
        assert len(writes) == 2, writes  # the request, the answer: no empty write for the body's end


async def chunked_body(stream: trio.SocketStream) -> bytes:
    """A chunked response's body, read to its end (de-chunked)."""
    buf = b""
    while not buf.endswith(b"\r\n0\r\n\r\n"):
        data = await stream.receive_some()
        assert data, buf[-200:]
        buf += data
    body, rest = b"", buf.partition(b"\r\n\r\n")[2]
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return body
        body, rest = body + rest[:size], rest[size + 2:]


async def test_answers_go_out_without_send_all_while_the_socket_has_room(server, autojump_clock, writes):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/"))
        await answer(s)
        await s.send_all(get("/many"))
        body = await chunked_body(s)
    assert body == b"".join(b"c%03d" % i for i in range(3 * IN_A_ROW))
    server_writes = [w for w in writes.stepped if not w.startswith(b"GET ")]
    # every IN_A_ROW-th write takes trio's send_all (and its step); the rest go at once
    assert len(server_writes) == (3 * IN_A_ROW + 3) // (IN_A_ROW + 1), writes.stepped


async def test_a_body_larger_than_the_socket_takes_arrives_whole_at_a_slow_reader(server, autojump_clock, writes):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(get("/big"))
        await trio.sleep(5)  # the server has filled the socket and waits for room
        assert any(w.endswith(BIG[-100:] + b"\r\n") for w in writes.stepped)  # the rest waited for room
        assert await chunked_body(s) == BIG


async def test_a_streamed_response_sends_its_head_at_once(server, autojump_clock):
    port, _ = server
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        t0 = trio.current_time()
        await s.send_all(get("/stream"))
        head = await s.receive_some()
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
        assert trio.current_time() - t0 < 0.01  # not held for the body, 10 s later
        rest = b""
        while not rest.endswith(b"0\r\n\r\n"):
            rest += await s.receive_some()
        assert b"late" in rest and trio.current_time() - t0 == pytest.approx(10, abs=0.01)


@pytest.mark.parametrize("data, sized", [
    (b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\n", True),
    (b"HTTP/1.1 204 \r\nContent-Length: 0\r\nserver: x\r\n\r\n", True),
    (b"HTTP/1.1 200 \r\ntransfer-encoding: chunked\r\n\r\n", False),
    (b"HTTP/1.1 100 \r\n\r\n", False),
    (b"ok", False),
    (b"HTTP/1.1 200 \r\nx: 1\r\n\r\n\r\ncontent-length: 2\r\n", False),  # past the head: a body's bytes
])
def test_which_heads_wait_for_their_body(data, sized):
    assert _sized_head(data) is sized


async def test_a_connection_the_server_closes_ends_its_sending_once_then_closes(server, autojump_clock, monkeypatch):
    """Hypercorn closed such a connection twice (an end of sending and a close each time,
    a scheduler step each), and trio's listener closed its stream a third time: the end of
    sending is made once now and the stream is not closed again, and the client still reads
    the whole answer, then the end of the stream."""
    port, _ = server
    eofs: list[int] = []
    acloses: list[trio.SocketStream] = []
    shutdown = trio_socket._SocketType.shutdown  # the class of trio's sockets
    aclose = trio.SocketStream.aclose

    def counted_shutdown(self, flag):
        if flag == socket.SHUT_WR:
            eofs.append(self.fileno())
        return shutdown(self, flag)

    async def counted_aclose(self):
        acloses.append(self)
        await aclose(self)

    monkeypatch.setattr(trio_socket._SocketType, "shutdown", counted_shutdown)
    monkeypatch.setattr(trio.SocketStream, "aclose", counted_aclose)
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        got = b""
        while data := await s.receive_some():
            got += data
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\nok"), got
        await trio.sleep(0.1)  # the server's connection task has ended
    assert len(eofs) == 1, eofs
    assert [c for c in acloses if c is not s] == []  # only the client's own close


def test_trios_listener_runs_each_connection_in_run_handler():
    """trio's accept loop looks its `_run_handler` up by name at each connection (trio
    0.35); `install` puts the node's there."""
    install()
    assert trio_listeners._run_handler is connection.run_handler
    assert "_run_handler" in trio_listeners._serve_one_listener.__code__.co_names


async def test_run_handler_closes_a_stream_left_open_and_leaves_a_closed_one(monkeypatch):
    acloses: list[trio.SocketStream] = []
    aclose = trio.SocketStream.aclose

    async def counted(self):
        acloses.append(self)
        await aclose(self)

    monkeypatch.setattr(trio.SocketStream, "aclose", counted)
    for close_it in (False, True):
        a, b = trio.socket.socketpair()
        stream = trio.SocketStream(a)

        async def handler(s):
            if close_it:
                s.socket.close()

        await connection.run_handler(stream, handler)
        b.close()
        assert stream.socket.fileno() == -1
        assert (stream in acloses) is not close_it


async def test_messages_for_the_app_are_put_at_once_while_its_queue_has_room(autojump_clock):
    install()
    assert hypercorn.trio.tcp_server.TaskGroup is TaskGroup
    cfg = node_config()
    got: list = []
    reading = trio.Event()

    async def slow_app(scope, receive, send, sync_spawn, call_soon):
        await reading.wait()
        while len(got) < cfg.max_app_queue_size + 1:
            got.append(await receive())

    async def sent(message):
        pass

    async with TaskGroup() as group:
        put = await group.spawn_app(slow_app, cfg, {"type": "http"}, sent)
        with trio.testing.assert_no_checkpoints():
            for i in range(cfg.max_app_queue_size):
                await put({"type": "http.request", "body": b"%d" % i, "more_body": True})
        t0 = trio.current_time()
        async with trio.open_nursery() as n:
            n.start_soon(put, {"type": "http.disconnect"})  # the queue is full: this one waits
            await trio.sleep(1)
            assert len(got) == 0
            reading.set()
    assert [m.get("body") for m in got[:-1]] == [b"%d" % i for i in range(cfg.max_app_queue_size)]
    assert got[-1] == {"type": "http.disconnect"} and trio.current_time() - t0 == pytest.approx(1)

"""The hook gate's child refusing a body it did not read to its end (413 over the limit,
408 past its time) while the engine keeps sending it: Hypercorn keeps putting the body's
chunks on the request's queue (10 deep) and puts the disconnect there as the answer ends,
so the refused rest must still be taken, or the connection is held for good."""

from __future__ import annotations

import contextlib
import json
import socket

import trio

from service.hookgate import child, gate, wire
from service.hookgate.child import Link

from engine_support import engine_node
from test_hook_gate import gate_url

LIMIT = 1000
TOO_LARGE = "The request body is too large."
CHUNK = b"190\r\n" + b" " * 400 + b"\r\n"  # one chunk of 400 bytes


async def ended(stream: trio.SocketStream) -> bytes:
    """All the gate sends until it ends the connection (its end of stream, or a reset
    when it closed with some of the refused body unread)."""
    got = b""
    with trio.fail_after(10):  # a held connection never ends
        with contextlib.suppress(trio.BrokenResourceError):
            while chunk := await stream.receive_some():
                got += chunk
    await stream.aclose()
    return got


def status_and_message(answer: bytes) -> tuple[bytes, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], json.loads(body)["error"]["message"]


async def test_a_body_refused_as_it_is_read_does_not_hold_its_connection(tmp_path, monkeypatch):
    monkeypatch.setattr(gate, "UPLOAD_BODY_LIMIT", LIMIT)
    async with engine_node(tmp_path, "", engine_hooks_listen="127.0.0.1:0") as n:
        url = gate_url(n, "job-1")
        host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
        path = url.split(f"{host}:{port}", 1)[1]
        stream = await trio.open_tcp_stream(host, int(port))
        # no declared length: refused once the read passes the limit, 97 chunks behind it
        await stream.send_all(f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                              + CHUNK * 100)
        assert status_and_message(await ended(stream)) == (b"HTTP/1.1 413 ", TOO_LARGE)


async def test_a_refused_body_still_coming_while_the_node_answers_does_not_hold_its_connection(settling_clock,
                                                                                              monkeypatch):
    """The child's own `run` in this process, the test as the node: the answer is held back
    until the body's rest has filled the request's queue."""
    links: list[child.Link] = []  # the child's end, closed here (a child process just exits)
    monkeypatch.setattr(child, "Link", lambda stream: links.append(Link(stream)) or links[-1])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    ours, theirs = socket.socketpair()
    start = {"listen_fd": listener.detach(), "link_fd": theirs.detach(), "body_limit": LIMIT,
             "body_timeout_s": 120.0, "keep_alive_s": 5.0, "backlog": 16}
    node = gate.HookGate(socket.socket(), None, type("M", (), {"answered": lambda *a: None})(), LIMIT)
    link = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    buf = bytearray()

    async def asked() -> tuple:
        while (got := wire.take_request(buf)) is None:
            buf.extend(await link.receive_some())
        return got

    async def refused(head: bytes, kind: int, after: float) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(head)
        sent = trio.current_time()
        request = await asked()
        assert (request[1], round(trio.current_time() - sent, 1)) == (kind, after)
        for _ in range(20):  # each a read of its own: a message each on the request's queue
            await stream.send_all(b" " * 40)  # 800 in all: the body never completes
            await trio.sleep(0.01)
        await link.send_all(node.answer(*request))
        return await ended(stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child.run, start)
        declared = b"POST /engine-hooks/a/b HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
        assert status_and_message(await refused(declared, wire.TOO_LARGE, 0)) == (b"HTTP/1.1 413 ", TOO_LARGE)
        timed_out = await refused(declared.replace(b"100000", b"900") + b"{", wire.TIMED_OUT, 120)
        assert timed_out.startswith(b"HTTP/1.1 408 "), timed_out
        assert json.loads(timed_out.partition(b"\r\n\r\n")[2]) == {
            "error": "Request timeout", "message": "Request took longer than 120 seconds to process"}
        await link.aclose()  # the node gone: the child ends
    await links[0].stream.aclose()
    node.sock.close()

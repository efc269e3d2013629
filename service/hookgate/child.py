"""The hook gate's child process: `python -m service.hookgate.child`, started by the node.

Hypercorn (with the node's connection class, service/http/connection.py) accepts on the
listening socket the node made, reads each request (its body bounded in size and time) and
hands it to the node over the local socket; the node's answer goes back as it is. The
start message (one JSON line on stdin) names the two inherited descriptors and the
bounds. The child ends when the node's end of the local socket closes.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from service.descriptors import quiet_accept_loop
from service.digits import ascii_int
from service.hookgate import wire
from service.http.connection import install

READ = 256 * 1024
QUEUE = 256  # requests waiting to be written to the node: handlers wait beyond it


class Link:
    """The child's end of the local socket: requests written in order (several a write when
    they queue), answers matched to their requests by sequence number."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.seq = 0
        self.waiting: dict[int, list[Any]] = {}  # seq -> [event, answer]
        self.out, self._queued = trio.open_memory_channel[bytes](QUEUE)

    async def ask(self, kind: int, method: str, path: str, headers: wire.Headers,
                  body: bytes) -> tuple[int, wire.Headers, bytes]:
        seq = self.seq = (self.seq + 1) & 0xFFFFFFFF  # the frame's field is 32 bits
        slot = self.waiting[seq] = [trio.Event(), None]
        try:
            await self.out.send(wire.request(seq, kind, method, path, headers, body))
            await slot[0].wait()
        finally:
            self.waiting.pop(seq, None)
        return slot[1]

    async def write(self) -> None:
        async for frame in self._queued:
            frames = [frame]
            while True:
                try:
                    frames.append(self._queued.receive_nowait())
                except trio.WouldBlock:
                    break
            await self.stream.send_all(b"".join(frames))

    async def read(self) -> None:
        """Answers until the node's end closes."""
        buf = bytearray()
        while data := await self.stream.receive_some(READ):
            buf += data
            while (got := wire.take_answer(buf)) is not None:
                slot = self.waiting.get(got[0])
                if slot is not None:
                    slot[1] = got[1:]
                    slot[0].set()


def make_app(link: Link, limit: int, body_timeout: float):
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope["type"] != "http":
            return
        read = await _read_body(scope, receive, limit, body_timeout)
        if read is None:  # the client went away: nobody to answer
            return
        kind, body = read
        headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        if kind == wire.COMPLETE:
            return await _answer(send, await link.ask(kind, scope["method"], scope["path"], headers, body))
        # A body not read to its end: Hypercorn puts its rest on the request's queue, and the
        # disconnect as the answer ends; with nobody taking them that put waits for good
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, receive)
            await _answer(send, await link.ask(kind, scope["method"], scope["path"], headers, body))
            nursery.cancel_scope.cancel()
    return app


async def _answer(send: Any, answer: tuple[int, wire.Headers, bytes]) -> None:
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _drain(receive: Any) -> None:
    while (await receive())["type"] == "http.request":
        pass


async def _read_body(scope: Any, receive: Any, limit: int, body_timeout: float) -> tuple[int, bytes] | None:
    """(kind, body): the whole body, or why not (a declared or read length over `limit`,
    or a body still coming after `body_timeout`); None when the client went away."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-length" and (ascii_int(value, limit + 1) or 0) > limit:
            return wire.TOO_LARGE, b""
    parts, size = [], 0
    with trio.move_on_after(body_timeout):
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return wire.TOO_LARGE, b""
            parts.append(chunk)
            if not message.get("more_body", False):
                return wire.COMPLETE, b"".join(parts)
    return wire.TIMED_OUT, b""


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def run(start: dict[str, Any]) -> None:
    install()
    quiet_accept_loop()  # out of descriptors: one line a while, as the node's own accept loop
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=start["link_fd"])))
    link = Link(stream)
    cfg = Config()
    cfg.bind = [f"fd://{start['listen_fd']}"]
    cfg.accesslog = None  # a hook's path carries its token: never logged
    cfg.errorlog = logging.getLogger("hypercorn.error")
    cfg.keep_alive_timeout = start["keep_alive_s"]
    cfg.graceful_timeout = 1
    cfg.backlog = start["backlog"]  # Hypercorn listens on the socket again, with its own backlog unless told
    app = make_app(link, start["body_limit"], start["body_timeout_s"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.write)
        nursery.start_soon(serve, app, cfg)
        await link.read()
        nursery.cancel_scope.cancel()  # the node is gone: so is every answer


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s hook gate: %(message)s")
    start = json.loads(sys.stdin.readline())
    trio.run(run, start)


if __name__ == "__main__":
    main()

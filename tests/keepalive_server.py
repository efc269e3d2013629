"""A counting HTTP/1.1 keep-alive server on loopback, for the engine client's tests
(tests/test_engines_transport.py, tests/test_engines_http_pool.py) and bench/plain_send.py."""

from __future__ import annotations

from functools import partial

import trio


class Server:
    """An HTTP/1.1 keep-alive server on loopback that counts the connections it accepts and
    reads each request's body (Content-Length), keeping its size in `bodies`; with `hold`,
    answers nothing until that many requests wait (so they are in flight together). Each
    request is answered with `answer` (a 200 `ok` unless set)."""

    def __init__(self, answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") -> None:
        self.answer = answer
        self.accepted = 0
        self.bodies: list[int] = []
        self.hold = 0
        self.waiting = 0
        self.go = trio.Event()
        self.port = 0

    async def serve(self, nursery: trio.Nursery) -> None:
        listeners = await nursery.start(partial(trio.serve_tcp, self.handle, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]

    async def handle(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(buf) < length:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                buf = buf[length:]
                self.bodies.append(length)
                if self.hold:
                    self.waiting += 1
                    if self.waiting >= self.hold:
                        self.go.set()
                    await self.go.wait()
                await stream.send_all(self.answer)
        except trio.BrokenResourceError:
            pass

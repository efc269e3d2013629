"""A recording HTTPS receiver for account-webhook tests, and a node wired to trust it.

`Receiver` listens on 127.0.0.1:0 with a certificate from its own trustme CA and records
every request byte for byte (arrival time in trio time). The path picks the answer:

    /ok              200
    /status/{code}   that status
    /sleep/{secs}    200 after that many seconds
    /hang            never answers
    /gate/{name}     waits until `release(name)`, then 200

`running_node(tmp_path, rx)` starts a node (real time; threaded writer as in production unless asked) that trusts the
receiver's CA and may call loopback, and stops its actors before closing storage, so a
second node can open the same data directory (restart tests).
"""

from __future__ import annotations

import json
import ssl
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import trio
import trustme

from conftest import start_node


@dataclass
class Hit:
    target: str  # path and query as sent
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # trio.current_time() when the whole request had arrived

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def json(self) -> dict:
        return json.loads(self.body)


class Receiver:
    def __init__(self, tmp_path) -> None:
        self.ca = trustme.CA()
        self.ca_file = str(tmp_path / "receiver-ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.port = 0
        self.hits: list[Hit] = []
        self.gates: dict[str, trio.Event] = {}
        self._arrived = trio.Event()

    def url(self, path: str = "/ok") -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def seen(self, path: str | None = None) -> list[Hit]:
        return [h for h in self.hits if path is None or h.path == path]

    def release(self, name: str) -> None:
        self.gates.setdefault(name, trio.Event()).set()

    async def wait_for(self, count: int, path: str | None = None, timeout: float = 5.0) -> list[Hit]:
        with trio.fail_after(timeout):
            while len(self.seen(path)) < count:
                await self._arrived.wait()
        return self.seen(path)

    async def start(self, nursery: trio.Nursery) -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
        listeners = await nursery.start(partial(trio.serve_ssl_over_tcp, self._handle, 0, ctx,
                                                host="127.0.0.1"))
        self.port = listeners[0].transport_listener.socket.getsockname()[1]

    async def _handle(self, stream: trio.SSLStream) -> None:
        try:
            request = await _read(stream)
            if request is None:
                return
            target, headers, body = request
            hit = Hit(target, headers, body, trio.current_time())
            path = hit.path
            self.hits.append(hit)
            self._arrived.set()
            self._arrived = trio.Event()
            status = 200
            if path.startswith("/status/"):
                status = int(path.rsplit("/", 1)[1])
            elif path.startswith("/sleep/"):
                await trio.sleep(float(path.rsplit("/", 1)[1]))
            elif path == "/hang":
                await trio.sleep_forever()
            elif path.startswith("/gate/"):
                await self.gates.setdefault(path.rsplit("/", 1)[1], trio.Event()).wait()
            reason = {200: "OK", 500: "Internal Server Error"}.get(status, "Whatever")
            await stream.send_all(f"HTTP/1.1 {status} {reason}\r\nContent-Length: 2\r\n"
                                  "Connection: close\r\n\r\nok".encode())
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass


async def _read(stream):
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        data = await stream.receive_some(65536)
        if not data:
            return None
        body += data
    return path, headers, body


@asynccontextmanager
async def receiver(tmp_path):
    async with trio.open_nursery() as nursery:
        rx = Receiver(tmp_path)
        await rx.start(nursery)
        yield rx
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def running_node(tmp_path, rx: Receiver, *, inline: bool = False, **overrides):
    """A node that trusts `rx`; its actors stop (and storage closes) when the block ends."""
    async with trio.open_nursery() as nursery:
        settings = dict(test_mode=True, webhook_allow_private=True, webhook_ca_file=rx.ca_file) | overrides
        node = await start_node(nursery, tmp_path, inline=inline, **settings)
        try:
            yield node
        finally:
            nursery.cancel_scope.cancel()
    node.store.close()


# -- the receiver itself ------------------------------------------------------------------------
async def test_receiver_records_raw_bytes_and_answers_by_path(tmp_path):
    from service.net.client import Sender

    async with receiver(tmp_path) as rx:
        sender = Sender(allow_private=True, ca_file=rx.ca_file)
        ok = await sender.post(rx.url("/ok"), b'{"a":1}', {"Content-Type": "application/json"})
        bad = await sender.post(rx.url("/status/500"), b"x", {})
        slow = await sender.post(rx.url("/hang"), b"x", {}, timeout=0.3)
    assert (ok.is_delivered, ok.status_code) == (True, 200)
    assert (bad.is_delivered, bad.status_code, bad.error) == (False, 500, "500 Internal Server Error")
    assert (slow.status_code, slow.error_class) == (None, "timeout")
    assert [h.path for h in rx.hits] == ["/ok", "/status/500", "/hang"]
    assert rx.hits[0].body == b'{"a":1}' and rx.hits[0].headers["content-type"] == "application/json"

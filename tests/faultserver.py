"""A misbehaving HTTP(S) receiver for outgoing-HTTP tests (reliability.md §6.5).

Everything listens on 127.0.0.1, port 0. The URL path picks the behaviour:

    /ok                 200 with a short body
    /status/{code}      that status
    /hang               read the request, never answer (ends when the client leaves)
    /drip               200 headers, then 1 body byte per second
    /slow-headers       status line, then one header byte every 0.2 s, forever
    /reset              read the request, then RST
    /close-early        read the request, then close without answering
    /redirect?to=URL    302 to URL
    /huge               200 with a 100 MB body, streamed
    /garbage            non-HTTP bytes, then close
    /chunked-forever    200, chunked body that never ends
    /http10             HTTP/1.0 answer without Content-Length
    /cookie             200 that sets a cookie

Four listeners share those behaviours: plain HTTP, HTTPS with a certificate
for localhost/127.0.0.1/::1 from `fs.ca`, HTTPS with a `fs.ca` certificate
for "wrong.example" only, and HTTPS with a certificate from an untrusted CA.
Every request is recorded in `fs.requests`.

    async with fault_server(nursery) as fs:
        fs.https_url("/ok"); fs.requests; fs.ca

`canary(nursery)` is a listener that only counts connections.
"""

from __future__ import annotations

import http
import socket
import ssl
import struct
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import parse_qs, urlsplit

import trio
import trustme

HEAD_LIMIT = 64 * 1024
HUGE_SIZE = 100_000_000
CHUNK = 64 * 1024


@dataclass
class Recorded:
    """One request as the server saw it."""

    listener: str  # "http", "https", "wrong_host" or "untrusted"
    connected_at: float  # trio.current_time() at accept
    time: float  # trio.current_time() when the whole request had arrived
    method: str
    target: str  # path and query as sent
    headers: list[tuple[str, str]]
    body: bytes
    bytes_sent: int = 0  # response bytes the server managed to send
    finished: trio.Event = field(default_factory=trio.Event)  # handler is done

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


class FaultServer:
    def __init__(self) -> None:
        self.ca = trustme.CA()
        self.requests: list[Recorded] = []
        self.sni: list[tuple[str, str | None]] = []  # (listener, server name) per handshake
        self.ports: dict[str, int] = {}
        self._arrived = trio.Event()

    def url(self, listener: str, path: str, host: str = "127.0.0.1") -> str:
        scheme = "http" if listener == "http" else "https"
        return f"{scheme}://{host}:{self.ports[listener]}{path}"

    def http_url(self, path: str) -> str:
        return self.url("http", path)

    def https_url(self, path: str, host: str = "127.0.0.1") -> str:
        return self.url("https", path, host)

    def wrong_host_url(self, path: str) -> str:
        return self.url("wrong_host", path)

    def untrusted_url(self, path: str) -> str:
        return self.url("untrusted", path)

    def write_ca(self, path) -> str:
        """Write the CA certificate as PEM (for Sender's ca_file); returns the path."""
        self.ca.cert_pem.write_to_path(str(path))
        return str(path)

    def seen(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(self, count: int, path: str | None = None) -> None:
        """Wait until `count` requests (to `path`, if given) have arrived."""
        while len(self.seen(path) if path else self.requests) < count:
            await self._arrived.wait()

    def _tls_context(self, name: str, cert: trustme.LeafCert) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no CA store to load: fast
        cert.configure_cert(ctx)
        ctx.sni_callback = lambda _obj, server_name, _ctx: self.sni.append((name, server_name))
        return ctx

    def _listener_setup(self) -> dict[str, ssl.SSLContext | None]:
        stranger = trustme.CA()
        return {
            "http": None,
            "https": self._tls_context("https", self.ca.issue_cert("localhost", "127.0.0.1", "::1")),
            "wrong_host": self._tls_context("wrong_host", self.ca.issue_cert("wrong.example")),
            "untrusted": self._tls_context("untrusted", stranger.issue_cert("localhost", "127.0.0.1")),
        }

    async def _handle(self, name: str, stream: trio.abc.Stream) -> None:
        connected_at = trio.current_time()
        try:
            if isinstance(stream, trio.SSLStream):
                await stream.do_handshake()
            parsed = await _read_request(stream)
            if parsed is None:
                return
            method, target, headers, body = parsed
            record = Recorded(name, connected_at, trio.current_time(), method, target, headers, body)
            self.requests.append(record)
            self._arrived.set()
            self._arrived = trio.Event()
            try:
                await _behave(stream, record)
            finally:
                record.finished.set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass


async def _read_request(stream):
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > HEAD_LIMIT:
            return None
        data = await stream.receive_some(CHUNK)
        if not data:
            return None
        buffer += data
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers.append((key.strip(), value.strip()))
    length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
    while len(body) < length:
        data = await stream.receive_some(CHUNK)
        if not data:
            return None
        body += data
    return method, target, headers, body


async def _send(stream, record: Recorded, data: bytes) -> None:
    await stream.send_all(data)
    record.bytes_sent += len(data)


def _head(status: int, headers: dict[str, str], version: str = "HTTP/1.1") -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Whatever"
    lines = [f"{version} {status} {phrase}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _simple(stream, record, status: int, body: bytes = b"", extra=None) -> None:
    headers = {"Content-Length": str(len(body)), "Connection": "close", **(extra or {})}
    await _send(stream, record, _head(status, headers) + body)
    await stream.aclose()


def _raw_socket(stream) -> trio.socket.SocketType:
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    return stream.socket


async def _behave(stream, record: Recorded) -> None:
    path = record.path
    if path == "/ok":
        await _simple(stream, record, 200, b"ok")
    elif path.startswith("/status/"):
        await _simple(stream, record, int(path.rsplit("/", 1)[1]), b"status")
    elif path == "/hang":
        while await stream.receive_some(CHUNK):
            pass
    elif path == "/drip":
        await _send(stream, record, _head(200, {"Content-Length": "1000"}))
        while True:
            await _send(stream, record, b"x")
            await trio.sleep(1)
    elif path == "/slow-headers":
        await _send(stream, record, b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while True:
            await trio.sleep(0.2)
            await _send(stream, record, b"a")
    elif path == "/reset":
        _raw_socket(stream).setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await trio.aclose_forcefully(stream)
    elif path == "/close-early":
        await trio.aclose_forcefully(stream)
    elif path == "/redirect":
        to = record.query.get("to", ["/ok"])[0]
        await _simple(stream, record, 302, b"", {"Location": to})
    elif path == "/huge":
        await _send(stream, record, _head(200, {"Content-Length": str(HUGE_SIZE)}))
        block = b"h" * CHUNK
        for _ in range(HUGE_SIZE // CHUNK):
            await _send(stream, record, block)
        await _send(stream, record, b"h" * (HUGE_SIZE % CHUNK))
    elif path == "/garbage":
        await _send(stream, record, b"\x00\xffNOT HTTP AT ALL\r\n\x13\x37garbage\r\n\r\n")
        await stream.aclose()
    elif path == "/chunked-forever":
        await _send(stream, record, _head(200, {"Transfer-Encoding": "chunked"}))
        chunk = b"%x\r\n%s\r\n" % (CHUNK, b"c" * CHUNK)
        while True:
            await _send(stream, record, chunk)
    elif path == "/cookie":
        await _simple(stream, record, 200, b"", {"Set-Cookie": "session=secret; Path=/"})
    elif path == "/http10":
        await _send(stream, record, _head(200, {}, version="HTTP/1.0") + b"old school")
        await stream.aclose()
    else:
        await _simple(stream, record, 404, b"no such behaviour")


@asynccontextmanager
async def fault_server(nursery: trio.Nursery):
    """Start a FaultServer in `nursery`; it stops when the block ends."""
    fs = FaultServer()
    scope = trio.CancelScope()

    async def run(task_status=trio.TASK_STATUS_IGNORED):
        with scope:
            async with trio.open_nursery() as inner:
                for name, ctx in fs._listener_setup().items():
                    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
                    fs.ports[name] = listeners[0].socket.getsockname()[1]
                    if ctx is not None:
                        listeners = [trio.SSLListener(l, ctx, https_compatible=True) for l in listeners]
                    await inner.start(trio.serve_listeners, partial(fs._handle, name), listeners)
                task_status.started()

    await nursery.start(run)
    try:
        yield fs
    finally:
        scope.cancel()


class Canary:
    """Counts TCP connections; bound to 127.0.0.1 and, when possible, ::1 on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0
        self.has_ipv6 = False

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        await trio.aclose_forcefully(stream)


@asynccontextmanager
async def canary(nursery: trio.Nursery):
    """Start a Canary in `nursery`; it stops when the block ends."""
    c = Canary()
    scope = trio.CancelScope()

    async def run(task_status=trio.TASK_STATUS_IGNORED):
        with scope:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            c.port = listeners[0].socket.getsockname()[1]
            try:
                listeners += await trio.open_tcp_listeners(c.port, host="::1")
                c.has_ipv6 = True
            except OSError:
                pass
            async with trio.open_nursery() as inner:
                await inner.start(trio.serve_listeners, c._handle, listeners)
                task_status.started()

    await nursery.start(run)
    try:
        yield c
    finally:
        scope.cancel()

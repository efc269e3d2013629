"""A small closed-loop HTTP/1.1 load generator over raw trio sockets (keep-alive), light
enough that the client does not dominate a 2-core machine. Used by the bench scripts."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import trio


@dataclass
class Result:
    requests: int
    seconds: float
    latencies_ms: list[float]
    statuses: dict[int, int]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def pct(self, p: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")

    def summary(self) -> dict:
        return {"rps": round(self.rps, 1), "p50_ms": round(self.pct(0.50), 2), "p99_ms": round(self.pct(0.99), 2),
                "requests": self.requests, "statuses": self.statuses}


async def receive_more(stream, buf: bytearray) -> None:
    """Append what the peer sends next to `buf`; ConnectionError if it closed."""
    chunk = await stream.receive_some(65536)
    if not chunk:
        raise ConnectionError("closed")
    buf += chunk


async def read_head(stream, buf: bytearray) -> bytes:
    """One HTTP/1.1 message's head (start line and headers), taken out of `buf`."""
    while b"\r\n\r\n" not in buf:
        await receive_more(stream, buf)
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    return head


async def read_message(stream, buf: bytearray) -> tuple[bytes, bytes]:
    """One HTTP/1.1 request or response with a Content-Length (or no body): (head, body);
    the rest stays in `buf`."""
    head = await read_head(stream, buf)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(buf) < length:
        await receive_more(stream, buf)
    body = bytes(buf[:length])
    del buf[:length]
    return head, body


async def read_response(stream, buf: bytearray) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length: (status, body); the rest stays in `buf`."""
    head, body = await read_message(stream, buf)
    return int(head.split(None, 2)[1]), body


async def run(host: str, port: int, path: str, *, headers: dict | None = None, connections: int = 10,
              total: int = 2000, seconds: float | None = None) -> Result:
    """`connections` keep-alive connections, each sending its next request as soon as the
    previous answer is in: `total` requests in all, or for `seconds` when given."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}\r\n".encode()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    remaining = [total]
    deadline = None if seconds is None else time.perf_counter() + seconds

    def more() -> bool:
        if deadline is not None:
            return time.perf_counter() < deadline
        remaining[0] -= 1
        return remaining[0] >= 0

    async def worker():
        stream = await trio.open_tcp_stream(host, port)
        buf = bytearray()
        async with stream:
            while more():
                t0 = time.perf_counter()
                await stream.send_all(req)
                status, _ = await read_response(stream, buf)
                latencies.append((time.perf_counter() - t0) * 1000)
                statuses[status] = statuses.get(status, 0) + 1

    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for _ in range(connections):
            n.start_soon(worker)
    return Result(len(latencies), time.perf_counter() - t0, latencies, statuses)


def median(xs):
    return statistics.median(xs)

"""A server-sent events reader over Quart's test client (tests only).

    async with open_stream(node, path, key, last_event_id=None) as s:
        s.status                  # the answer's status code
        frame = await s.next()    # {"id", "event", "data"} or {"comment": text}; None at the end
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import trio


class Stream:
    def __init__(self, conn) -> None:
        self.conn = conn
        self.buf = b""
        self.ended = False

    @property
    def status(self) -> int:
        return self.conn.status_code

    status_code = status

    @property
    def headers(self):
        return self.conn.headers

    async def next(self) -> dict | None:
        while b"\n\n" not in self.buf:
            if self.ended:
                return None
            try:
                self.buf += await self.conn.receive()
            except trio.EndOfChannel:
                self.ended = True
        raw, self.buf = self.buf.split(b"\n\n", 1)
        return parse(raw.decode())

    async def events(self, limit: int = 10_000) -> list[dict]:
        """Every frame that is an event (comments skipped), until the stream ends."""
        out = []
        while len(out) < limit:
            f = await self.next()
            if f is None:
                break
            if "event" in f:
                out.append(f)
        return out

    async def body(self) -> bytes:
        """The rest of an answer that is not a stream (an error body)."""
        chunks = [self.buf]
        while not self.ended:
            try:
                chunks.append(await self.conn.receive())
            except trio.EndOfChannel:
                self.ended = True
        return b"".join(chunks)


def parse(text: str) -> dict:
    if text.startswith(":"):
        return {"comment": text[1:].strip()}
    out: dict = {}
    for line in text.split("\n"):
        name, _, value = line.partition(": ")
        out[name] = value
    if "data" in out:
        out["data"] = json.loads(out["data"])
    return out


@asynccontextmanager
async def open_stream(node, path: str, key: str | None, last_event_id: str | None = None, headers=None):
    h = dict(headers or {})
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    if last_event_id is not None:
        h["Last-Event-ID"] = last_event_id
    path, _, query = path.partition("?")
    async with node.client.request(path, method="GET", headers=h, query_string=_query(query)) as conn:
        await conn.send_complete()
        stream = Stream(conn)
        while conn.status_code is None:  # the answer's start comes before its first body chunk
            try:
                stream.buf += await conn.receive()
            except trio.EndOfChannel:
                stream.ended = True
                break
        try:
            yield stream
        finally:
            if not stream.ended:
                await conn.disconnect()
                # the cancelled answer never sends its last body message, so the test
                # connection's body channel is never closed: close it, or its exit waits forever
                conn._client_send.close()


def _query(text: str) -> dict | None:
    if not text:
        return None
    return dict(part.split("=", 1) for part in text.split("&"))

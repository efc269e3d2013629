"""One server-sent event stream: the current state or the missed events, then live events,
keep-alive comments, an access re-check, and its ends.

The body is an async generator that Quart sends as the response. Its waits are on trio's
clock (keep-alive every KEEPALIVE_S, access re-check every RECHECK_S), so tests drive them
with the mock clock. `yield` never happens inside a cancel scope (trio forbids it in
generators): each wait ends before the event it produced is sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any
from dataclasses import dataclass

import trio

from .hub import Event, Hub
from .limits import Ticket

KEEPALIVE_S = 15.0
RECHECK_S = 30.0


@dataclass(frozen=True)
class Stream:
    """What a route hands over: the topic, how to read the current state (a list of
    `(event name, data)`: read once at open and at each reset), which data ends the stream
    (a final job status, a final run), whether the caller may still read it (key revoked or
    paused: no), and an optional filter on the job source (the project stream)."""

    key: str
    current: Callable[[], list[tuple[str, Mapping[str, Any]]]]  # views' TypedDicts are Mappings
    final: Callable[[str, Mapping[str, Any]], bool]
    allowed: Callable[[], bool]
    source: str | None = None


def frame(event_id: str | None, name: str, data: str) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {data}\n\n".encode()


def _dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"))


async def events(hub: Hub, stream: Stream, last_event_id: str | None,
                 ticket: Ticket | None = None) -> AsyncGenerator[bytes, None]:
    """The stream's frames; `ticket`, its place under the stream limits, is given back at the end."""
    hub.open_streams += 1
    sub = None
    sent: dict[str, str] = {}  # last data sent per status-like event name: no duplicates

    def fresh(name: str, data: str) -> bool:
        if name not in ("status", "run"):
            return True
        if sent.get(name) == data:
            return False
        sent[name] = data
        return True

    try:
        if hub.closed.is_set():
            yield b": the node is shutting down\n\n"
            return
        resume = hub.subscribe(stream.key, hub.parse_id(last_event_id))
        sub = resume.sub
        if last_event_id is None or resume.reset:
            position = hub.position()
            state = stream.current()
            for name, data in state:
                text = _dumps(data)
                if fresh(name, text):
                    yield frame(position, "reset" if resume.reset else name, text)
            if any(stream.final(name, data) for name, data in state):
                return
        else:
            if not resume.backlog and any(stream.final(name, data) for name, data in stream.current()):
                return  # resumed after the end: the client has seen the final event
            for e in resume.backlog:
                if stream.source is None or e.source in (None, stream.source):
                    if fresh(e.name, e.data):
                        yield frame(hub.event_id(e.seq), e.name, e.data)
                if stream.final(e.name, json.loads(e.data)):
                    return
        next_ping = trio.current_time() + KEEPALIVE_S
        next_check = trio.current_time() + RECHECK_S
        while True:
            event: Event | None = None
            ended = False
            with trio.move_on_at(min(next_ping, next_check)):
                try:
                    event = await sub.receive.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    ended = True
            now = trio.current_time()
            if ended:
                if hub.closed.is_set():
                    yield b": the node is shutting down\n\n"
                    return
                # dropped for being too slow: the current state, then live again
                sub = hub.subscribe(stream.key, None).sub
                position = hub.position()
                for name, data in stream.current():
                    sent.pop(name, None)
                    yield frame(position, "reset", _dumps(data))
                    if stream.final(name, data):
                        return
                continue
            if event is not None:
                next_ping = now + KEEPALIVE_S
                if stream.source is None or event.source in (None, stream.source):
                    if fresh(event.name, event.data):
                        yield frame(hub.event_id(event.seq), event.name, event.data)
                if stream.final(event.name, json.loads(event.data)):
                    return
                continue
            if now >= next_check:
                next_check = now + RECHECK_S
                if not stream.allowed():
                    yield b": access ended\n\n"
                    return
            if now >= next_ping:
                next_ping = now + KEEPALIVE_S
                yield b": keep-alive\n\n"
    finally:
        hub.open_streams -= 1
        if ticket is not None:
            ticket.release()
        if sub is not None:
            sub.close()

"""Hypercorn sends an HTTP/1.1 answer's head and its body in one socket write.

Hypercorn 0.18 writes the head when the app starts its answer and the body when the app
sends it: two `send` calls, each of which wakes the client's process. On this project's
job path (a submit, an engine's webhook, every JSON answer) that second send was about a
tenth of the node's CPU (bench/README.md, "Throughput IV"). `install()` makes Hypercorn's
HTTP/1.1 protocol hold the head of an answer that declares its length (a whole body that
follows at once) and send it with the next write of the connection: the body, or the end
of an empty one. An answer without a declared length (an event stream) keeps its head
sent at once, so a client sees a stream open before its first event.

It replaces one method of Hypercorn's protocol, kept to the version it was written for:
with another Hypercorn version the node runs unpatched and logs so.
"""

from __future__ import annotations

import logging
from importlib.metadata import version

import h11
from hypercorn.events import RawData
from hypercorn.protocol.h11 import H11Protocol

log = logging.getLogger("service.http")

FOR_VERSION = "0.18."
HYPERCORNS = H11Protocol._send_h11_event  # its own method, kept for the version check's tests


def install() -> bool:
    """Patch Hypercorn's HTTP/1.1 protocol (once); False when its version is not the one
    this was written for."""
    if getattr(H11Protocol._send_h11_event, "head_with_body", False):
        return True
    if not version("hypercorn").startswith(FOR_VERSION):
        log.warning("hypercorn %s: answers go out as head and body in two writes", version("hypercorn"))
        return False
    H11Protocol._send_h11_event = _send_h11_event  # type: ignore[method-assign]
    return True


def _declares_length(event: h11.Response) -> bool:
    return any(name == b"content-length" for name, _ in event.headers)


async def _send_h11_event(self: H11Protocol, event) -> None:
    """Hypercorn's own method (h11 bytes for the event, then one write), except that the
    head of an answer with a declared length waits for the connection's next write."""
    try:
        data = self.connection.send(event)
    except h11.LocalProtocolError:
        if self.connection.their_state != h11.ERROR:
            raise
        return
    held = getattr(self, "held_head", None)
    if type(event) is h11.Response and _declares_length(event):
        self.held_head = data
        return
    if held is not None:
        self.held_head = None
        data = held + data
    await self.send(RawData(data=data))


_send_h11_event.head_with_body = True  # type: ignore[attr-defined]

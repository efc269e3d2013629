"""Hypercorn's HTTP/2 connection with HTTP/1's bound on a client that takes nothing.

Over HTTP/2 a response waits in Hypercorn for the client's flow-control window, with no
bound: a client that grants none (and stays connected) held each stream's task and
buffered answer for as long as it liked, up to 100 streams a connection
(docs/security-limits.md). Over HTTP/1 a write that the client takes less than `MIN_RATE`
of over `SEND_STALL_S` ends the connection (`service/http/connection.py`); the same rule
is kept here: while answers wait to be sent, the client must take at least
`SEND_STALL_S * MIN_RATE` bytes of them each `SEND_STALL_S`, or the connection is closed
(answers' bytes only: a client cannot keep its connection by sending PINGs).
Checked against Hypercorn 0.18 (`tests/test_http2_window.py`).
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from hypercorn.events import Closed
from hypercorn.protocol.h2 import H2Protocol

from .connection import MIN_RATE, SEND_STALL_S

log = logging.getLogger("service.http")


class BoundedH2(H2Protocol):
    """`H2Protocol` plus a watch over what the client takes of the waiting answers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.taken = 0  # bytes of answers (DATA frames) sent to the client so far
        self.watch = trio.CancelScope()
        send_data = self.connection.send_data

        def counted(stream_id: int, data: bytes, *args: Any, **kwargs: Any) -> None:
            # answers' bytes only: a client's PINGs or SETTINGS, acknowledged, take none
            send_data(stream_id, data, *args, **kwargs)
            self.taken += len(data)

        self.connection.send_data = counted  # type: ignore[method-assign,assignment]

    async def initiate(self, headers: Any = None, settings: Any = None) -> None:
        await super().initiate(headers, settings)
        self.task_group.spawn(self._watch)

    async def handle(self, event: Any) -> None:
        await super().handle(event)
        if isinstance(event, Closed):
            self.watch.cancel()

    def waiting(self) -> bool:
        """Whether some answer has bytes the client's window has not let out."""
        return any(len(b.buffer) for b in self.stream_buffers.values())

    async def _watch(self) -> None:
        with self.watch:
            before = self.taken
            while not self.closed:
                await trio.sleep(SEND_STALL_S)
                if self.waiting() and self.taken - before < SEND_STALL_S * MIN_RATE:
                    log.info("an HTTP/2 client took too little of its answers for %.0f s: its connection is closed",
                             SEND_STALL_S)
                    await self.send(Closed())
                    return
                before = self.taken

"""A Quart request handled in the server's task for it, with its body as far as it has come.

quart-trio answers each HTTP request with two new tasks beside the one Hypercorn starts for
it: one reads the request's messages (its body, then a disconnect), one handles the request,
and whichever ends first cancels the other. The handler's first await was then a wait for
the body, which the reader had not yet taken from Hypercorn's queue: a scheduler step, and
another for a body already there (quart's body wait yields when it is complete). Two steps
and a task a request, about a tenth of a `/healthz` answer's scheduler steps.

`InlineHTTPConnection` keeps the same two parts and the same ends: the handler runs in the
nursery's own body (in Hypercorn's task), the reader in one child task, and either ending
cancels the other as before. Before either starts, the messages already queued are taken
without waiting (`receive_nowait` of Hypercorn's trio channel, found on its `receive`; any
other server's `receive` skips this), so a body that came with its head is complete when
the handler asks for it and `ReadyBody` hands it over without a step. Nothing waits longer
than before: a body still to come is read by the reader task, under the handler's body
timeout, as it was.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import trio
from quart_trio.asgi import TrioASGIHTTPConnection
from quart_trio.wrappers.request import TrioBody, TrioRequest


class InlineHTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection with the handler in the server's task (module docstring)."""

    async def __call__(self, receive: Any, send: Any) -> None:
        request = self._create_request_from_scope(send)
        if not _take_queued(request, receive):
            return  # the client went before the request was handled
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.handle_messages, nursery, request, receive)
            await self.handle_request(nursery, request, send)


def _take_queued(request: Any, receive: Any) -> bool:
    """Adds the request's messages already queued to its body, as quart's reader does; False
    when one of them is the client's disconnect. The reader task takes the rest."""
    channel = getattr(receive, "__self__", None)
    if not isinstance(channel, trio.MemoryReceiveChannel):
        return True
    body = request.body
    while not body._complete.is_set():  # quart's own flag: set by the end of the body
        try:
            message = channel.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return True
        if message["type"] == "http.disconnect":
            return False
        if message["type"] == "http.request":
            body.append(message.get("body", b""))
            if not message.get("more_body", False):
                body.set_complete()
    return True


class ReadyBody(TrioBody):
    """A request body whose await gives a complete body at once (quart's waits on its
    completion event, which yields to the scheduler even when set)."""

    def __await__(self) -> Generator[Any, None, Any]:
        if self._must_raise is None and self._complete.is_set():
            return bytes(self._data)
        return (yield from super().__await__())


class ReadyRequest(TrioRequest):
    body_class = ReadyBody

"""A Quart request handled in the server's task for it, with its body as far as it has come.

quart-trio answers each HTTP request with two new tasks beside the one Hypercorn starts for
it: one reads the request's messages (its body, then a disconnect), one handles the request,
and whichever ends first cancels the other. The handler's first await was then a wait for
the body, which the reader had not yet taken from Hypercorn's queue: a scheduler step, and
another for a body already there (quart's body wait yields when it is complete). Two steps
and a task a request, about a tenth of a `/healthz` answer's scheduler steps; the reader
itself (its start, its wake on the disconnect, the nursery's wait for its end) three more.

`InlineHTTPConnection` runs the handler in Hypercorn's task. First it takes the messages
already queued without waiting (`receive_nowait` on the node's `Receive`,
service/http/connection.py; any other server's `receive` skips this), so a body that came
with its head is complete when the handler asks for it and `ReadyBody` hands it over
without a step. Then:
- a request whose body is complete (every GET, a small POST) has nothing left to read but
  the client's disconnect, so it gets no reader task: the disconnect's put calls the
  handler's cancel (`Receive.on_disconnect`), which is all the reader did with it;
- a body still to come is read as before: the handler in the nursery's own body, the
  reader in one child task, under the handler's body timeout; either ending cancels the
  other.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, cast

import trio
from quart.wrappers import Response
from quart.wrappers.response import IterableBody
from quart_trio.asgi import TrioASGIHTTPConnection
from quart_trio.wrappers.request import TrioBody, TrioRequest

from .connection import Receive


class InlineHTTPConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP connection with the handler in the server's task (module docstring)."""

    async def __call__(self, receive: Any, send: Any) -> None:
        request = self._create_request_from_scope(send)
        if not _take_queued(request, receive):
            return  # the client went before the request was handled
        if isinstance(receive, Receive) and request.body._complete.is_set():
            # the client's disconnect put before the hook below was set: nobody to answer
            if (queued := receive.queued()) is not None and queued["type"] == "http.disconnect":
                return
            with trio.CancelScope() as scope:  # cancelled by the client's disconnect
                receive.on_disconnect = scope.cancel
                try:
                    await self.handle_request(cast(trio.Nursery, _Scoped(scope)), request, send)
                finally:
                    receive.on_disconnect = None
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.handle_messages, nursery, request, receive)
            await self.handle_request(nursery, request, send)

    async def handle_request(self, nursery: Any, request: Any, send: Any) -> None:  # type: ignore[override]
        """quart-trio's, and a streamed body is closed however its sending ended: quart closes
        one only once it has begun to send it (service/http/bodies.py)."""
        response = await self.app.handle_request(request)
        timeout = response.timeout if isinstance(response, Response) and response.timeout != Ellipsis \
            else self.app.config["RESPONSE_TIMEOUT"]
        try:
            if timeout is not None:
                with trio.move_on_after(timeout):
                    await self._send_response(send, response)
            else:
                await self._send_response(send, response)
        finally:
            body = getattr(response, "response", None)
            aclose = getattr(body.iter, "aclose", None) if isinstance(body, IterableBody) else None
            if aclose is not None:  # what quart's exit of the body does; once more is nothing
                with trio.CancelScope(shield=True):
                    await aclose()
        nursery.cancel_scope.cancel()


class _Scoped:
    """All quart-trio's `handle_request` uses of its nursery: the scope it cancels once the
    answer has gone."""

    __slots__ = ("cancel_scope",)

    def __init__(self, scope: trio.CancelScope) -> None:
        self.cancel_scope = scope


def _take_queued(request: Any, receive: Any) -> bool:
    """Adds the request's messages already queued to its body, as quart's reader does; False
    when one of them is the client's disconnect. The reader task, if any, takes the rest."""
    if not isinstance(receive, Receive):  # another server's `receive`: all left to the reader
        return True
    body = request.body
    while not body._complete.is_set():  # quart's own flag: set by the end of the body
        if (message := receive.queued()) is None:
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

    def ready(self) -> bytes | None:
        """The whole body when it is complete and nothing refused it; None otherwise."""
        return bytes(self._data) if self._must_raise is None and self._complete.is_set() else None

    def __await__(self) -> Generator[Any, None, Any]:
        if (data := self.ready()) is not None:
            return data
        return (yield from super().__await__())


class ReadyRequest(TrioRequest):
    body_class = ReadyBody
    _kept_blueprints: tuple[Any, list[str]] | None = None

    @property
    def blueprints(self) -> list[str]:
        """Quart works these out from the endpoint's name at each of its asks (three a
        request: before the view, after it, and at its teardown); they follow from the
        matched rule alone, so they are kept with the rule they came from (the same list each
        time, as Quart's own cache of the split gives)."""
        rule, kept = self.url_rule, self._kept_blueprints
        if kept is None or kept[0] is not rule:
            kept = self._kept_blueprints = (rule, super().blueprints)
        return kept[1]

    async def get_data(self, cache: bool = True, as_text: bool = False,  # type: ignore[override]
                       parse_form_data: bool = False) -> str | bytes:
        """quart-trio's, without its body-timeout scope (a cancel scope on every request)
        when the body is complete: there is nothing left to time out."""
        body = cast(ReadyBody, self.body)
        if parse_form_data or (data := body.ready()) is None:
            return await super().get_data(cache, as_text, parse_form_data)
        if not cache:
            body.clear()
        return data.decode() if as_text else data

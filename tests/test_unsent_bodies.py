"""An answer's streamed body whose head never went out (the client left as it was written,
or the response timeout fell there): its cleanup runs all the same. A never-started async
generator's `finally` does not run on close, and quart never closes a body it did not
enter, so a stream's place under the stream limits, or a streamed chat's job (it would be
charged for an answer nobody reads), was kept until the garbage collector came by."""

from __future__ import annotations

import trio
from quart import Response
from quart_trio import QuartTrio
from werkzeug.datastructures import Headers

from service.http.bodies import ClosingBody
from service.http.request_task import InlineHTTPConnection, ReadyRequest, _Scoped


def app_with(body_of) -> QuartTrio:
    app = QuartTrio("t")
    app.asgi_http_class = InlineHTTPConnection
    app.request_class = ReadyRequest

    @app.route("/stream")
    async def stream():
        return Response(body_of(), status=200, content_type="text/event-stream")

    return app


def request() -> ReadyRequest:
    return ReadyRequest("GET", "http", "/stream", b"", Headers({"Host": "t"}), "", "1.1", max_content_length=None,
                        body_timeout=None, send_push_promise=None, scope={})


async def gone(message) -> None:
    """A send to a client that left: its head cannot be written."""
    raise trio.BrokenResourceError("the client went")


async def serve_once(app: QuartTrio, send, scope: trio.CancelScope | None = None) -> None:
    conn = InlineHTTPConnection(app, {"type": "http", "path": "/stream", "headers": []})
    with scope or trio.CancelScope() as handler_scope:
        await conn.handle_request(_Scoped(handler_scope), request(), send)


async def test_a_body_whose_head_is_cancelled_is_closed_and_released():
    released: list[str] = []

    async def frames():
        yield b"data: x\n\n"

    app = app_with(lambda: ClosingBody(frames(), lambda: released.append("released")))
    sent: list[str] = []
    scope = trio.CancelScope()

    async def send(message):
        sent.append(message["type"])
        if message["type"] == "http.response.start":
            scope.cancel()  # the client's disconnect (Receive.on_disconnect) as the head is written
            await trio.lowlevel.checkpoint()

    await serve_once(app, send, scope)
    assert sent == ["http.response.start"]
    assert released == ["released"]


async def test_a_body_whose_head_could_not_be_written_is_released():
    released: list[str] = []

    async def frames():
        yield b"data: x\n\n"

    app = app_with(lambda: ClosingBody(frames(), lambda: released.append("released")))

    try:
        await serve_once(app, gone)
    except trio.BrokenResourceError:
        pass
    assert released == ["released"]


async def test_a_body_sent_to_its_end_is_released_once():
    released: list[str] = []

    async def frames():
        yield b"data: x\n\n"
        yield b"data: y\n\n"

    app = app_with(lambda: ClosingBody(frames(), lambda: released.append("released")))
    bodies: list[bytes] = []

    async def send(message):
        if message["type"] == "http.response.body":
            bodies.append(message["body"])

    await serve_once(app, send)
    assert bodies == [b"data: x\n\n", b"data: y\n\n", b""]
    assert released == ["released"]


async def test_an_async_release_runs_shielded_from_the_handlers_cancel():
    released: list[str] = []

    async def frames():
        yield b"data: x\n\n"

    async def release():
        await trio.lowlevel.checkpoint()  # an actor's ask: a checkpoint inside a cancelled scope
        released.append("released")

    app = app_with(lambda: ClosingBody(frames(), release))

    try:
        await serve_once(app, gone)
    except trio.BrokenResourceError:
        pass
    assert released == ["released"]

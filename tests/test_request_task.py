"""Quart requests handled in Hypercorn's task for them (service/http/request_task.py), served
by real Hypercorn on trio's mock clock: a task fewer a request than quart-trio's own class,
the body taken as far as it has come, and the same ends as before: a client that goes
cancels its handler, a body that stops coming is a 408 after the body timeout, a body that
comes late is read whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from hypercorn.trio import serve
from quart import request
from quart_trio import QuartTrio
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.datastructures import Headers
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout
from werkzeug.routing import Rule

from service.config import Settings
from service.http.connection import Receive, install
from service.http.request_task import InlineHTTPConnection, ReadyBody, ReadyRequest, _take_queued
from service.main import hypercorn_config

BODY_TIMEOUT_S = 30


def make_app(connection_class) -> tuple[QuartTrio, dict]:
    app = QuartTrio("t")
    app.asgi_http_class = connection_class
    app.request_class = ReadyRequest
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT_S
    seen: dict = {"ended": trio.Event()}

    @app.route("/echo", methods=["GET", "POST"])
    async def echo():
        return (await request.get_data()) or b"-"

    @app.route("/forever", methods=["GET", "POST"])
    async def forever():
        try:
            await trio.sleep_forever()
        finally:
            seen["ended"].set()

    return app, seen


async def started(nursery, app) -> int:
    install()
    cfg = hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))
    binds = await nursery.start(lambda task_status: serve(app, cfg, task_status=task_status))
    return int(binds[0].rsplit(":", 1)[1])


async def answer(s: trio.SocketStream) -> bytes:
    """One whole sized answer."""
    buf = b""
    while b"\r\n\r\n" not in buf or len(buf.partition(b"\r\n\r\n")[2]) < _length(buf):
        data = await s.receive_some()
        if not data:
            break
        buf += data
    return buf


def _length(buf: bytes) -> int:
    for line in buf.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return int(value)
    return 0


def post(body: bytes) -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body


class Spawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


async def tasks_a_request(nursery, connection_class, late: bool = False) -> int:
    """Tasks started for the second request of a keep-alive connection (the first warms up);
    `late`: its body's last bytes come after the handler has started."""
    app, _ = make_app(connection_class)
    port = await started(nursery, app)
    spawned = Spawned()
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(post(b"warm"))
        await answer(s)
        trio.lowlevel.add_instrument(spawned)
        try:
            if late:
                await s.send_all(post(b"hello")[:-2])
                await trio.sleep(1)
                await s.send_all(b"lo")
            else:
                await s.send_all(post(b"hello"))
            got = await answer(s)
        finally:
            trio.lowlevel.remove_instrument(spawned)
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"hello"), got
    return spawned.count


async def test_a_request_with_its_whole_body_starts_two_tasks_fewer_than_quart_trios_class(nursery, autojump_clock):
    ours = await tasks_a_request(nursery, InlineHTTPConnection)
    theirs = await tasks_a_request(nursery, TrioASGIHTTPConnection)
    assert ours == theirs - 2, (ours, theirs)  # no handler task, no reader task


async def test_a_body_still_to_come_is_read_by_a_reader_task(nursery, autojump_clock):
    ours = await tasks_a_request(nursery, InlineHTTPConnection, late=True)
    theirs = await tasks_a_request(nursery, TrioASGIHTTPConnection, late=True)
    assert ours == theirs - 1, (ours, theirs)  # no handler task; the reader as before


async def test_bodies_that_come_with_their_head_or_later_are_read_whole(nursery, autojump_clock):
    app, _ = make_app(InlineHTTPConnection)
    port = await started(nursery, app)
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        await s.send_all(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await answer(s)).endswith(b"\r\n\r\n-")
        await s.send_all(post(b"at once"))
        assert (await answer(s)).endswith(b"at once")
        await s.send_all(post(b"in two parts")[:-5])
        await trio.sleep(5)  # the handler has started and waits for the rest
        await s.send_all(b"parts")
        assert (await answer(s)).endswith(b"in two parts")
        big = bytes(range(256)) * 1024  # more than one read of the server's
        await s.send_all(post(big))
        assert (await answer(s)).endswith(big)


async def test_a_body_that_stops_coming_is_a_408_after_the_body_timeout(nursery, autojump_clock):
    app, _ = make_app(InlineHTTPConnection)
    port = await started(nursery, app)
    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
        t0 = trio.current_time()
        await s.send_all(post(b"never all of it")[:-3])
        got = await answer(s)
        assert got.startswith(b"HTTP/1.1 408"), got
        assert trio.current_time() - t0 == pytest.approx(BODY_TIMEOUT_S, abs=0.01)


@pytest.mark.parametrize("head", [
    b"GET /forever HTTP/1.1\r\nHost: t\r\n\r\n",  # whole: no reader, the disconnect's put cancels
    b"POST /forever HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\npart",  # the reader task's
])
async def test_a_client_that_goes_cancels_its_handler(nursery, autojump_clock, head):
    app, seen = make_app(InlineHTTPConnection)
    port = await started(nursery, app)
    s = await trio.open_tcp_stream("127.0.0.1", port)
    await s.send_all(head)
    await trio.sleep(1)
    assert not seen["ended"].is_set()
    await s.aclose()
    with trio.fail_after(1):
        await seen["ended"].wait()


def _request(body_timeout: float | None = None) -> ReadyRequest:
    return ReadyRequest("POST", "http", "/echo", b"", Headers(), "", "1.1", max_content_length=None,
                        body_timeout=body_timeout, send_push_promise=None, scope={})


async def test_queued_messages_are_taken_without_waiting_and_a_disconnect_stops_the_request():
    send, channel = trio.open_memory_channel(10)
    receive = Receive(channel)
    req = _request()
    send.send_nowait({"type": "http.request", "body": b"ab", "more_body": True})
    assert _take_queued(req, receive) and not req.body._complete.is_set()
    send.send_nowait({"type": "http.request", "body": b"c", "more_body": False})
    send.send_nowait({"type": "http.disconnect"})  # after the body's end: left for the reader
    assert _take_queued(req, receive) and req.body._complete.is_set()
    with trio.testing.assert_no_checkpoints():
        assert await req.body == b"abc"
    assert channel.receive_nowait() == {"type": "http.disconnect"}

    gone = _request()
    send.send_nowait({"type": "http.disconnect"})
    assert not _take_queued(gone, receive)


async def test_another_servers_receive_is_left_to_the_reader_task():
    taken: list = []

    async def receive():
        taken.append(1)
        return {"type": "http.request", "body": b"x", "more_body": False}

    req = _request()
    assert _take_queued(req, receive) and not taken and not req.body._complete.is_set()


async def test_a_ready_body_still_waits_for_a_body_to_come():
    body = ReadyBody(None, None)

    async def complete_later():
        await trio.sleep(0)
        body.append(b"late")
        body.set_complete()

    async with trio.open_nursery() as n:
        n.start_soon(complete_later)
        assert await body == b"late"


async def test_a_complete_body_is_got_without_a_timeout_scope_or_a_step(monkeypatch):
    """quart-trio's `get_data` wraps its wait in a body-timeout scope even for a body that is
    all here; `ReadyRequest`'s hands it over at once, as bytes, text or uncached."""
    scopes: list[float] = []
    move_on_after = trio.move_on_after
    monkeypatch.setattr(trio, "move_on_after", lambda s, **kw: scopes.append(s) or move_on_after(s, **kw))
    req = _request()
    req.body.append(b"all here")
    req.body.set_complete()
    with trio.testing.assert_no_checkpoints():
        assert await req.get_data() == b"all here"
        assert await req.get_data(as_text=True) == "all here"
        assert await req.get_data(cache=False) == b"all here"
    assert await req.get_data() == b"" and scopes == []


async def test_get_data_still_waits_under_the_body_timeout_for_a_body_to_come(autojump_clock):
    req = _request(BODY_TIMEOUT_S)
    req.body.append(b"half")
    with pytest.raises(RequestTimeout):
        await req.get_data()
    assert trio.current_time() == pytest.approx(BODY_TIMEOUT_S)


async def test_get_data_of_a_refused_body_raises_as_quart_does():
    req = _request()
    req.body._max_content_length = 3
    req.body.append(b"too long")
    with pytest.raises(RequestEntityTooLarge):
        await req.get_data()


def test_blueprints_are_worked_out_once_a_rule(monkeypatch):
    """Quart asks for the request's blueprints three times a request and splits the endpoint's
    name each time; `ReadyRequest` keeps them with the rule they came from."""
    import quart.helpers

    splits: list[str] = []
    split = quart.helpers._split_blueprint_path
    monkeypatch.setattr(quart.helpers, "_split_blueprint_path", lambda name: splits.append(name) or split(name))
    req = _request()
    assert req.blueprints == [] and splits == []  # not matched yet
    req.url_rule = Rule("/v1/x", endpoint="outer.inner.view")
    assert req.blueprints == ["outer.inner", "outer"]
    assert req.blueprints == ["outer.inner", "outer"] and req.blueprints == ["outer.inner", "outer"]
    assert splits == ["outer.inner"]
    req.url_rule = Rule("/v1/y", endpoint="other.view")  # a new rule: worked out again
    assert req.blueprints == ["other"] and splits == ["outer.inner", "other"]
    req.url_rule = None
    assert req.blueprints == []

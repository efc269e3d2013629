"""A hook through the node's own HTTP stack (Hypercorn with the node's connection class and
EndShielded, the in-process node's app; trio's mock clock) whose head declares a length and
`Transfer-Encoding: chunked`: h11 frames its body by the chunks (RFC 9112: the encoding
overrides the length), so the front must not judge it by the length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from hypercorn.trio import serve
from test_http_connection import ended  # noqa: F401 - the connection tasks' end times

from service.config import Settings
from service.http import connection
from service.http.connection import install
from service.main import EndShielded, hypercorn_config

ACCEPTED = b'{"status":"succeeded"}'  # the first chunk: a hook the front takes, of the declared length


@pytest.fixture
def receives(monkeypatch) -> list[connection.Receive]:
    """Each request's queue for the app (its `Receive`)."""
    made: list[connection.Receive] = []
    init = connection.Receive.__init__

    def kept(self, channel):
        init(self, channel)
        made.append(self)

    monkeypatch.setattr(connection.Receive, "__init__", kept)
    return made


def hook_request(path: str, chunks: list[bytes]) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(chunks[0])}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


async def answer(stream: trio.SocketStream) -> tuple[int, dict]:
    """One sized answer's status and JSON body."""
    buf = b""
    while b"\r\n\r\n" not in buf or len(buf.partition(b"\r\n\r\n")[2]) < int(
            buf.lower().split(b"content-length: ")[1].split(b"\r\n")[0]):
        data = await stream.receive_some()
        assert data, buf
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


async def unstick(receives: list[connection.Receive]) -> None:
    """Takes what nobody reads from the requests' queues: a connection shielded in a put on
    a full one (the bug) would otherwise keep this test's server from stopping."""
    for _ in range(50):
        for r in receives:
            while r.queued() is not None:
                pass
        await trio.sleep(0.1)


async def served(nursery: trio.Nursery, node) -> int:
    install()
    config = hypercorn_config(Settings(data_dir=Path("unused"), host="127.0.0.1", port=0))
    binds = await nursery.start(lambda task_status: serve(EndShielded(node.app), config, task_status=task_status,
                                                          shutdown_trigger=trio.sleep_forever))
    return int(binds[0].rsplit(":", 1)[1])


@pytest.fixture
def hook(node):
    ctx = node.parts.engines.context
    hooks = ctx.expect_hooks("job-te")
    yield ctx.hook_url("job-te").removeprefix(node.parts.settings.base_url), hooks
    ctx.forget_hooks("job-te")


async def test_a_chunked_hook_is_judged_by_its_whole_body_not_its_declared_length(node, hook, autojump_clock):
    """The front judged the first Content-Length bytes of the chunks (a hook whole by that
    length) and delivered them: 200 for a body the route refuses."""
    path, hooks = hook
    async with trio.open_nursery() as nursery:
        port = await served(nursery, node)
        async with await trio.open_tcp_stream("127.0.0.1", port) as s:
            await s.send_all(hook_request(path, [ACCEPTED, b"x", b"y"]))
            status, body = await answer(s)
        assert status == 400, body
        assert (body["error"]["code"], body["error"]["message"]) == ("request.bad_request", "Body must be a JSON object.")
        assert hooks.statistics().current_buffer_used == 0  # nothing delivered
        nursery.cancel_scope.cancel()


async def test_a_chunked_hook_with_many_chunks_does_not_hold_its_connection(node, hook, autojump_clock, receives, ended):  # noqa: F811
    """Past the front's answer the rest of the chunks filled the app's queue, which nobody
    read: the answer's end, shielded (EndShielded), then waited for ever to put the client's
    disconnect there, holding the connection past the client's close and the node's stop."""
    path, hooks = hook
    async with trio.open_nursery() as nursery:
        port = await served(nursery, node)
        try:
            async with await trio.open_tcp_stream("127.0.0.1", port) as s:
                await s.send_all(hook_request(path, [ACCEPTED] + [b" "] * 20))  # still JSON: taken
                assert await answer(s) == (200, {"received": True})
            t0 = trio.current_time()
            await trio.sleep(1)
            assert ended == [t0]
            assert hooks.receive_nowait() == {"status": "succeeded"}
        finally:
            if not ended:
                await unstick(receives)
            nursery.cancel_scope.cancel()

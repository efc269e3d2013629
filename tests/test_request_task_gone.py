"""A client that sends a whole request and closes at once (service/http/request_task.py):
its disconnect can be queued before the handler's task first runs, behind the body's end.
Real Hypercorn on trio's mock clock."""

from __future__ import annotations

import trio

from service.http.request_task import InlineHTTPConnection
from test_request_task import make_app, started

GONE = 32  # each close lands before the handler's first step about half the time (trio's order)


async def test_a_client_gone_before_its_handler_ran_leaves_no_handler_running(nursery, autojump_clock):
    app, _ = make_app(InlineHTTPConnection)
    running = []

    @app.route("/held")
    async def held():
        running.append(1)
        try:
            await trio.sleep_forever()
        finally:
            running.pop()

    port = await started(nursery, app)
    for _ in range(GONE):
        s = await trio.open_tcp_stream("127.0.0.1", port)
        await s.send_all(b"GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
        await s.aclose()
    await trio.sleep(60)
    assert running == []

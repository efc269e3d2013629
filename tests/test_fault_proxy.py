"""The engine soak's fault proxy (reliability/fault_proxy.py): what each mode does to a
client, and the `[DONE]` it sees go by."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
import trio
from quart import Response
from quart_trio import QuartTrio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from fault_proxy import FaultProxy  # noqa: E402
from peers.hosting import serving  # noqa: E402


def upstream_app(seen: list[str]) -> QuartTrio:
    app = QuartTrio("upstream")

    @app.post("/stream")
    async def stream():
        seen.append("stream")
        return Response(b"data: {}\n\ndata: [DONE]\n\n", content_type="text/event-stream")

    @app.get("/ok")
    async def ok():
        seen.append("ok")
        return "fine"

    return app


@pytest.fixture
async def proxy(nursery):
    seen: list[str] = []
    async with serving(upstream_app(seen)) as url:
        p = FaultProxy("test", url, slow_s=5.0)
        await nursery.start(p.serve)
        p.seen = seen
        yield p


async def test_pass_goes_through_and_the_done_of_a_tagged_stream_is_seen(proxy):
    async with httpx.AsyncClient(base_url=proxy.url) as c:
        assert (await c.get("/ok")).text == "fine"
        r = await c.post("/stream", json={"prompt": "soak-42 tell a story"})
        assert r.text.endswith("data: [DONE]\n\n")
    assert proxy.tags_done == {42}
    assert proxy.seen == ["ok", "stream"]


async def test_5xx_answers_503_without_reaching_the_engine(proxy):
    proxy.mode = "5xx"
    async with httpx.AsyncClient(base_url=proxy.url) as c:
        r = await c.get("/ok")
    assert (r.status_code, r.text) == (503, "Service Unavailable")
    assert proxy.seen == []


async def test_reset_breaks_new_and_open_connections(proxy):
    async with httpx.AsyncClient(base_url=proxy.url) as c:
        assert (await c.get("/ok")).status_code == 200  # a kept-alive connection is open now
        proxy.mode = "reset"
        proxy.reset_all()
        with pytest.raises(httpx.TransportError):
            await c.get("/ok")
        with pytest.raises(httpx.TransportError):
            await c.get("/ok")
    proxy.mode = "pass"
    async with httpx.AsyncClient(base_url=proxy.url) as c:
        assert (await c.get("/ok")).status_code == 200


async def test_slow_holds_the_answer_past_the_clients_timeout(proxy):
    proxy.mode = "slow"
    async with httpx.AsyncClient(base_url=proxy.url, timeout=0.3) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get("/ok")
    assert proxy.seen == ["ok"]  # the engine did the work; only its answer was late

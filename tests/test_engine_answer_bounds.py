"""Every engine answer is bounded, and an answer read by `bounded` keeps the server's own
headers (service/engines/common.py). Cog's create and health checks go through the plain
send (transport.py): bounded too, the health check far below an answer's 64 MiB
(`cog.HEALTH_MAX_BYTES`). Against a raw socket server (the plain send's own path, as in
test_engines_client_edges.py) and the scripted Cog of test_engines_retry.py on trio's mock clock."""

from __future__ import annotations

import gzip
from functools import partial

import httpx
import pytest
import trio
from test_engines_client_edges import answer_once
from test_engines_retry import (
    PID,
    Engine,
    cog_engine,
    cog_render,
    context,
    render_request,
)

from service.engines import cog, common
from service.engines.common import TooLarge, bounded
from service.engines.drive import drive
from service.engines.transport import engine_client, send_plain

MiB = 1024 * 1024
HEALTH_BOUND = 4 * MiB  # cog.HEALTH_MAX_BYTES
JSON = b'{"status":"ok"}'


def clear_proxies(monkeypatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


async def listen(nursery, handler) -> str:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


ZIPPED = gzip.compress(JSON)


@pytest.mark.parametrize("answer", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
     b"f\r\n{\"status\":\"ok\"}\r\n0\r\n\r\n"),
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n\r\n" + JSON,
    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + JSON,
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\nContent-Type: application/json\r\n\r\n"
    % len(ZIPPED) + ZIPPED,
], ids=["chunked", "close-delimited", "http/1.0", "gzip"])
async def test_a_bounded_answer_has_the_servers_headers_only(nursery, monkeypatch, answer):
    """httpx's own answer and `bounded`'s: the same headers, bytes for bytes (no Content-Length
    made up, none dropped), the same decoded body."""
    clear_proxies(monkeypatch)
    url = await listen(nursery, partial(answer_once, answer)) + "/system_stats"
    async with engine_client() as c:
        short = await bounded(c, "GET", url, timeout=5)
        long = await c.get(url, timeout=5)
    assert short.json() == long.json() == {"status": "ok"}
    assert short.headers.raw == long.headers.raw
    assert ("content-length" in short.headers) == (b"Content-Length" in answer)
    assert short.is_closed and short.num_bytes_downloaded == long.num_bytes_downloaded


class Endless:
    """A server whose answer's body never ends (`head`, then 64 KiB pieces), or a gzip body
    that inflates past any bound; `sent` counts the body's bytes, `closed` is set once the
    node has closed the connection."""

    def __init__(self, head: bytes = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n",
                 body: bytes | None = None) -> None:
        self.head, self.body = head, body
        self.sent, self.closed = 0, trio.Event()

    async def __call__(self, stream: trio.SocketStream) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        try:
            await stream.send_all(self.head)
            if self.body is not None:
                await stream.send_all(self.body)
                await stream.receive_some(1)  # until the node closes
            else:
                piece = b'{"logs":"' + b"x" * 65536
                while True:
                    await stream.send_all(piece)
                    self.sent += len(piece)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self.closed.set()
        await stream.aclose()


@pytest.mark.parametrize("path", ["/health-check", "/a path"], ids=["short path", "httpx's path"])
async def test_a_plain_send_reads_an_endless_answer_to_its_bound(nursery, monkeypatch, path):
    clear_proxies(monkeypatch)
    server = Endless()
    url = await listen(nursery, server)
    async with engine_client() as c:
        with pytest.raises(TooLarge, match=f"^an answer over {MiB} bytes$"):
            await send_plain(c, "GET", url + path, timeout=5, limit=MiB)
        with trio.fail_after(10):
            await server.closed.wait()  # the node hung up rather than read on
        assert c._transport.busy == [0] * 8  # type: ignore[attr-defined]  # the slot given back
    assert server.sent < 64 * MiB  # what the sockets' buffers held, not an endless read


async def test_a_plain_sends_compressed_answer_counts_as_what_it_inflates_to(nursery, monkeypatch):
    """No Accept-Encoding is sent, but a server may compress anyway: 2 MiB of gzip inflating
    to 2 GiB is refused at the bound, never inflated whole."""
    clear_proxies(monkeypatch)
    bomb = gzip.compress(b"\0" * (64 * MiB), compresslevel=9)
    server = Endless(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb), bomb)
    url = await listen(nursery, server)
    async with engine_client() as c:
        with pytest.raises(TooLarge):
            await send_plain(c, "GET", url + "/health-check", timeout=5, limit=MiB)


# -- Cog's create and health checks ------------------------------------------------------------------
class Pulled:
    """Answer bodies the node pulls a MiB at a time; `pulled` counts what it took of each.
    Each ends after `most` bytes (so a node that reads everything still ends the test)."""

    def __init__(self, most: int) -> None:
        self.most, self.pulled = most, []

    def response(self, status: int = 200) -> httpx.Response:
        body = _Body(self.most)
        self.pulled.append(body)
        return httpx.Response(status, headers={"Content-Type": "application/json"}, stream=body)


class _Body(httpx.AsyncByteStream):
    """An iterator, not an async generator: one the node stops reading is no generator left to the GC."""

    def __init__(self, most: int) -> None:
        self.most, self.sent, self.closed = most, 0, False

    def __aiter__(self) -> _Body:
        return self

    async def aclose(self) -> None:
        self.closed = True  # as a socket the node hangs up: no more bytes

    async def __anext__(self) -> bytes:
        if self.closed:
            raise StopAsyncIteration
        if self.sent == 0:
            self.sent = 1
            return b'{"status": "READY", "setup": {"logs": "'
        if self.sent >= self.most:
            raise StopAsyncIteration
        self.sent += MiB
        return b"x" * MiB


async def test_an_endless_health_check_answer_is_a_failed_check(tmp_path, autojump_clock):
    """Each check is read to HEALTH_MAX_BYTES (4 MiB), then counts as failed: the job ends
    "unavailable" after the checks' bound, as for a server that stopped answering."""
    box: list = []
    engine = cog_engine(box, hook_after_checks=10_000)
    answers = Pulled(HEALTH_BOUND + 16 * MiB)
    engine.routes["/health-check"] = lambda _r: answers.response()
    start = trio.current_time()
    with pytest.raises(cog.Unreachable, match="^Cog server http://cog stopped answering$"):
        await cog_render(engine, box, tmp_path)
    assert sum(common.RETRY_S) <= trio.current_time() - start < sum(common.RETRY_S) + 5
    assert len(answers.pulled) >= cog.DOWN_AFTER
    assert all(p.sent <= HEALTH_BOUND + MiB for p in answers.pulled), [p.sent for p in answers.pulled]
    assert cog.HEALTH_MAX_BYTES == HEALTH_BOUND


async def test_an_endless_pool_health_check_answer_marks_the_server_down(autojump_clock):
    engine = Engine({"/health-check": lambda _r: answers.response()})
    answers = Pulled(HEALTH_BOUND + 16 * MiB)
    ctx = context(engine)
    async with ctx.http:
        with pytest.raises(TooLarge):  # the pool's check takes any error for "down"
            await cog.Cog(ctx).health(None, "http://cog")  # type: ignore[arg-type]
    assert answers.pulled[0].sent <= HEALTH_BOUND + MiB


@pytest.mark.parametrize("outcome", ["webhook", "response"])
async def test_an_endless_create_answer_fails_the_job_as_incomplete(tmp_path, autojump_clock, outcome):
    """The PUT's answer (the final prediction, in response mode: data URLs count) is read to
    ANSWER_MAX_BYTES (64 MiB), then the job fails "could not complete"."""
    box: list = []
    engine = cog_engine(box, hook_after_checks=10_000)
    answers = Pulled(common.ANSWER_MAX_BYTES + 16 * MiB)
    engine.routes[f"/predictions/{PID}"] = lambda _r: answers.response()
    cfg = cog.CogEngine(urls=["http://cog"], poll_s=1.0, timeout_s=5.0, outcome=outcome)
    ctx = context(engine)
    box.append(ctx)
    async with ctx.http:
        with pytest.raises(TooLarge) as caught:
            await drive(cog.Cog(ctx), cfg, ctx, render_request(tmp_path, "cog"), "http://cog", 1)
    assert isinstance(caught.value, common.Incomplete)  # `render`: "could not complete"
    assert len(answers.pulled) == 1 and answers.pulled[0].sent <= common.ANSWER_MAX_BYTES + MiB

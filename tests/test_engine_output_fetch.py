"""A hosted API's output URL off its own origin is fetched by the guarded client
(service/engines/common.py, `_guarded`): its name lookups take threads of their own
(service/net/backend.py, `output_dns_limiter`), so lookups that hang for webhook deliveries
never hold up output fetches, nor the other way round; and the operator's
GENSERVICE_WEBHOOK_ALLOW_PRIVATE (`Context.allow_private`) lets it reach private addresses,
as it lets webhooks. DNS is faked at `socket.getaddrinfo` (the system lookup the limiters
guard), as in test_bound_dns.py; the private output is a real server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest
import trio
from peers.hosting import serving
from test_engine_outputs_hosted import internal
from test_engines_retry import Engine, context, render_request, replicate_engine
from waiting import wait_until

from service.catalog.catalog import Catalog
from service.catalog.engines import ReplicateEngine
from service.engines import Engines, common, replicate
from service.engines.drive import drive
from service.net import backend
from service.net.client import Sender

API = "https://api.example/v1"


@pytest.fixture
def hanging_dns(monkeypatch):
    """A system resolver that answers nothing until the test ends; `asked` lists the names
    whose lookup reached it (took a thread)."""
    real = socket.getaddrinfo
    release = threading.Event()
    asked: list[str] = []

    def blocking(host, port, family=0, type=0, proto=0, flags=0):
        if flags & socket.AI_NUMERICHOST:  # the no-thread try for IP literals
            return real(host, port, family, type, proto, flags)
        asked.append(host)
        release.wait()
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", blocking)
    yield asked
    release.set()


async def fetch_output(i: int) -> None:
    with trio.move_on_after(30), pytest.raises(httpx.HTTPError):
        await common._download(httpx.AsyncClient(), f"https://out-{i}.example/x.png", 5.0, API)


async def test_hanging_webhook_lookups_do_not_hold_up_output_fetches(hanging_dns, autojump_clock):
    sender = Sender(allow_private=False, ca_file=None)
    async with trio.open_nursery() as nursery:
        for i in range(backend.DNS_THREADS + 2):  # more than the webhooks' threads
            nursery.start_soon(sender.post, f"https://hook-{i}.example/h", b"{}", {})
        await wait_until(lambda: len(hanging_dns) == backend.DNS_THREADS, 10, real_time=True)
        assert backend.dns_limiter().borrowed_tokens == backend.DNS_THREADS  # every webhook thread hangs
        nursery.start_soon(fetch_output, 1)
        await wait_until(lambda: "out-1.example" in hanging_dns, 10, real_time=True)  # its own thread
        assert backend.output_dns_limiter().borrowed_tokens == 1
        nursery.cancel_scope.cancel()


async def test_hanging_output_lookups_do_not_hold_up_webhook_deliveries(hanging_dns, autojump_clock):
    sender = Sender(allow_private=False, ca_file=None)
    async with trio.open_nursery() as nursery:
        for i in range(8 + 2):  # more than the output fetches' threads
            nursery.start_soon(fetch_output, i)
        await wait_until(lambda: len(hanging_dns) == 8, 10, real_time=True)  # OUTPUT_DNS_THREADS
        nursery.start_soon(sender.post, "https://hook.example/h", b"{}", {})
        await wait_until(lambda: "hook.example" in hanging_dns, 10, real_time=True)  # its own thread
        assert backend.output_dns_limiter().borrowed_tokens == backend.OUTPUT_DNS_THREADS == 8
        assert backend.dns_limiter().borrowed_tokens == 1
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("allow_private", [False, True])
async def test_the_allow_private_switch_applies_to_output_urls(tmp_path, monkeypatch, allow_private):
    """A Replicate output on 127.0.0.1 (off the API's origin): skipped ("no output") with the
    switch off, fetched with it on."""
    hits: list[str] = []
    async with serving(internal(hits)) as inside:
        engine: Engine = replicate_engine()
        urls = {"get": f"{API}/predictions/p1", "cancel": f"{API}/predictions/p1/cancel"}
        engine.routes["/v1/predictions/p1"] = httpx.Response(200, json={
            "id": "p1", "status": "succeeded", "urls": urls, "output": [f"{inside}/lan/out.png"]})
        engine.routes["/v1/models/acme/pictures/predictions"] = httpx.Response(
            201, json={"id": "p1", "status": "starting", "urls": urls})
        monkeypatch.setenv("RETRY_TEST_TOKEN", "r8_test")
        cfg = ReplicateEngine(model="acme/pictures", token_env="RETRY_TEST_TOKEN", url=API, poll_s=0.01,
                              timeout_s=5.0)
        ctx = context(engine)
        ctx.allow_private = allow_private
        async with ctx.http:
            job = drive(replicate.Replicate(ctx), cfg, ctx, render_request(tmp_path, "replicate"))
            if allow_private:
                assert len((await job).outputs) == 1
            else:
                with pytest.raises(common.NoOutput):
                    await job
    assert hits == (["lan/out.png"] if allow_private else [])


async def test_engines_take_the_switch_to_their_context():
    for allow in (False, True):
        engines = Engines(Catalog([]), lambda: "http://node", b"s", lambda *a: None, allow_private=allow)
        await engines.http.aclose()
        assert engines.context.allow_private is allow

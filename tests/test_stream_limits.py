"""Probe H1: event streams had no bound, and one member's 260 streams used up the node's
descriptors. Streams are bounded per API key, per browser session, per organization and on
the node (service/streams/limits.py); each refusal has its status, code, message and
Retry-After; a stream that ends gives its place back. Dashboard pages share the API's request
rate, per session. Accept errors are logged once per 30 s, without a traceback."""

from __future__ import annotations

import json
import logging
import sys

import pytest
import trio

from service.descriptors import QuietAccept
from service.streams.limits import PER_KEY, PER_ORG, PER_SESSION, Owner, StreamLimits, descriptor_budget
from sse_client import open_stream
from tests.conftest import start_node, stop_node
from tests.test_dashboard_http import HTML, logged_in
from waiting import wait_until

pytestmark = pytest.mark.usefixtures("cheap_hashes")


def message(whose: str, limit: int) -> str:
    return f"Too many event streams open for {whose} (at most {limit}). Close one, or retry in 5 s."


async def refused(node, path, key, headers=None) -> tuple:
    async with open_stream(node, path, key, headers=headers) as s:
        return s.status, s.headers, json.loads(await s.body())


def assert_error(got, status, code, text, details) -> None:
    st, headers, body = got
    assert st == status and headers["Retry-After"] == "5"
    body["error"].pop("request_id")
    assert body == {"error": {"code": code, "message": text, "details": details}}


class Held:
    """Streams kept open, each in its own task (as clients would), until `close`."""

    def __init__(self, nursery: trio.Nursery, node) -> None:
        self.nursery, self.node, self.done = nursery, node, trio.Event()

    async def open(self, path: str, key: str | None, headers=None) -> int:
        async def hold(task_status=trio.TASK_STATUS_IGNORED):
            async with open_stream(self.node, path, key, headers=headers) as s:
                if s.status == 200:
                    await s.next()
                task_status.started(s.status)
                await self.done.wait()

        return await self.nursery.start(hold)

    def close(self) -> None:
        self.done.set()


async def new_key(node, owner_key: str) -> str:
    r = await node.call("POST", "/v1/api-keys", owner_key, json={"name": "another"})
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await r.get_json())["data"]["key"]


def test_defaults_and_the_descriptor_budget():
    assert (PER_SESSION, PER_KEY, PER_ORG) == (10, 20, 50)
    assert descriptor_budget(256) == 128  # 128 kept free
    assert descriptor_budget(1024) == 768  # a quarter kept free
    assert descriptor_budget(65536) == 49152
    assert descriptor_budget(100) == 16  # never below 16


async def test_per_key_bound_then_the_place_comes_back(node, org, autojump_clock):
    key = org["api_key"]
    async with trio.open_nursery() as n:
        held = Held(n, node)
        for _ in range(PER_KEY):
            assert await held.open("/v1/events", key) == 200
        assert_error(await refused(node, "/v1/events", key), 429, "request.rate_limited",
                     message("this API key", PER_KEY), {"open_streams_limit": PER_KEY, "retry_after": 5})
        other = await new_key(node, key)  # another key of the organization still may
        async with open_stream(node, "/v1/events", other) as s:
            assert s.status == 200
        await wait_until(lambda: node.parts.streams.limits.count == PER_KEY)  # the other key's place given back
        held.close()
    await wait_until(lambda: node.parts.streams.limits.count == 0 and not node.parts.streams.limits.open)
    async with open_stream(node, "/v1/events", key) as s:  # places given back
        assert s.status == 200


def test_zero_turns_a_bound_off():
    limits = StreamLimits(per_key=0, per_org=0, per_session=0, total=60)
    for _ in range(60):
        limits.admit(Owner("org", key_id="key"))
    assert limits.count == 60


async def test_the_bounds_are_settings(nursery, tmp_path, autojump_clock):
    n = await start_node(nursery, tmp_path, test_mode=True, max_streams_per_key=2, max_streams_per_org=0,
                         max_streams_per_session=3)
    try:
        assert (n.parts.streams.limits.per_key, n.parts.streams.limits.per_org,
                n.parts.streams.limits.per_session) == (2, 0, 3)
        key = (await n.create_org())["api_key"]
        async with trio.open_nursery() as nn:
            held = Held(nn, n)
            for _ in range(2):
                assert await held.open("/v1/events", key) == 200
            assert_error(await refused(n, "/v1/events", key), 429, "request.rate_limited",
                         message("this API key", 2), {"open_streams_limit": 2, "retry_after": 5})
            held.close()
    finally:
        await stop_node(n)


async def test_a_job_stream_that_ends_gives_its_place_back(node, org, autojump_clock):
    key = org["api_key"]
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": "x [[fail:internal]]"})
    rid = (await r.get_json())["request_id"]
    for _ in range(PER_KEY + 5):  # the job is final: each stream sends it and ends
        async with open_stream(node, f"/v1/generation/requests/{rid}/events", key) as s:
            assert s.status == 200
            await s.events()
    assert node.parts.streams.limits.count == 0


async def test_per_organization_and_node_bounds(node, org, autojump_clock):
    node.parts.streams.limits = StreamLimits(per_key=3, per_org=4, total=6)
    key = org["api_key"]
    second = await new_key(node, key)
    other = await node.create_org(name="Other", email="owner@other.test")
    async with trio.open_nursery() as n:
        held = Held(n, node)
        for k in (key, key, key, second):
            assert await held.open("/v1/events", k) == 200
        assert_error(await refused(node, "/v1/events", second), 429, "request.rate_limited",
                     message("this organization", 4), {"open_streams_limit": 4, "retry_after": 5})
        for _ in range(2):
            assert await held.open("/v1/events", other["api_key"]) == 200
        assert_error(await refused(node, "/v1/events", other["api_key"]), 503, "request.service_unavailable",
                     "The node holds as many event streams as it can. Retry in 5 s.", {"retry_after": 5})
        r = await node.call("GET", "/v1/projects", other["api_key"])  # everything else still answers
        assert r.status_code == 200
        held.close()


async def test_per_session_bound_on_dashboard_streams(node, autojump_clock):
    await logged_in(node)
    cookie = next(c for c in node.client.cookie_jar if c.name == "gs_session")
    headers = {"Cookie": f"gs_session={cookie.value}"}
    async with trio.open_nursery() as n:
        held = Held(n, node)
        for _ in range(PER_SESSION):
            assert await held.open("/history/events", None, headers) == 200
        got = await refused(node, "/history/events", None, headers=headers)
        assert_error(got, 429, "request.rate_limited", message("this browser session", PER_SESSION),
                     {"open_streams_limit": PER_SESSION, "retry_after": 5})
        held.close()


async def test_dashboard_pages_share_the_request_rate_per_session(nursery, tmp_path, autojump_clock):
    # one request per 100 s after a burst of 5: the pause before a refusal (at most 1 s) refills nothing
    n = await start_node(nursery, tmp_path, test_mode=True, rate_limit_per_key=0.01, rate_limit_burst=5)
    try:
        await logged_in(n)  # the login form is not a dashboard page: the session's bucket is full
        statuses = [(await n.client.get("/keys", headers=HTML)).status_code for _ in range(7)]
        assert statuses == [200] * 5 + [429] * 2
        r = await n.client.get("/keys", headers=HTML)
        html = await r.get_data(as_text=True)
        wait = int(r.headers["Retry-After"])
        assert r.status_code == 429 and 90 <= wait <= 100
        assert "<h1>Too many requests</h1>" in html
        assert (f"Too many requests for this session: at most 0.01 a second (bursts of 5). Retry in {wait} s."
                in html)
        other = n.app.test_client()  # another browser is not slowed by this session
        assert (await other.get("/login")).status_code == 200
        await trio.sleep(wait)
        assert (await n.client.get("/keys", headers=HTML)).status_code == 200
    finally:
        await stop_node(n)


def test_accept_errors_are_one_line_per_30_s_without_traceback():
    now = [100.0]
    quiet = QuietAccept(clock=lambda: now[0])
    logger = logging.getLogger("test.accept")
    records = []
    for i in range(480):  # a minute of retries (trio's are every 0.1 s; 1/8 s here, exact in binary)
        try:
            raise OSError(24, "Too many open files")
        except OSError:
            rec = logger.makeRecord("trio.serve_listeners", logging.ERROR, __file__, 1,
                                    "accept returned %s (%s); retrying in %s seconds",
                                    ("EMFILE", "Too many open files", 0.1), sys.exc_info())
        if quiet.filter(rec):
            records.append(rec)
        now[0] += 0.125
    assert len(records) == 2
    assert all(r.exc_info is None and r.levelname == "WARNING" for r in records)
    assert records[0].getMessage() == ("cannot accept connections: Too many open files; new connections wait "
                                       "until descriptors are free (0 more refused accepts since the last line)")
    assert "(239 more refused accepts" in records[1].getMessage()


async def test_a_stream_answer_never_sent_gives_its_place_back(node, org):
    """A client that leaves before the body starts: the body's `finally` never runs, so the
    place is given back when the unsent answer is collected."""
    import gc

    from quart import g

    from service.http.auth import Principal
    from service.http.topics import project_stream, respond

    limits = node.parts.streams.limits
    async with node.app.test_request_context("/v1/events"):
        g.principal = Principal(org["organization_id"], org["owner_user_id"], "some-key", "owner")
        answer = respond(project_stream(org["default_project_id"], None, lambda: True))
        assert answer.status_code == 200 and limits.count == 1 and limits.open["key:some-key"] == 1
        del answer
        gc.collect()
    assert limits.count == 0 and not limits.open


async def test_a_stream_answer_closed_unsent_gives_its_place_back_at_once(node, org):
    """What the node's connection does with an answer whose head could not be written
    (service/http/request_task.py): its body is closed, started or not; the place comes
    back then, not when the garbage collector comes by."""
    from quart import g

    from service.http.auth import Principal
    from service.http.topics import project_stream, respond

    limits = node.parts.streams.limits
    async with node.app.test_request_context("/v1/events"):
        g.principal = Principal(org["organization_id"], org["owner_user_id"], "some-key", "owner")
        answer = respond(project_stream(org["default_project_id"], None, lambda: True))
        assert limits.count == 1
        await answer.response.iter.aclose()
        assert limits.count == 0 and not limits.open

"""A submit that waits (`Prefer: wait=N`, service/http/wait.py): the final status in the
submit's answer when the job ends in time, the usual 202 when it does not, the wait counted
as an event stream, the bad values refused before anything is made, and the job never
depending on the wait. Waits run on trio's mock clock."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio

from conftest import err
from test_generation_support import IMAGE, balance, status, wait_status
from test_stream_limits import Held, message
from waiting import wait_until

MODEL = "/v1/generation/models/proc-image"
SUBMIT_KEYS = {"status", "request_id", "status_url", "cancel_url", "credits_estimate"}


async def post(node, key: str, prompt: str, prefer: str | None, path: str = IMAGE, headers=None):
    h = dict(headers or {})
    if prefer is not None:
        h["Prefer"] = prefer
    r = await node.call("POST", path, key, json={"prompt": prompt}, headers=h)
    return r.status_code, r.headers, await r.get_json()


@asynccontextmanager
async def waiting_submit(node, key: str):
    """A slow job's submit with `Prefer: wait=30` running beside the block, which begins once
    the wait holds its place; yields the nursery and the list its answer lands in."""
    answers: list = []
    async with trio.open_nursery() as n:
        async def waiting():
            answers.append(await post(node, key, "A slow one [[delay:3000]]", "wait=30"))

        n.start_soon(waiting)
        await wait_until(lambda: node.parts.streams.limits.count == 1)
        yield n, answers


async def jobs(node, key: str) -> list[dict]:
    return (await (await node.call("GET", "/v1/generation/requests?limit=200", key)).get_json())["data"]


async def test_the_final_status_comes_in_the_submits_answer(node, org):
    """On trio's own clock: the render's threads take real time (an autojumping clock would
    jump over it to the wait's end)."""
    key = org["api_key"]
    for path in (IMAGE, MODEL):
        code, headers, body = await post(node, key, "A lighthouse", "wait=30", path)
        assert (code, headers["Preference-Applied"]) == (200, "wait=30")
        assert body["status"] == "completed" and len(body["outputs"]) == 1
        assert body == await status(node, key, body["request_id"])  # the status route's object
    code, headers, body = await post(node, key, "A fox [[fail:internal]]", "wait=30")
    assert (code, headers["Preference-Applied"], body["status"]) == (200, "wait=30", "failed")
    assert (await balance(node, key))["held"] == "0.00"
    assert node.parts.streams.limits.count == 0  # the waits' places given back
    assert node.parts.streams.topics == {}  # and their topics forgotten (nobody can resume them)


async def test_a_job_cancelled_during_the_wait_answers_its_final_status(node, org, autojump_clock):
    """The final status comes from the job's final event (not read again): the same object
    as the status route's for a job that ends without outputs."""
    key = org["api_key"]
    async with waiting_submit(node, key) as (_, answers):
        [job] = await jobs(node, key)
        r = await node.call("POST", f"/v1/generation/requests/{job['request_id']}/cancel", key)
        assert r.status_code == 200
    (code, headers, body), = answers
    assert (code, headers["Preference-Applied"], body["status"]) == (200, "wait=30", "canceled")
    assert body == await status(node, key, job["request_id"])
    assert (await balance(node, key))["held"] == "0.00"


async def test_a_job_that_outlasts_the_wait_gets_the_202_and_runs_on(node, org, autojump_clock):
    key = org["api_key"]
    started = trio.current_time()
    code, headers, body = await post(node, key, "A slow one [[delay:500]]", "wait=5")  # under the 600 s timeout
    waited = trio.current_time() - started
    assert (code, headers["Preference-Applied"], set(body)) == (202, "wait=5", SUBMIT_KEYS)
    assert body["status"] == "queued" and 5 <= waited < 500
    assert (await status(node, key, body["request_id"]))["status"] == "rendering"
    assert (await wait_status(node, key, body["request_id"], timeout=1000))["status"] == "completed"


async def test_wait_alone_and_long_waits_wait_sixty_seconds(node, org, autojump_clock):
    key = org["api_key"]
    for prefer in ("wait", "wait=600", 'respond-quickly, WAIT = "3600"; a=b', "wait=" + "9" * 5000):
        started = trio.current_time()
        code, headers, _ = await post(node, key, "A slow one [[delay:3000]]", prefer)
        assert (code, headers["Preference-Applied"]) == (202, "wait=60"), prefer
        assert 60 <= trio.current_time() - started < 600, prefer


async def test_no_wait_asked_answers_at_once(node, org, autojump_clock):
    """Without the header the route never waits (a thread's real time can still move the
    autojumping clock, so the proof is the missing header and the job still running)."""
    key = org["api_key"]
    for prefer in (None, "wait=0", "respond-async, wait=10", "handling=lenient", ""):
        code, headers, body = await post(node, key, "A slow one [[delay:3000]]", prefer)
        assert (code, set(body)) == (202, SUBMIT_KEYS), prefer
        assert "Preference-Applied" not in headers, prefer
        assert (await status(node, key, body["request_id"]))["status"] in ("queued", "rendering")


async def test_a_wait_that_is_not_a_whole_number_is_refused_before_anything_is_made(node, org, autojump_clock):
    key = org["api_key"]
    before = await balance(node, key)
    for prefer in ("wait=abc", "wait=-1", "wait=1.5", "wait=5s", "wait=\u00b2"):  # a superscript two
        code, _, body = await post(node, key, "A fox", prefer)
        assert code == 400, prefer
        assert err(body) == {"code": "request.bad_request", "details": {"header": "Prefer"},
                             "message": "Prefer: wait must be a whole number of seconds (at most 60 are waited)."}
    assert await jobs(node, key) == [] and await balance(node, key) == before


async def test_a_wait_counts_as_an_event_stream(node, org, autojump_clock):
    """Its place is taken while it waits and given back after; over the limit it does not
    wait (202 at once, no Preference-Applied) and the job is made all the same."""
    key = org["api_key"]
    limits = node.parts.streams.limits
    limits.per_key = 2
    async with waiting_submit(node, key) as (n, answers):
        held = Held(n, node)
        assert await held.open("/v1/events", key) == 200  # the second place
        code, headers, body = await post(node, key, "Over the limit [[delay:3000]]", "wait=30")  # no third
        assert (code, set(body)) == (202, SUBMIT_KEYS) and "Preference-Applied" not in headers
        r = await node.call("GET", "/v1/events", key)
        assert (r.status_code, err(await r.get_json())) == (429, {
            "code": "request.rate_limited", "message": message("this API key", 2),
            "details": {"open_streams_limit": 2, "retry_after": 5}})
        await wait_until(lambda: answers, 40)
        assert limits.count == 1  # the wait's place given back, the stream's kept
        held.close()
    (code, headers, body), = answers
    assert (code, headers["Preference-Applied"], body["status"]) == (202, "wait=30", "queued")
    assert limits.count == 0 and len(await jobs(node, key)) == 2


async def test_a_replay_waits_for_the_first_submits_job(node, org):
    key = org["api_key"]
    first = await post(node, key, "A slow one [[delay:1]]", None, headers={"Idempotency-Key": "k-1"})
    assert first[0] == 202
    code, headers, body = await post(node, key, "A slow one [[delay:1]]", "wait=30",
                                     headers={"Idempotency-Key": "k-1"})
    assert (code, headers["Preference-Applied"], body["status"]) == (200, "wait=30", "completed")
    assert body["request_id"] == first[2]["request_id"] and len(await jobs(node, key)) == 1


async def test_a_client_that_leaves_leaves_the_job_running(node, org, autojump_clock):
    key = org["api_key"]
    with trio.move_on_after(3):
        await post(node, key, "A slow one [[delay:500]]", "wait=30")
    assert node.parts.streams.limits.count == 0
    [job] = await jobs(node, key)
    assert job["status"] == "rendering"
    assert (await wait_status(node, key, job["request_id"], timeout=1000))["status"] == "completed"


async def test_the_node_shutting_down_ends_a_wait_with_the_202(node, org, autojump_clock):
    key = org["api_key"]
    async with waiting_submit(node, key) as (_, answers):
        started = trio.current_time()
        node.parts.streams.close()
    (code, headers, body), = answers
    assert (code, headers["Preference-Applied"], set(body)) == (202, "wait=30", SUBMIT_KEYS)
    assert trio.current_time() - started < 30  # ended by the close, not by the wait's own end
    code, headers, _ = await post(node, key, "After the close", "wait=30")  # closed: no wait at all
    assert code == 202 and "Preference-Applied" not in headers


async def test_a_wait_reads_only_a_job_its_actor_does_not_hold_open(node, org, monkeypatch):
    """The wait subscribes first; a job its live actor holds open is not read (the actor makes
    its record final before it publishes the end), one that ended before is read and answered."""
    from service.actors.jobs import facade

    reads: list[str] = []
    job_in_org = facade.sql.job_in_org

    def counted(store, org_id, job_id):
        reads.append(job_id)
        return job_in_org(store, org_id, job_id)

    monkeypatch.setattr(facade.sql, "job_in_org", counted)
    key = org["api_key"]
    code, _, body = await post(node, key, "A lighthouse [[delay:0.2]]", "wait=30")
    assert (code, body["status"], reads) == (200, "completed", [])
    assert body == await status(node, key, body["request_id"])
    first = await post(node, key, "A fox", None, headers={"Idempotency-Key": "k-2"})
    await wait_status(node, key, first[2]["request_id"], "completed")
    await wait_until(lambda: not node.parts.generation.open_in(first[2]["request_id"], org["organization_id"]))
    reads.clear()
    code, _, body = await post(node, key, "A fox", "wait=30", headers={"Idempotency-Key": "k-2"})  # a replay: ended
    assert (code, body["status"], reads) == (200, "completed", [first[2]["request_id"]])

"""Event streams through the HTTP layer: a job's stream against its status route, resume
with Last-Event-ID at every point of a job's life, runs, the project stream and its source
filter, refusals, a revoked key, keep-alives, a slow reader and shutdown with 500 streams.
Time rules run on the mock clock (`autojump_clock`)."""

from __future__ import annotations

import pytest
import trio

from sse_client import open_stream
from test_generation_support import balance, hold_of, slow_captures, status, submit, wait_status


def job_events(rid: str) -> str:
    return f"/v1/generation/requests/{rid}/events"


async def test_a_job_stream_follows_the_status_route_to_the_end(node, org, autojump_clock):
    key = org["api_key"]
    # no real render under the mock clock: autojump counts a render thread as idle time
    rid = (await submit(node, key, {"prompt": "a hill [[delay:5]] [[fail:no-output]]"}))["request_id"]
    async with open_stream(node, job_events(rid), key) as s:
        assert s.status == 200
        assert s.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert s.headers["Cache-Control"] == "no-cache"
        events = await s.events()
    assert [e["event"] for e in events] == ["status"] * len(events)
    statuses = [e["data"]["status"] for e in events]
    assert statuses == ["queued", "rendering", "failed"] or statuses == ["rendering", "failed"]
    assert events[-1]["data"] == await status(node, key, rid)
    assert all(e["data"]["request_id"] == rid for e in events)
    assert s.ended  # closed after the final status


async def test_a_stream_of_a_finished_job_sends_it_once_and_closes(node, org, autojump_clock):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill [[fail:incomplete]]"}))["request_id"]
    final = await wait_status(node, key, rid)
    async with open_stream(node, job_events(rid), key) as s:
        events = await s.events()
    assert [(e["event"], e["data"]) for e in events] == [("status", final)]


async def test_resume_after_a_cut_at_every_point_misses_nothing_and_repeats_nothing(node, org, autojump_clock):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill [[delay:5]] [[fail:no-output]]"}))["request_id"]
    async with open_stream(node, job_events(rid), key) as s:
        first = await s.next()  # the current state; the rest is cut off here
    await wait_status(node, key, rid)
    async with open_stream(node, job_events(rid), key, last_event_id=first["id"]) as s:
        rest = await s.events()
    whole = [first] + rest
    assert [e["data"]["status"] for e in whole][-1] == "failed"
    assert len({e["data"]["status"] for e in whole}) == len(whole)  # no repeat
    for i, cut in enumerate(whole):
        async with open_stream(node, job_events(rid), key, last_event_id=cut["id"]) as s:
            after = await s.events()
        assert after == whole[i + 1:], i


@pytest.mark.parametrize("last_id", ["0000.1", "garbage", "deadbeef.99999999"])
async def test_a_resume_point_that_is_too_old_gets_one_reset_with_the_current_state(node, org, last_id):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill [[fail:no-output]]"}))["request_id"]
    final = await wait_status(node, key, rid)
    async with open_stream(node, job_events(rid), key, last_event_id=last_id) as s:
        events = await s.events()
    assert [(e["event"], e["data"]) for e in events] == [("reset", final)]


async def test_another_organizations_job_is_404_and_no_key_is_401(node, org):
    other = await node.create_org(name="Other", email="o@other.test")
    rid = (await submit(node, org["api_key"], {"prompt": "a hill"}))["request_id"]
    async with open_stream(node, job_events(rid), other["api_key"]) as s:
        assert s.status == 404
        body = await s.body()
    assert b'"code":"request.not_found"' in body.replace(b" ", b"")
    r = await node.call("GET", job_events(rid), other["api_key"])
    assert (r.status_code, (await r.get_json())["error"]["message"]) == (404, "Generation request not found.")
    r = await node.call("GET", job_events(rid), None)
    assert (r.status_code, await r.get_json()) == (401, {"status": False, "error": "Unauthorized"})
    r = await node.call("GET", f"/v1/workflows/runs/{rid}/events", org["api_key"])
    assert r.status_code == 404


async def test_a_read_only_member_may_follow(node, org):
    ro = await node.add_member(org["organization_id"], "read_only")
    rid = (await submit(node, org["api_key"], {"prompt": "a hill [[fail:internal]]"}))["request_id"]
    await wait_status(node, org["api_key"], rid)
    async with open_stream(node, job_events(rid), ro["api_key"]) as s:
        assert s.status == 200
        assert [e["data"]["status"] for e in await s.events()] == ["failed"]


async def test_keep_alives_every_15_seconds_and_a_revoked_key_ends_the_stream(node, org, autojump_clock):
    key = org["api_key"]
    made = await node.call("POST", "/v1/api-keys", key, json={"name": "follower"})
    follower = (await made.get_json())["data"]
    rid = (await submit(node, key, {"prompt": "a hill [[delay:3600]]"}))["request_id"]
    async with open_stream(node, job_events(rid), follower["key"]) as s:
        assert (await s.next())["event"] == "status"
        started = trio.current_time()
        assert await s.next() == {"comment": "keep-alive"}
        assert trio.current_time() - started == pytest.approx(15, abs=0.01)
        r = await node.call("DELETE", f"/v1/api-keys/{follower['id']}", key)
        assert r.status_code == 204
        frames = []
        while (f := await s.next()) is not None:
            frames.append(f)
        assert frames[-1] == {"comment": "access ended"}
        assert trio.current_time() - started <= 30 + 15 + 0.01  # at the next re-check
        assert {"comment": "keep-alive"} in frames or len(frames) == 1


async def test_a_paused_key_ends_the_stream_at_the_next_check(node, org, autojump_clock):
    key = org["api_key"]
    made = await node.call("POST", "/v1/api-keys", key, json={"name": "follower"})
    follower = (await made.get_json())["data"]
    rid = (await submit(node, key, {"prompt": "a hill [[delay:3600]]"}))["request_id"]
    async with open_stream(node, job_events(rid), follower["key"]) as s:
        await s.next()
        started = trio.current_time()
        r = await node.call("PATCH", f"/v1/api-keys/{follower['id']}", key, json={"is_active": False})
        assert r.status_code == 200
        while (f := await s.next()) is not None:
            last = f
        assert last == {"comment": "access ended"}
        assert trio.current_time() - started <= 30.01


async def test_a_run_stream_sends_the_run_until_it_is_final(node, org, autojump_clock):
    key = org["api_key"]
    r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", key,
                        json={"inputs": {"prompt": "a fox [[delay:30]]"}})
    assert r.status_code in (200, 201, 202), await r.get_data(as_text=True)
    run = (await r.get_json())["data"]
    async with open_stream(node, f"/v1/workflows/runs/{run['id']}/events", key) as s:
        first = await s.next()
        assert first["event"] == "run" and first["data"]["id"] == run["id"]
        r = await node.call("POST", f"/v1/workflows/runs/{run['id']}/cancel", key)
        assert r.status_code == 200
        rest = await s.events()
    assert rest and rest[-1]["event"] == "run" and rest[-1]["data"]["status"] == "canceled"
    r = await node.call("GET", f"/v1/workflows/runs/{run['id']}", key)
    assert rest[-1]["data"] == (await r.get_json())["data"]


async def test_the_project_stream_opens_with_the_feed_and_filters_by_source(node, org, autojump_clock):
    key = org["api_key"]
    before = (await submit(node, key, {"prompt": "before [[fail:internal]]"}))["request_id"]
    await wait_status(node, key, before)
    async with open_stream(node, "/v1/events?source=api", key) as s:
        opened = await s.next()
        assert opened["event"] == "feed"
        r = await node.call("GET", "/v1/runs?source=api", key)
        assert opened["data"] == (await r.get_json())["data"]
        r = await node.call("POST", "/v1/workflows/products/text-to-clip/runs", key,
                            json={"inputs": {"prompt": "a fox [[fail:internal]]"}})
        assert r.status_code in (200, 201, 202)
        rid = (await submit(node, key, {"prompt": "after [[fail:internal]]"}))["request_id"]
        seen = []
        while True:
            f = await s.next()
            if "event" in f:
                seen.append(f)
                if f["data"].get("request_id") == rid and f["data"]["status"] == "failed":
                    break
    assert {e["event"] for e in seen} == {"status"}  # no run, no workflow step job
    assert {e["data"]["source"] for e in seen} == {"api"}
    assert [e["data"]["status"] for e in seen] == ["queued", "rendering", "failed"] or \
        [e["data"]["status"] for e in seen][-1] == "failed"


async def test_a_slow_reader_is_reset_and_does_not_hold_up_a_fast_one(node, org, autojump_clock):
    key = org["api_key"]
    async with open_stream(node, "/v1/events", key) as slow, open_stream(node, "/v1/events", key) as fast:
        await slow.next()
        await fast.next()
        ids = []
        for i in range(40):  # each job: queued, rendering, failed = 3 events; 120 > the buffers
            ids.append((await submit(node, key, {"prompt": f"job {i} [[fail:internal]]"}))["request_id"])
            while True:  # the fast reader keeps up
                f = await fast.next()
                if "event" in f and f["data"].get("request_id") == ids[-1] and f["data"]["status"] == "failed":
                    break
        frames = []
        while True:
            f = await slow.next()
            frames.append(f)
            if f.get("event") == "reset":
                break
    assert frames[-1]["data"]["total"] == 40  # the current state, read at the reset
    assert ids[-1] in [item["id"] for item in frames[-1]["data"]["items"]]
    assert len(frames) < 120  # dropped: it never got every event


async def test_shutdown_ends_500_open_streams(node, org, autojump_clock):
    from service.streams.limits import StreamLimits

    node.parts.streams.limits = StreamLimits(per_key=500, per_org=500, total=500)  # one key: past its bound
    key = org["api_key"]
    ended = []

    async def follow(task_status=trio.TASK_STATUS_IGNORED):
        async with open_stream(node, "/v1/events", key) as s:
            await s.next()
            task_status.started()
            frames = []
            while (f := await s.next()) is not None:
                frames.append(f)
            ended.append(frames)

    async with trio.open_nursery() as n:
        for _ in range(500):
            await n.start(follow)
        assert node.parts.streams.open_streams == 500
        node.parts.streams.close()
    assert len(ended) == 500
    assert all(frames == [{"comment": "the node is shutting down"}] for frames in ended)
    assert node.parts.streams.open_streams == 0


async def test_completed_reaches_the_stream_once_the_charge_is_committed(node, org, monkeypatch):
    """A client that reads its balance when the stream says `completed` sees the charge: the
    final status is published after the hold's capture commits (made slow here), not before."""
    key = org["api_key"]
    slow_captures(monkeypatch, node)
    rid = (await submit(node, key, {"prompt": "a hill"}))["request_id"]
    async with open_stream(node, job_events(rid), key) as s:
        events = await s.events()
        assert events[-1]["data"]["status"] == "completed"
        # what is committed (the API's ledger routes would wait for the balance to settle)
        row = node.store.one("SELECT status, captured_uc FROM credit_holds WHERE job_id = ?", (rid,))
        assert (row["status"], row["captured_uc"]) == ("captured", 1_000_000)
    assert (await hold_of(node, key, rid))["status"] == "captured"
    assert (await balance(node, key))["available"] == "199.00"


async def test_whose_job_it_is_comes_from_the_live_actor_or_else_the_store(node, org, monkeypatch, autojump_clock):
    """The stream's 404 check asks the job's actor while it lives and the store after: both
    keep another organization out."""
    other = await node.create_org(name="Other", email="o2@other.test")
    rid = (await submit(node, org["api_key"], {"prompt": "a hill [[delay:5]]"}))["request_id"]  # renders 5 s
    gen = node.parts.generation
    assert gen.jobs.peek(rid) is not None  # the job's actor runs: its record answers
    assert gen.exists(rid, org["organization_id"]) and not gen.exists(rid, other["organization_id"])
    await wait_status(node, org["api_key"], rid)
    monkeypatch.setattr(gen.jobs, "peek", lambda key: None)  # the actor gone: the store answers
    assert gen.exists(rid, org["organization_id"]) and not gen.exists(rid, other["organization_id"])
    assert not gen.exists("req_nope", org["organization_id"])
    async with open_stream(node, job_events(rid), other["api_key"]) as s:
        assert s.status == 404
    async with open_stream(node, job_events(rid), org["api_key"]) as s:
        assert [e["data"]["status"] for e in await s.events()] == ["completed"]

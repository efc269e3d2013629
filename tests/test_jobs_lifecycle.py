"""Job actors: cancel in each state, nsfw, every failure message, per-model slots (fair
FIFO), restart recovery (queued/rendering jobs complete, holds settled, a backend that is
gone fails the job), the workflow interface (source, watchers), the video model."""

from __future__ import annotations

import dataclasses

import pytest
import trio

from service.actors.jobs.facade import Generation
from service.actors.jobs.messages import RenderHandle
from service.backends import run as backends_run
from service.catalog.request import SubmitRequest
from service.clock import parse_iso
from service.errors import ActorGone, NotFound
from service.storage import generation as gsql
from test_generation_support import (
    VIDEO, balance, hold_of, holds, job_row, running_node, slow_captures, status, submit, upload_ok, wait_hold,
    wait_status,
)
from test_media_samples import image_bytes
from waiting import settle, wait_until

FAILURES = [
    ("[[fail:upstream:502]]", "Generation failed upstream (HTTP 502). Credits were released."),
    ("[[fail:unavailable]]", "Generation failed: the model backend is unavailable. Credits were released."),
    ("[[fail:incomplete]]",
     "Generation failed: the model backend could not complete the request. Credits were released."),
    ("[[fail:no-output]]", "Generation failed: the model returned no output. Credits were released."),
    ("[[fail:internal]]", "Generation failed due to an internal error. Credits were released."),
]


async def balance_is(node, key, **want) -> dict | None:
    """The balance, when its fields have the wanted values (a condition for wait_until)."""
    b = await balance(node, key)
    return b if all(b[k] == v for k, v in want.items()) else None


async def cancel(node, key, rid):
    r = await node.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
    assert r.status_code == 200, await r.get_data(as_text=True)
    return await r.get_json()


@pytest.mark.parametrize("directive,message", FAILURES)
async def test_failure_messages_release_the_hold(node, org, directive, message):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": f"a hill {directive}"}))["request_id"]
    st = await wait_status(node, key, rid)
    assert (st["status"], st["error"]) == ("failed", message)
    assert st["credits"] == {"estimate": "1.00", "actual": None}
    assert (st["outputs"], st["images"], st["video"]) == ([], [], None)
    assert st["finished_at"] is not None
    assert (await wait_hold(node, key, rid, "released"))["captured"] is None
    assert (await balance(node, key))["available"] == "200.00"


async def test_nsfw(node, org):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "[[nsfw]] a hill"}))["request_id"]
    st = await wait_status(node, key, rid)
    assert (st["status"], st["error"], st["outputs"], st["credits"]["actual"]) == ("nsfw", None, [], None)
    await wait_hold(node, key, rid, "released")
    assert (await balance(node, key)) ["held"] == "0.00"


async def test_cancel_queued_on_a_busy_model(node, org):
    key = org["api_key"]
    busy = [(await submit(node, key, {"prompt": f"busy {i} [[delay:60]]"}))["request_id"] for i in range(2)]
    for rid in busy:
        await wait_status(node, key, rid, wanted=("rendering",))
    rid = (await submit(node, key, {"prompt": "waits", "webhook_url": "https://127.0.0.1:9/never"}))["request_id"]
    await settle()  # everything that could start it has run: both slots are still busy
    assert (await status(node, key, rid))["status"] == "queued"
    st = await cancel(node, key, rid)
    assert st == await status(node, key, rid)
    assert (st["status"], st["error"], st["credits"]["actual"]) == ("canceled", None, None)
    assert st["finished_at"] is not None
    assert (await hold_of(node, key, rid))["status"] == "released"
    assert job_row(node, rid)["started_at"] is None
    assert gsql.webhook_of_job(node.store, rid) is None  # canceled while queued: no webhook
    assert await cancel(node, key, rid) == st  # final: unchanged
    for b in busy:
        assert (await cancel(node, key, b))["status"] == "canceled"
    assert (await balance(node, key))["held"] == "0.00"


async def test_cancel_rendering_at_once_and_the_slot_frees(node, org):
    key = org["api_key"]
    rids = [(await submit(node, key, {"prompt": f"long {i} [[delay:60]]"}))["request_id"] for i in range(2)]
    for rid in rids:
        await wait_status(node, key, rid, wanted=("rendering",))
    waiting = (await submit(node, key, {"prompt": "next"}))["request_id"]
    st = await cancel(node, key, rids[0])
    assert st["status"] == "canceled" and st["finished_at"] is not None
    # ended before its 60 s render could have: the cancel did not wait for the render
    assert parse_iso(st["finished_at"]) < parse_iso(job_row(node, rids[0])["started_at"]) + 60
    assert (await hold_of(node, key, rids[0]))["status"] == "released"
    assert (await wait_status(node, key, waiting))["status"] == "completed"  # got the freed slot
    await cancel(node, key, rids[1])
    assert (await balance(node, key))["available"] == "199.00"


async def test_cancel_final_returns_it_unchanged(node, org):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "done"}))["request_id"]
    done = await wait_status(node, key, rid)
    assert await cancel(node, key, rid) == done
    assert (await hold_of(node, key, rid))["status"] == "captured"
    r = await node.call("POST", "/v1/generation/requests/00000000-0000-4000-8000-000000000000/cancel", key)
    assert r.status_code == 404


async def test_slots_are_fair_fifo_per_model(node, org):
    key = org["api_key"]
    first = [(await submit(node, key, {"prompt": f"a{i} [[delay:0.3]]"}))["request_id"] for i in range(2)]
    for rid in first:
        await wait_status(node, key, rid, wanted=("rendering",))
    line = [(await submit(node, key, {"prompt": f"b{i} [[delay:0.05]]"}))["request_id"] for i in range(5)]
    gen: Generation = node.parts.generation
    assert gen.slots.stats("proc-image") == (2, 5)
    assert [(await status(node, key, r))["status"] for r in line] == ["queued"] * 5
    for rid in first + line:
        await wait_status(node, key, rid)
    started = [job_row(node, r)["started_at"] for r in line]
    assert started == sorted(started)
    assert gen.slots.stats("proc-image") == (0, 0)


async def test_failed_and_canceled_jobs_free_their_slot(node, org):
    key = org["api_key"]
    for i in range(3):
        await submit(node, key, {"prompt": f"[[fail:internal]] {i}"})
    rid = (await submit(node, key, {"prompt": "after"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    assert node.parts.generation.slots.stats("proc-image") == (0, 0)


async def test_restart_recovery_completes_queued_and_rendering_jobs(tmp_path):
    async with running_node(tmp_path, test_mode=True) as n1:
        org = await n1.create_org()
        key = org["api_key"]
        # 2 s renders: long enough to see two rendering and one queued on a busy machine
        rids = [(await submit(n1, key, {"prompt": f"r{i} [[delay:2]]"}))["request_id"] for i in range(3)]
        for rid in rids[:2]:
            await wait_status(n1, key, rid, wanted=("rendering",))
        assert (await status(n1, key, rids[2]))["status"] == "queued"
        assert (await balance(n1, key))["held"] == "3.00"
    async with running_node(tmp_path, test_mode=True) as n2:
        sts = [await wait_status(n2, key, rid) for rid in rids]
        assert [s["status"] for s in sts] == ["completed"] * 3
        assert all(len(s["outputs"]) == 1 for s in sts)
        for rid in rids:
            assert (await wait_hold(n2, key, rid, "captured"))["captured"] == "1.00"
        b = await balance(n2, key)
        assert (b["available"], b["held"]) == ("197.00", "0.00")
        assert list((tmp_path / "work").iterdir()) == []


async def test_restart_with_a_backend_gone_fails_the_job_with_message_5(tmp_path, monkeypatch):
    async with running_node(tmp_path, test_mode=True) as n1:
        org = await n1.create_org()
        key = org["api_key"]
        rids = [(await submit(n1, key, {"prompt": f"g{i} [[delay:30]]"}))["request_id"] for i in range(3)]
        await wait_status(n1, key, rids[0], wanted=("rendering",))
    # the backend is still known but cannot run here any more (as a built-in whose codec went away)
    gone = dataclasses.replace(backends_run.BACKENDS["procedural_image"], available=lambda: False)
    monkeypatch.setitem(backends_run.BACKENDS, "procedural_image", gone)
    async with running_node(tmp_path, test_mode=True) as n2:
        for rid in rids:
            st = await wait_status(n2, key, rid)
            assert (st["status"], st["error"]) == (
                "failed", "Generation failed due to an internal error. Credits were released.")
            await wait_hold(n2, key, rid, "released")
        assert (await balance(n2, key))["available"] == "200.00"


async def test_restart_settles_a_hold_left_open_and_releases_an_orphan_hold(tmp_path):
    from service.actors.balance.messages import PlaceHold
    async with running_node(tmp_path, test_mode=True) as n1:
        org = await n1.create_org()
        key = org["api_key"]
        rid = (await submit(n1, key, {"prompt": "x"}))["request_id"]
        await wait_status(n1, key, rid)
        await wait_hold(n1, key, rid, "captured")
        # a final job whose hold was never settled (stopped right after the final commit) ...
        done = (await submit(n1, key, {"prompt": "y [[fail:internal]]"}))["request_id"]
        await wait_status(n1, key, done)
        await wait_hold(n1, key, done, "released")
        # ... simulated: a fresh held hold for a failed job marked unsettled
        await n1.parts.balances.ask(org["organization_id"], PlaceHold("h-unsettled", 3_000_000, job_id="j-x"))
        await n1.store.write(lambda c: c.execute(
            "UPDATE jobs SET hold_id = 'h-unsettled', hold_settled = 0 WHERE id = ?", (done,)))
        # and an orphan: a hold placed for a job that was never committed
        await n1.parts.balances.ask(org["organization_id"], PlaceHold("h-orphan", 2_000_000, job_id="never"))
        assert (await balance(n1, key))["held"] == "5.00"
    async with running_node(tmp_path, test_mode=True) as n2:
        await wait_until(lambda: balance_is(n2, key, held="0.00"))
        statuses = {h["id"]: h["status"] for h in await holds(n2, key)}
        assert statuses["h-unsettled"] == "released" and statuses["h-orphan"] == "released"
        assert job_row(n2, done)["hold_settled"] == 1
        assert (await balance(n2, key))["available"] == "199.00"


# -- the workflow interface ---------------------------------------------------------------------
async def test_workflow_submit_notify_and_watch(node, org):
    gen: Generation = node.parts.generation
    org_id, project_id = org["organization_id"], org["default_project_id"]
    seen: list[dict] = []
    plan = gen.plan(org_id, project_id, capability="image.generate", request=SubmitRequest(prompt="step"))
    resp = await gen.submit(plan, org_id=org_id, project_id=project_id, source="workflow",
                            workflow_run_id="run-1", notify=seen.append)
    rid = resp["request_id"]
    await wait_until(lambda: seen)
    assert len(seen) == 1 and seen[0]["status"] == "completed" and seen[0]["source"] == "workflow"
    assert seen[0] == gen.status(rid)
    h = await hold_of(node, org["api_key"], rid)
    assert h["workflow_run_id"] == "run-1"
    # watching a final job notifies at once; submitting the same id again creates nothing
    late: list[dict] = []
    await gen.watch(rid, late.append)
    assert late == [seen[0]]
    again: list[dict] = []
    assert await gen.submit(plan, org_id=org_id, project_id=project_id, job_id=rid, notify=again.append) == resp
    assert again == [seen[0]]  # a repeated Submit with a watcher registers it (final: at once)
    assert len(await holds(node, org["api_key"])) == 1
    with pytest.raises(NotFound):
        await gen.watch("00000000-0000-4000-8000-000000000000", late.append)


async def test_workflow_watchers_hear_a_cancel_once(node, org):
    gen: Generation = node.parts.generation
    org_id, project_id = org["organization_id"], org["default_project_id"]
    seen: list[dict] = []
    plan = gen.plan(org_id, project_id, capability="image.generate", request=SubmitRequest(prompt="[[delay:60]]"))
    rid = (await gen.submit(plan, org_id=org_id, project_id=project_id, source="workflow",
                            workflow_run_id="run-2", notify=seen.append))["request_id"]
    await gen.watch(rid, seen.append)
    await wait_status(node, org["api_key"], rid, wanted=("rendering",))
    st = await gen.cancel(org_id, rid)
    assert st["status"] == "canceled"
    await wait_until(lambda: len(seen) == 2)
    await settle()  # and no third notice comes
    assert [s["status"] for s in seen] == ["canceled", "canceled"]
    actor = gen.jobs.peek(rid)
    assert actor is None or actor.render is None


async def test_a_crashed_actor_adopts_its_running_render(node, org, monkeypatch):
    key = org["api_key"]
    gen: Generation = node.parts.generation
    rid = (await submit(node, key, {"prompt": "adopt [[delay:0.3]]"}))["request_id"]
    await wait_status(node, key, rid, wanted=("rendering",))
    handle = gen.jobs.peek(rid).render
    assert isinstance(handle, RenderHandle)
    # an actor crash: the supervisor reloads it from SQLite; it must not start a second render
    from service.actors.jobs import actor as jobs_mod

    boom = {"armed": True}
    real = jobs_mod.JobActor._watch

    def crash(self, notify):
        if boom.pop("armed", False):
            raise RuntimeError("boom")
        return real(self, notify)

    monkeypatch.setattr(jobs_mod.JobActor, "_watch", crash)
    with pytest.raises(ActorGone):  # the crashed actor answers its caller ActorGone
        await gen.watch(rid, lambda st: None)
    await settle()  # the supervisor has reloaded the actor from SQLite
    assert gen.jobs.peek(rid).render is handle  # the successor adopted the running render
    st = await wait_status(node, key, rid)
    assert st["status"] == "completed" and len(st["outputs"]) == 1
    assert (await hold_of(node, key, rid))["status"] == "captured"


# -- video ---------------------------------------------------------------------------------------
async def test_video_job_renders_an_mp4(node, org):
    key = org["api_key"]
    frame = await upload_ok(node, key, image_bytes("PNG", 320, 180))
    rid = (await submit(node, key, {"prompt": "drift", "resolution": "480p",
                                    "inputs": {"start_frame": [frame["id"]]}}, path=VIDEO))["request_id"]
    st = await wait_status(node, key, rid, timeout=120)
    assert st["status"] == "completed", st
    assert st["images"] == [] and st["video"] == st["outputs"][0]
    v = st["video"]
    assert (v["content_type"], v["width"], v["height"], v["duration_s"]) == ("video/mp4", 854, 480, 5.0)
    assert st["credits"]["actual"] == "10.00"


async def test_with_the_threaded_writer_as_in_production(tmp_path):
    """The store's writer runs write functions in a worker thread outside tests: nothing of
    generation may read the trio clock inside a write function."""
    async with running_node(tmp_path, test_mode=True, inline=False) as n1:
        org = await n1.create_org()
        key = org["api_key"]
        rid = (await submit(n1, key, {"prompt": "t", "webhook_url": "http://example.com/h"},
                            headers={"Idempotency-Key": "threaded"}))["request_id"]
        assert (await wait_status(n1, key, rid))["status"] == "completed"
        frame = await upload_ok(n1, key, image_bytes("PNG"))
        slow = (await submit(n1, key, {"prompt": "[[delay:30]]"}))["request_id"]
        await wait_status(n1, key, slow, wanted=("rendering",))
    async with running_node(tmp_path, test_mode=True, inline=False) as n2:
        again = await submit(n2, key, {"prompt": "t", "webhook_url": "http://example.com/h"},
                             headers={"Idempotency-Key": "threaded"})
        assert again["request_id"] == rid
        await wait_status(n2, key, slow, wanted=("rendering",))
        r = await n2.call("POST", f"/v1/generation/requests/{slow}/cancel", key)
        assert (await r.get_json())["status"] == "canceled"
        await wait_hold(n2, key, slow, "released")
        r = await n2.call("GET", f"/v1/generation/assets/{frame['id']}", key)
        assert r.status_code == 200


async def test_a_failed_job_write_releases_the_hold_and_creates_nothing(node, org, monkeypatch):
    key = org["api_key"]

    def broken(conn, row):
        raise RuntimeError("disk says no")

    monkeypatch.setattr(gsql, "insert_job", broken)
    r = await node.call("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": "x"})
    assert r.status_code == 500
    assert (await r.get_json())["error"]["code"] == "request.internal_error"
    hs = await holds(node, key)
    assert [h["status"] for h in hs] == ["released"]
    assert node.store.one("SELECT COUNT(*) AS n FROM jobs")["n"] == 0
    assert (await balance(node, key))["available"] == "200.00"
    await wait_until(lambda: node.parts.generation.jobs.keys() == [])
    monkeypatch.undo()
    rid = (await submit(node, key, {"prompt": "fine"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"


async def test_a_render_with_no_outcome_within_the_timeout_fails_and_releases(node, org, autojump_clock):
    """An engine that neither finishes nor fails: at the model's timeout (600 s by default,
    from the start of the render, on the service clock) the job fails with the "could not
    complete" message and its hold is released; no hold stays held past it."""
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill [[delay:3600]]"}))["request_id"]
    st = await wait_status(node, key, rid, wanted=("rendering",))
    started = trio.current_time()
    st = await wait_status(node, key, rid, timeout=3600)
    assert (st["status"], st["error"]) == (
        "failed", "Generation failed: the model backend could not complete the request. Credits were released.")
    assert 600 <= trio.current_time() - started < 601
    assert (await wait_hold(node, key, rid, "released"))["captured"] is None
    assert (await balance(node, key))["held"] == "0.00"


async def test_a_capture_whose_commit_fails_is_tried_again_and_settles_with_the_job(node, org, autojump_clock,
                                                                                    monkeypatch):
    """The balance's commit of a completed job's capture fails once (Unavailable): the job
    does not mark its hold settled (it did, and the hold stayed held for good); it tries
    again SETTLE_RETRY_S later, and the capture and the job's `hold_settled` commit in one
    transaction. The final status reaches the job's stream only after the settle attempt."""
    from service.actors.jobs.effects import SETTLE_RETRY_S
    from service.storage import billing as bsql
    key = org["api_key"]
    real, failed = bsql.persist, []

    def persist_failing_a_capture_once(conn, org_id, w):
        real(conn, org_id, w)
        if not failed and any(u[0] == "captured" for u in w.hold_updates):
            failed.append(trio.current_time())
            raise RuntimeError("disk on fire")

    monkeypatch.setattr(bsql, "persist", persist_failing_a_capture_once)
    rid = (await submit(node, key, {"prompt": "a hill"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    await wait_until(lambda: failed)
    assert job_row(node, rid)["hold_settled"] == 0
    assert (await hold_of(node, key, rid))["status"] == "held"
    h = await wait_hold(node, key, rid, "captured", timeout=SETTLE_RETRY_S + 5)
    assert trio.current_time() - failed[0] >= SETTLE_RETRY_S - 1e-6
    assert h["captured"] == "1.00" and job_row(node, rid)["hold_settled"] == 1
    assert (await balance(node, key))["available"] == "199.00"


async def test_the_job_and_its_hold_are_settled_in_one_commit(node, org, monkeypatch):
    """`hold_settled` is written inside the balance's transaction (Capture.also): a failing
    job write there rolls the capture back too, and the job tries again."""
    import sqlite3

    from service.storage import generation as gsql_mod
    key = org["api_key"]
    real, calls = gsql_mod.update_job, []
    q = "SELECT status FROM credit_holds WHERE job_id = ?"

    def update_job(conn, job_id, fields):
        if fields == {"hold_settled": 1}:
            outside = sqlite3.connect(f"file:{node.store.path}?mode=ro", uri=True)  # sees only what is committed
            try:
                calls.append((conn.execute(q, (job_id,)).fetchone()["status"], outside.execute(q, (job_id,)).fetchone()[0]))
            finally:
                outside.close()
        return real(conn, job_id, fields)

    monkeypatch.setattr(gsql_mod, "update_job", update_job)
    rid = (await submit(node, key, {"prompt": "a hill"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    await wait_hold(node, key, rid, "captured")
    assert calls == [("captured", "held")]  # inside the capture's transaction: not yet committed
    assert job_row(node, rid)["hold_settled"] == 1


async def test_a_settle_whose_ask_times_out_after_the_balance_took_it_writes_everything_once(
        node, org, autojump_clock, monkeypatch, nursery):
    """The job's final state rides in the balance's transaction. When the ask times out but
    the balance actor still commits the capture later, the job has meanwhile written its
    final state itself: the late run only records the settlement (no second asset row),
    and the retry charges nothing more."""
    from service.actors.balance.messages import Capture
    from service.errors import AskTimeout
    balances = node.parts.balances
    real_ask, late = balances.ask, []

    async def ask(org_id, msg, *a, **kw):
        if isinstance(msg, Capture) and not late:
            async def deliver_later():
                await trio.sleep(1)  # the job has given up and written its final state by now
                late.append(await real_ask(org_id, msg, *a, **kw))
            nursery.start_soon(deliver_later)
            raise AskTimeout("the balance did not answer in time")
        return await real_ask(org_id, msg, *a, **kw)

    monkeypatch.setattr(balances, "ask", ask)
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    assert job_row(node, rid)["status"] == "completed"  # committed by the job itself after the timeout
    await wait_until(lambda: late)
    await wait_until(lambda: job_row(node, rid)["hold_settled"] == 1)
    await trio.sleep(10)  # past the retry
    rows = node.store.all("SELECT id FROM assets WHERE job_id = ?", (rid,))
    assert len(rows) == 1
    assert (await hold_of(node, key, rid))["captured"] == "1.00"
    assert (await balance(node, key))["available"] == "199.00"


async def test_the_status_route_shows_a_final_status_only_once_it_and_the_charge_are_committed(node, org,
                                                                                                monkeypatch):
    """The capture's commit is made slow (0.3 s in the writer's thread): every answer of the
    status route meanwhile is either not final, or final with its outputs stored and its hold
    captured in the database (no image URL that 404s, no completed job not yet charged)."""
    key = org["api_key"]
    slow_captures(monkeypatch, node)
    rid = (await submit(node, key, {"prompt": "a hill"}))["request_id"]
    seen = []
    with trio.fail_after(30):
        while not seen or seen[-1] != "completed":
            st = await status(node, key, rid)
            seen.append(st["status"])
            if st["status"] == "completed":
                row = node.store.one("SELECT status, captured_uc FROM credit_holds WHERE job_id = ?", (rid,))
                assert (row["status"], row["captured_uc"]) == ("captured", 1_000_000)
                assert len(node.store.all("SELECT id FROM assets WHERE job_id = ?", (rid,))) == 1
            await trio.sleep(0.02)
    assert "rendering" in seen  # the status was read while the job was ending, not only after

"""The Cog engine against a real Cog server (`python -m cog.server.http`, no Docker) with a
small Pillow predictor (tests/engines/cog_predictor.py): outcome by webhook, cancel, 409 at
capacity as backpressure, a server killed mid-job, the webhook route's refusals; and the
same for `outcome = "response"` (the PUT's answer), with an orphaned prediction and a node
restart."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from service.engines import common

from engine_support import CogServer, cog_catalog, engine_node
from test_generation_support import balance, submit, wait_hold, wait_status
from waiting import wait_until

UNAVAILABLE = "Generation failed: the model backend is unavailable. Credits were released."
INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
COG = "/v1/generation/models/cog-image"



async def health(url: str) -> str:
    async with httpx.AsyncClient() as c:
        return (await c.get(f"{url}/health-check", timeout=5)).json()["status"]


async def health_is(url: str, status: str) -> bool:
    return await health(url) == status


@pytest.fixture
def short_retries(monkeypatch):
    """Transient faults are tried again for ~30 s (common.RETRY_S) before a server counts as
    gone; these tests, on the real clock, take a 0.3 s bound."""
    monkeypatch.setattr(common, "RETRY_S", (0.1, 0.2))


async def test_a_job_completes_through_cog_and_is_charged(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url)) as n:
        org = await n.create_org()
        key = org["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox in the snow", "seed": 7}, path=COG))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        [out] = st["outputs"]
        assert (out["content_type"], out["width"], out["height"]) == ("image/png", 1024, 1024)
        r = await n.call("GET", out["url"].removeprefix("http://testserver"), key)
        assert r.status_code == 302  # to the signed file URL
        r = await n.call("GET", r.headers["Location"].removeprefix("http://testserver"), None)
        assert r.status_code == 200
        body = await r.get_data()
        # the predictor's picture: its colours come from sha256("7:<prompt>")
        from io import BytesIO

        from PIL import Image
        digest = hashlib.sha256(b"7:a red fox in the snow").digest()
        assert Image.open(BytesIO(body)).convert("RGB").getpixel((0, 0)) == tuple(digest[:3])
        assert (await wait_hold(n, key, rid, "captured"))["amount"] == "3.00"
        assert (await balance(n, key))["available"] == "197.00"


async def test_predictor_errors_and_empty_outputs_fail_the_job_and_release(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url)) as n:
        key = (await n.create_org())["api_key"]
        failed = (await submit(n, key, {"prompt": "x [fail]"}, path=COG))["request_id"]
        empty = (await submit(n, key, {"prompt": "x [empty]"}, path=COG))["request_id"]
        assert ((await wait_status(n, key, failed))["error"]) == INCOMPLETE
        assert ((await wait_status(n, key, empty))["error"]) == NO_OUTPUT
        for rid in (failed, empty):
            await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == "200.00"


async def test_cancel_while_running_cancels_the_prediction(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "long [slow:30]"}, path=COG))["request_id"]
        await wait_status(n, key, rid, wanted=("rendering",))
        await wait_until(lambda: health_is(cog.url, "BUSY"), 10, every=0.05)
        r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
        assert r.status_code == 200 and (await r.get_json())["status"] == "canceled"
        await wait_hold(n, key, rid, "released")
        # the predictor was stopped, not left to run its 30 s
        await wait_until(lambda: health_is(cog.url, "READY"), 15, every=0.1)


async def test_at_capacity_is_backpressure_not_failure(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url)) as n:
        key = (await n.create_org())["api_key"]
        async with httpx.AsyncClient() as c:  # someone else holds the server's one slot
            r = await c.put(f"{cog.url}/predictions/outsider", json={"input": {"prompt": "[slow:2]"}},
                            headers={"Prefer": "respond-async"})
            assert r.status_code == 202
            busy = await c.put(f"{cog.url}/predictions/probe", json={"input": {"prompt": "x"}},
                               headers={"Prefer": "respond-async"})
            assert busy.status_code == 409  # what our job meets first
        rid = (await submit(n, key, {"prompt": "after the outsider"}, path=COG))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)


async def test_a_server_killed_mid_job_fails_it_and_the_model_turns_unavailable(tmp_path, short_retries):
    server = CogServer(tmp_path / "cog.log").start()
    try:
        async with engine_node(tmp_path, cog_catalog(server.url)) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, {"prompt": "doomed [slow:60]"}, path=COG))["request_id"]
            await wait_status(n, key, rid, wanted=("rendering",))
            server.stop()
            st = await wait_status(n, key, rid, timeout=30)
            assert (st["status"], st["error"]) == ("failed", UNAVAILABLE)
            await wait_hold(n, key, rid, "released")
            assert (await balance(n, key))["available"] == "200.00"
            # its only server is known down: submits now answer 503 and create nothing
            r = await n.call("POST", COG, key, json={"prompt": "x"})
            assert r.status_code == 503
            e = (await r.get_json())["error"]
            assert (e["code"], e["message"]) == ("request.service_unavailable",
                                                 "Model cog-image is not available on this deployment.")
            models = (await (await n.call("GET", "/v1/generation/models", key)).get_json())["data"]
            assert [(m["id"], m["available"]) for m in models] == [("cog-image", False)]
    finally:
        server.stop()


async def test_the_engine_webhook_route_refuses_a_wrong_token_and_a_bad_body(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url)) as n:
        ctx = n.parts.engines.context
        good = ctx.hook_url("job-1").removeprefix(n.parts.settings.base_url)
        r = await n.call("POST", good[:-1] + ("0" if good[-1] != "0" else "1"), None, json={"status": "succeeded"})
        assert r.status_code == 404
        r = await n.call("POST", good, None, data=b"not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert (await r.get_json())["error"]["message"] == "Body must be a JSON object."
        r = await n.call("POST", good, None, json=["a list"])
        assert r.status_code == 400
        r = await n.call("POST", good, None, json={"status": "succeeded"})  # nobody waits: accepted, dropped
        assert (r.status_code, await r.get_json()) == (200, {"received": True})


async def test_a_completed_webhook_that_comes_before_the_create_answer_ends_the_job(tmp_path):
    """Cog posts its webhooks from the runner as the prediction moves: a fast prediction's
    `completed` can reach the node before the PUT's own answer (`starting`). The hooks are
    listened for before the PUT, so the outcome is taken, and no health check is needed."""
    from io import BytesIO

    from PIL import Image

    from service.backends.base import RenderRequest
    from service.catalog.engines import CogEngine
    from service.engines import cog
    from service.engines.context import Context
    from service.engines.drive import drive

    buf = BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, "PNG")
    output = "data:image/png;base64," + __import__("base64").b64encode(buf.getvalue()).decode()
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        assert request.method == "PUT"
        ctx.deliver("job-1", ctx.token("job-1"), {"id": "job-1", "status": "succeeded", "output": output})
        return httpx.Response(202, json={"id": "job-1", "status": "starting", "output": None})

    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as http:
        ctx = Context(http, lambda: "http://node", b"s" * 32, lambda *a: None)
        req = RenderRequest("job-1", "image.generate", "cog-image", "cog", "x", 1, None, "1k", None, {},
                            tmp_path, True)
        done = await drive(cog.Cog(ctx), CogEngine(urls=["http://cog"], poll_s=30), ctx, req, "http://cog", 1)
        [out] = done.outputs
    assert (out.content_type, out.width, seen) == ("image/png", 8, ["PUT /predictions/job-1"])


async def test_a_server_of_several_slots_is_asked_only_for_the_completed_webhook(cog, tmp_path, monkeypatch):
    """For a model of concurrency > 1 the node asks Cog for the `completed` webhook only
    (`webhook_events_filter`): the real server accepts that filter, sends no `start`, and the
    jobs still end through it (the one-slot test server answers the second job 409 until the
    first is done: backpressure, as at capacity)."""
    from service.engines.context import Context
    real, seen = Context.deliver, []

    def deliver(self, job_id, token, payload, *rest):
        seen.append(payload.get("status"))
        return real(self, job_id, token, payload, *rest)

    monkeypatch.setattr(Context, "deliver", deliver)
    async with engine_node(tmp_path, cog_catalog(cog.url, concurrency=2)) as n:
        key = (await n.create_org())["api_key"]
        rids = [(await submit(n, key, {"prompt": f"fox {i}"}, path=COG))["request_id"] for i in range(2)]
        for rid in rids:
            assert (await wait_status(n, key, rid))["status"] == "completed"
    assert seen == ["succeeded", "succeeded"], seen


async def test_a_single_slot_prediction_longer_than_the_lost_job_rule_completes(cog, tmp_path, monkeypatch):
    """A single-slot model is asked for the `completed` webhook only too: its lost-job rule
    (READY for five health checks with no outcome) reads the health check, and the real
    server answers it BUSY for as long as it holds the prediction. Here the rule would fire
    after 0.5 s (`poll_s` 0.1) and the prediction takes 1.5 s."""
    from service.engines.context import Context
    real, seen = Context.deliver, []

    def deliver(self, job_id, token, payload, *rest):
        seen.append(payload.get("status"))
        return real(self, job_id, token, payload, *rest)

    monkeypatch.setattr(Context, "deliver", deliver)
    async with engine_node(tmp_path, cog_catalog(cog.url, extra="poll_s = 0.1")) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "fox [slow:1.5]"}, path=COG))["request_id"]
        st = await wait_status(n, key, rid)
    assert st["status"] == "completed", st
    assert seen == ["succeeded"], seen


RESPONSE = 'outcome = "response"'


async def test_response_mode_takes_the_outcome_from_the_put_answer_with_no_webhook(cog, tmp_path, monkeypatch):
    """`outcome = "response"`: the PUT waits for the prediction and answers its end. No
    webhook is asked for or sent, so a node Cog cannot reach still completes the job. The
    answer may take longer than `timeout_s` (a bound per call, not on the prediction)."""
    from service.engines.context import Context
    real, hooks = Context.deliver, []

    def deliver(self, *args, **kw):
        hooks.append(args)
        return real(self, *args, **kw)

    monkeypatch.setattr(Context, "deliver", deliver)
    async with engine_node(tmp_path, cog_catalog(cog.url, extra=RESPONSE + "\ntimeout_s = 0.5")) as n:
        n.parts.settings.base_url = "http://127.0.0.1:9"  # the discard port: no webhook could arrive
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox [slow:1.5]", "seed": 7}, path=COG))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)
        r = await n.call("GET", st["outputs"][0]["url"].removeprefix("http://testserver"), key)
        r = await n.call("GET", r.headers["Location"].removeprefix("http://testserver"), None)
        from io import BytesIO

        from PIL import Image
        digest = hashlib.sha256(b"7:a red fox [slow:1.5]").digest()
        assert Image.open(BytesIO(await r.get_data())).convert("RGB").getpixel((0, 0)) == tuple(digest[:3])
        assert (await wait_hold(n, key, rid, "captured"))["amount"] == "3.00"
        assert (await balance(n, key))["available"] == "197.00"
    assert hooks == []


async def test_response_mode_failures_and_cancel(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(cog.url, extra=RESPONSE)) as n:
        key = (await n.create_org())["api_key"]
        failed = (await submit(n, key, {"prompt": "x [fail]"}, path=COG))["request_id"]
        assert ((await wait_status(n, key, failed))["error"]) == INCOMPLETE
        empty = (await submit(n, key, {"prompt": "x [empty]"}, path=COG))["request_id"]
        assert ((await wait_status(n, key, empty))["error"]) == NO_OUTPUT
        rid = (await submit(n, key, {"prompt": "long [slow:30]"}, path=COG))["request_id"]
        await wait_status(n, key, rid, wanted=("rendering",))
        await wait_until(lambda: health_is(cog.url, "BUSY"), 10, every=0.05)
        r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
        assert r.status_code == 200 and (await r.get_json())["status"] == "canceled"
        await wait_until(lambda: health_is(cog.url, "READY"), 15, every=0.1)  # stopped, not left to run 30 s
        for done in (failed, empty, rid):
            await wait_hold(n, key, done, "released")
        assert (await balance(n, key))["available"] == "200.00"


async def test_response_mode_a_server_killed_mid_job_fails_it_as_unavailable(tmp_path, short_retries):
    server = CogServer(tmp_path / "cog.log").start()
    try:
        async with engine_node(tmp_path, cog_catalog(server.url, extra=RESPONSE)) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, {"prompt": "doomed [slow:60]"}, path=COG))["request_id"]
            await wait_status(n, key, rid, wanted=("rendering",))
            await wait_until(lambda: health_is(server.url, "BUSY"), 10, every=0.05)
            server.stop()
            st = await wait_status(n, key, rid, timeout=30)
            assert (st["status"], st["error"]) == ("failed", UNAVAILABLE)
            await wait_hold(n, key, rid, "released")
            assert (await balance(n, key))["available"] == "200.00"
    finally:
        server.stop()


async def test_response_mode_runs_again_a_prediction_no_request_follows(cog, tmp_path):
    """A PUT answered 202 (its id runs, started by an earlier request that is gone, as after
    a node restart before Cog saw the connection close): that prediction is cancelled and
    this job's own input runs. The picture is the one of this job's prompt."""
    from io import BytesIO

    from PIL import Image

    from service.backends.base import RenderRequest
    from service.catalog.engines import CogEngine
    from service.engines import cog as cog_engine
    from service.engines.context import Context
    from service.engines.drive import drive
    from service.engines.transport import engine_client

    async with httpx.AsyncClient() as c:
        r = await c.put(f"{cog.url}/predictions/job-orphan", json={"input": {"prompt": "orphan [slow:30]"}},
                        headers={"Prefer": "respond-async"})
        assert r.status_code == 202
    async with engine_client() as http:
        ctx = Context(http, lambda: "http://127.0.0.1:9", b"s" * 32, lambda *a: None)
        req = RenderRequest("job-orphan", "image.generate", "cog-image", "cog", "a fox", 7, None, "1k", None, {},
                            tmp_path, True)
        cfg = CogEngine(urls=[cog.url], outcome="response", bind={"prompt": "prompt", "seed": "seed"})
        done = await drive(cog_engine.Cog(ctx), cfg, ctx, req, cog.url, 1)
    [out] = done.outputs
    pixel = Image.open(BytesIO(out.path.read_bytes())).convert("RGB").getpixel((0, 0))
    assert pixel == tuple(hashlib.sha256(b"7:a fox").digest()[:3])
    assert await health(cog.url) == "READY"


async def test_response_mode_a_node_restart_runs_the_prediction_again_and_charges_once(cog, tmp_path):
    """A stopping node closes the PUT's connection and Cog cancels the prediction (response
    mode's price, docs/engines.md); the restarted node runs it again and charges it once."""
    catalog = cog_catalog(cog.url, extra=RESPONSE)
    async with engine_node(tmp_path / "n", catalog) as n1:
        key = (await n1.create_org())["api_key"]
        rid = (await submit(n1, key, {"prompt": "fox [slow:1]", "seed": 3}, path=COG))["request_id"]
        await wait_status(n1, key, rid, wanted=("rendering",))
        await wait_until(lambda: health_is(cog.url, "BUSY"), 10, every=0.05)
    await wait_until(lambda: health_is(cog.url, "READY"), 10, every=0.05)  # cancelled with its connection
    async with engine_node(tmp_path / "n", catalog) as n2:
        st = await wait_status(n2, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)
        assert (await wait_hold(n2, key, rid, "captured"))["amount"] == "3.00"
        assert (await balance(n2, key))["available"] == "197.00"

"""Job webhooks through a real HTTPS receiver with a test CA: one unsigned POST of the
status object per final status (completed, failed, nsfw, canceled while rendering), none
for a job canceled while queued, never to http://, no retry, and the outbox across a
restart (`sending` -> unknown and not re-sent; `pending` sent)."""

from __future__ import annotations

import json

import pytest

from conftest import outboxes_settled
from faultserver import fault_server
from service.storage import generation as gsql
from test_generation_support import running_node, status, submit, wait_status
from waiting import wait_until


@pytest.fixture
async def env(nursery, tmp_path):
    async with fault_server(nursery) as fs:
        ca = fs.write_ca(tmp_path / "ca.pem")
        async with running_node(tmp_path / "node", test_mode=True, webhook_allow_private=True,
                                webhook_ca_file=ca) as node:
            org = await node.create_org()
            yield fs, node, org["api_key"]


def hook(node, rid: str) -> dict | None:
    return gsql.webhook_of_job(node.store, rid)


async def wait_hook_state(node, rid: str, states=("delivered", "failed", "skipped", "unknown")) -> dict:
    def reached() -> dict | None:
        row = hook(node, rid)
        return row if row is not None and row["state"] in states else None

    return await wait_until(reached, 15)


async def received(fs, tag: str, count: int = 1):
    def arrived() -> list:
        got = [r for r in fs.requests if r.query.get("job") == [tag]]
        return got if len(got) >= count else []

    return await wait_until(arrived, 15)


@pytest.mark.parametrize("prompt,final", [
    ("done", "completed"), ("[[fail:no-output]]", "failed"), ("[[nsfw]]", "nsfw"),
])
async def test_one_post_of_the_status_object(env, prompt, final):
    fs, node, key = env
    rid = (await submit(node, key, {"prompt": prompt, "webhook_url": fs.https_url("/ok")}))["request_id"]
    st = await wait_status(node, key, rid)
    assert st["status"] == final
    row = await wait_hook_state(node, rid)
    assert (row["state"], row["status_code"], row["error"]) == ("delivered", 200, None)
    got = [r for r in fs.seen("/ok") if json.loads(r.body)["request_id"] == rid]
    assert len(got) == 1
    req = got[0]
    assert req.listener == "https" and req.method == "POST"
    assert req.header("Content-Type") == "application/json"
    assert req.header("X-Service-Signature") is None
    assert json.loads(req.body) == await status(node, key, rid)


async def test_canceled_while_rendering_posts_canceled_when_the_render_ends(env):
    fs, node, key = env
    url = fs.https_url("/ok")
    rid = (await submit(node, key, {"prompt": "[[delay:60]]", "webhook_url": url}))["request_id"]
    await wait_status(node, key, rid, wanted=("rendering",))
    r = await node.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
    assert (await r.get_json())["status"] == "canceled"
    row = await wait_hook_state(node, rid)
    assert row["state"] == "delivered"
    body = json.loads(row["body"])
    assert body["status"] == "canceled" and body == await status(node, key, rid)
    assert len([r for r in fs.seen("/ok") if json.loads(r.body)["request_id"] == rid]) == 1


async def test_no_webhook_for_a_job_canceled_while_queued_and_never_http(env):
    fs, node, key = env
    busy = [(await submit(node, key, {"prompt": f"[[delay:60]] {i}"}))["request_id"] for i in range(2)]
    for b in busy:
        await wait_status(node, key, b, wanted=("rendering",))
    queued = (await submit(node, key, {"prompt": "q", "webhook_url": fs.https_url("/ok")}))["request_id"]
    await node.call("POST", f"/v1/generation/requests/{queued}/cancel", key)
    plain = (await submit(node, key, {"prompt": "p", "webhook_url": fs.http_url("/ok")}))["request_id"]
    for b in busy:
        await node.call("POST", f"/v1/generation/requests/{b}/cancel", key)
    assert (await wait_status(node, key, plain))["status"] == "completed"
    row = await wait_hook_state(node, plain)
    assert (row["state"], row["error_class"]) == ("skipped", "insecure_url")
    # a job after them, with a webhook, proves the dispatcher ran past them
    marker = (await submit(node, key, {"prompt": "m", "webhook_url": fs.https_url("/status/204")}))["request_id"]
    await wait_status(node, key, marker)
    assert (await wait_hook_state(node, marker))["state"] == "delivered"
    assert hook(node, queued) is None
    assert [r for r in fs.requests if r.listener == "http"] == []
    bodies = [json.loads(r.body)["request_id"] for r in fs.requests if r.body]
    assert queued not in bodies and plain not in bodies


async def test_non_2xx_is_not_retried(env):
    fs, node, key = env
    rid = (await submit(node, key, {"prompt": "x", "webhook_url": fs.https_url("/status/500")}))["request_id"]
    await wait_status(node, key, rid)
    row = await wait_hook_state(node, rid)
    assert (row["state"], row["status_code"], row["error"], row["error_class"]) == (
        "failed", 500, "500 Internal Server Error", "non_2xx")
    await outboxes_settled(node)
    assert len(fs.seen("/status/500")) == 1


async def test_untrusted_certificate_fails_once(env):
    fs, node, key = env
    rid = (await submit(node, key, {"prompt": "x", "webhook_url": fs.untrusted_url("/ok")}))["request_id"]
    await wait_status(node, key, rid)
    row = await wait_hook_state(node, rid)
    assert (row["state"], row["status_code"], row["error_class"]) == ("failed", None, "tls")


async def test_outbox_across_a_restart(nursery, tmp_path):
    async with fault_server(nursery) as fs:
        ca = fs.write_ca(tmp_path / "ca.pem")
        settings = dict(test_mode=True, webhook_allow_private=True, webhook_ca_file=ca)
        async with running_node(tmp_path / "node", **settings) as n1:
            org = await n1.create_org()
            key = org["api_key"]
            rids = [(await submit(n1, key, {"prompt": f"j{i} [[delay:30]]",
                                            "webhook_url": fs.https_url("/ok")}))["request_id"] for i in range(4)]
            await wait_status(n1, key, rids[0], wanted=("rendering",))
            await wait_status(n1, key, rids[1], wanted=("rendering",))
            # rids[2] canceled while queued (no webhook); rids[0] canceled while rendering; then
            # simulate a stop at two points of the outbox: one row `sending`, one `pending`
            await n1.call("POST", f"/v1/generation/requests/{rids[2]}/cancel", key)
            await n1.call("POST", f"/v1/generation/requests/{rids[0]}/cancel", key)
            await wait_hook_state(n1, rids[0])
            await n1.store.write(lambda c: c.execute(
                "UPDATE job_webhooks SET state = 'sending', status_code = NULL WHERE job_id = ?", (rids[0],)))
            fake = {"id": "w-pending", "job_id": "job-pending", "url": fs.https_url("/ok") + "?job=pending",
                    "body": "{}", "state": "pending", "created_at": "2026-01-01T00:00:00.000000Z"}
            await n1.store.write(lambda c: gsql.insert_webhook(c, fake))
            before = len(fs.requests)
        async with running_node(tmp_path / "node", **settings) as n2:
            await received(fs, "pending")
            row = await wait_hook_state(n2, rids[0], states=("unknown",))
            assert row["error_class"] == "unknown"
            # rids[1] (rendering at the stop) and rids[3] (queued) re-render after the restart
            for rid in (rids[1], rids[3]):
                await n2.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
            for rid in (rids[1], rids[3]):
                assert (await wait_hook_state(n2, rid))["state"] == "delivered"
            await outboxes_settled(n2)  # nothing else left to send
            after = [json.loads(r.body).get("request_id") for r in fs.requests[before:]]
            assert rids[0] not in after  # `sending` at the stop: never re-sent
            assert rids[2] not in after
            assert sorted(x for x in after if x) == sorted([rids[1], rids[3]])

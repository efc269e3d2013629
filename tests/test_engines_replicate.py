"""The Replicate engine against a protocol-faithful peer of the hosted predictions API
(tests/peers/replicate.py): create with `Prefer: wait`, poll `urls.get`, signed webhooks
(a bad signature is refused), cancel, every failure mapping, the token kept secret."""

from __future__ import annotations

import logging

import pytest

from service.clock import parse_iso
from service.engines import common

from engine_support import engine_node, free_port
from peers.replicate import MODELS, run_peer
from test_generation_support import balance, submit, wait_hold, wait_status
from waiting import wait_until

UPSTREAM = "Generation failed upstream (HTTP {}). Credits were released."
UNAVAILABLE = "Generation failed: the model backend is unavailable. Credits were released."
INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
PATH = "/v1/generation/models/rep-image"
TOKEN = "r8_secret_token_4b1d9c0e7f"


@pytest.fixture
def short_retries(monkeypatch):
    """Transient faults are tried again for ~30 s (common.RETRY_S) before a server counts as
    gone; these tests, on the real clock, take a 0.3 s bound."""
    monkeypatch.setattr(common, "RETRY_S", (0.1, 0.2))


def catalog(url: str, model: str = 'model = "acme/pictures"', poll_s: float = 0.05) -> str:
    return f"""
[[models]]
id = "rep-image"
capability = "image.generate"
backend = "replicate"
resolutions = ["1k"]
concurrency = 4
prices = [{{ resolution = "1k", credits = "3.00" }}]
[models.engine]
{model}
token_env = "REPLICATE_TEST_TOKEN"
url = "{url}/v1"
poll_s = {poll_s}
[models.engine.bind]
prompt = "prompt"
seed = "seed"
"""


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("REPLICATE_TEST_TOKEN", TOKEN)
    return TOKEN


async def test_a_job_completes_by_model_and_by_version_and_is_charged(token, tmp_path):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox", "seed": 7}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], [o["content_type"] for o in st["outputs"]]) == ("completed", ["image/png"])
        assert (await wait_hold(n, key, rid, "captured"))["amount"] == "3.00"
        [p] = peer.predictions.values()
        assert (p["input"], p["webhook_events_filter"]) == ({"prompt": "a red fox", "seed": 7}, ["completed"])
        assert set(peer.auth_seen) == {f"Bearer {token}"}
    version = f'version = "{MODELS["acme/pictures"]}"'
    async with run_peer(token) as peer, engine_node(tmp_path / "v", catalog(peer.url, version)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "by version"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["status"] == "completed"


async def test_a_slow_prediction_is_followed_and_its_signed_webhook_accepted(token, tmp_path):
    # poll_s is long: the outcome comes by the webhook, which the node verifies and takes
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url, poll_s=30)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "slow [slow:0.5]"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["status"] == "completed"
        assert peer.webhook_answers == [200]


async def test_a_badly_signed_webhook_is_refused_and_the_poll_still_finishes(token, tmp_path):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url, poll_s=0.2)) as n:
        peer.sign_with = b"not the signing secret"
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "slow [slow:6]"}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid, timeout=30)
        assert st["status"] == "completed"
        # refused while the job waited; a retry that comes after the poll ended the job is
        # accepted and dropped (its URL token is right, and nothing waits for it any more)
        assert peer.webhook_answers and peer.webhook_answers[0] == 401
        assert set(peer.webhook_answers) <= {401, 200}
        ended = parse_iso(st["finished_at"])
        accepted_at = [t for a, t in zip(peer.webhook_answers, peer.webhook_answered_at, strict=True) if a == 200]
        assert all(t > ended for t in accepted_at), (ended, peer.webhook_answers, peer.webhook_answered_at)
        # the refusal itself, as the node answers it
        ctx = n.parts.engines.context
        hooks = ctx.expect_hooks("job-x", lambda headers, body: False)
        try:
            path = ctx.hook_url("job-x").removeprefix(n.parts.settings.base_url)
            r = await n.call("POST", path, None, json={"status": "succeeded"},
                             headers={"webhook-id": "m", "webhook-timestamp": "1", "webhook-signature": "v1,x"})
            assert r.status_code == 401
            e = (await r.get_json())["error"]
            assert (e["code"], e["message"]) == ("request.unauthorized", "Invalid webhook signature.")
        finally:
            ctx.forget_hooks("job-x")
            await hooks.aclose()


async def test_failures_map_to_the_spec_messages_and_release(token, tmp_path, short_retries):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        failed = (await submit(n, key, {"prompt": "x [fail]"}, path=PATH))["request_id"]
        empty = (await submit(n, key, {"prompt": "x [empty]"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, failed))["error"] == INCOMPLETE
        assert (await wait_status(n, key, empty))["error"] == NO_OUTPUT
        for rid in (failed, empty):
            await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == "200.00"
    async with run_peer(token) as peer, engine_node(tmp_path / "b", catalog(peer.url, 'model = "acme/none"')) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "x"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == UPSTREAM.format(404)
        await wait_hold(n, key, rid, "released")
    async with engine_node(tmp_path / "c", catalog(f"http://127.0.0.1:{free_port()}")) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "x"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == UNAVAILABLE
        await wait_hold(n, key, rid, "released")


async def test_cancel_while_running_cancels_the_prediction(token, tmp_path):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "long [slow:30]"}, path=PATH))["request_id"]
        await wait_until(lambda: peer.predictions, 10, every=0.02)
        r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
        assert r.status_code == 200 and (await r.get_json())["status"] == "canceled"
        await wait_hold(n, key, rid, "released")
        [pid] = peer.predictions
        # the create is held (Prefer: wait=5), then the cancel goes
        await wait_until(lambda: pid in peer.canceled and peer.predictions[pid]["status"] == "canceled", 15, every=0.05)


async def test_the_token_is_in_no_log_line_and_no_error(token, tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    async with run_peer("the-peer-wants-another-token") as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "x"}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["error"] == UPSTREAM.format(401)
        assert peer.auth_seen == [f"Bearer {token}"]  # it was sent, and refused
        r = await n.call("GET", f"/v1/generation/requests/{rid}", key)
        assert token not in (await r.get_data(as_text=True))
    assert "401" in caplog.text and token not in caplog.text


async def test_a_prediction_still_propagating_and_a_webhook_before_the_answer(token, tmp_path):
    """`urls.get` 404 for its first reads and an output URL 404 at first: read again, the
    job completes. A `completed` webhook delivered before the create's answer (which says
    `starting`), with `urls.get` 404 all along: the webhook ends it."""
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        peer.webhooks, peer.get_404_reads, peer.file_404_reads = False, 2, 2
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "past the create's wait [slow:5.5]"}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)
        await wait_hold(n, key, rid, "captured")
        [p] = peer.predictions.values()
        assert peer.reads[f"/v1/predictions/{p['id']}"] >= 3 and peer.reads[p["_path"]] == 3
        peer.webhooks, peer.hook_before_answer, peer.get_404_reads, peer.file_404_reads = True, True, 100, 0
        rid = (await submit(n, key, {"prompt": "answered late"}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)
        assert peer.webhook_answers == [200]

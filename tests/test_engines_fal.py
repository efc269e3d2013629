"""The fal engine against a protocol-faithful peer of fal's queue API (tests/peers/fal.py):
submit, status polling, result, `PUT cancel_url`; the returned URLs used as given (the
peer's differ from a rebuild), every failure mapping, the token kept secret."""

from __future__ import annotations

import logging

import pytest

from engine_support import engine_node, free_port
from peers.fal import run_peer
from test_generation_support import balance, submit, wait_hold, wait_status
from waiting import wait_until

UPSTREAM = "Generation failed upstream (HTTP {}). Credits were released."
UNAVAILABLE = "Generation failed: the model backend is unavailable. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
PATH = "/v1/generation/models/fal-image"
TOKEN = "fal-key-id:fal-key-secret-93a7"


def catalog(url: str) -> str:
    return f"""
[[models]]
id = "fal-image"
capability = "image.generate"
backend = "fal"
resolutions = ["1k"]
concurrency = 4
prices = [{{ resolution = "1k", credits = "2.00" }}]
[models.engine]
app = "fal-ai/flux/schnell"
token_env = "FAL_TEST_KEY"
url = "{url}"
poll_s = 0.05
[models.engine.bind]
prompt = "prompt"
seed = "seed"
width = "width"
height = "height"
"""


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("FAL_TEST_KEY", TOKEN)
    return TOKEN


async def test_a_job_completes_through_the_returned_urls_and_is_charged(token, tmp_path):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox", "seed": 7}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        [out] = st["outputs"]
        assert (out["content_type"], out["width"], out["height"]) == ("image/png", 1024, 1024)
        assert (await wait_hold(n, key, rid, "captured"))["amount"] == "2.00"
        [r] = peer.requests.values()
        assert (r["app"], r["input"]) == ("fal-ai/flux/schnell",
                                          {"prompt": "a red fox", "seed": 7, "width": 1024, "height": 1024})
        assert set(peer.auth_seen) == {f"Key {token}"}


async def test_failures_map_to_the_spec_messages_and_release(token, tmp_path):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rids = {p: (await submit(n, key, {"prompt": f"x {p}"}, path=PATH))["request_id"]
                for p in ("[fail]", "[reject]", "[empty]")}
        assert (await wait_status(n, key, rids["[fail]"]))["error"] == UPSTREAM.format(500)
        assert (await wait_status(n, key, rids["[reject]"]))["error"] == UPSTREAM.format(422)
        assert (await wait_status(n, key, rids["[empty]"]))["error"] == NO_OUTPUT
        for rid in rids.values():
            await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == "200.00"
    async with engine_node(tmp_path / "b", catalog(f"http://127.0.0.1:{free_port()}")) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "x"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == UNAVAILABLE
        await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == "200.00"


async def test_cancel_while_running_and_while_queued_cancels_on_fal(token, tmp_path):
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        running = (await submit(n, key, {"prompt": "long [slow:30]"}, path=PATH))["request_id"]
        queued = (await submit(n, key, {"prompt": "behind it"}, path=PATH))["request_id"]
        await wait_until(lambda: sorted(r["status"] for r in peer.requests.values()) == ["IN_PROGRESS", "IN_QUEUE"],
                         10, every=0.02)
        for rid in (queued, running):
            r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
            assert r.status_code == 200 and (await r.get_json())["status"] == "canceled"
            await wait_hold(n, key, rid, "released")
        await wait_until(lambda: len(peer.canceled) >= 2, 10, every=0.02)
        assert peer.canceled == set(peer.requests)
        assert (await balance(n, key))["available"] == "200.00"


async def test_the_token_is_in_no_log_line_and_no_error(token, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    async with run_peer("another-key") as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "x"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == UPSTREAM.format(401)
        assert peer.auth_seen == [f"Key {token}"]
        r = await n.call("GET", f"/v1/generation/requests/{rid}", key)
        assert token not in (await r.get_data(as_text=True))
    assert "401" in caplog.text and token not in caplog.text


async def test_urls_that_are_not_readable_yet_are_read_again_not_failed(token, tmp_path):
    """A status URL that is 404 just after the submit, a result still "in progress" just
    after COMPLETED, an output file that is 404 at first: the job completes. A status URL
    that stays 404 past the short backoff fails the job with that status."""
    async with run_peer(token) as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        peer.status_404_reads, peer.result_lag_reads, peer.file_404_reads = 2, 2, 2
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox", "seed": 7}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)
        await wait_hold(n, key, rid, "captured")
        [r] = peer.requests.values()
        file_path = "/files/" + r["_result"][1]["images"][0]["url"].rsplit("/", 1)[1]
        assert peer.reads[file_path] == 3 and peer.reads[r["response_url"].removeprefix(peer.url)] == 3
        peer.status_404_reads = 100
        rid = (await submit(n, key, {"prompt": "gone"}, path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == UPSTREAM.format(404)
        await wait_hold(n, key, rid, "released")

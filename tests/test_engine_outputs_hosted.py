"""What a hosted API's output may make the node fetch, against the Replicate and fal peers
(tests/peers/): an output URL off the API's own origin only from a public address (the SSRF
guard of outgoing webhooks), never the prompt fal echoes, never a `text.llm` reply; at most
MAX_OUTPUTS files, each and every answer bounded; an answer of another shape fails the job
with the spec's message, not as an internal error."""

from __future__ import annotations

import base64
import io

import pytest
from engine_support import engine_node
from peers import replicate
from peers.fal import run_peer as run_fal
from peers.hosting import picture, running, serving
from PIL import Image
from quart import Response
from quart_trio import QuartTrio
from test_builtin_speech import fetch
from test_engines_fal import catalog as fal_catalog
from test_generation_support import submit, wait_status
from waiting import wait_until

from service.engines import common

INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
TOKEN = "r8_secret_token_4b1d9c0e7f"
MiB = 1024 * 1024


class Rigged(replicate.Peer):
    """The Replicate peer, its succeeded predictions' `output` replaced by `rig` (what a
    model's author makes it return); `answer_list`: every answer a JSON list."""

    rig: object = None
    answer_list = False

    def public(self, p: dict):
        out = super().public(p)
        if out.get("status") == "succeeded" and self.rig is not None:
            out["output"] = self.rig
        return [out] if self.answer_list else out


def endless_app(app: QuartTrio, state: dict) -> QuartTrio:
    """`/delivery/endless.png` on the peer's own origin: a PNG's head, then bytes without end."""

    @app.get("/delivery/endless.png")
    async def endless():
        async def body():
            try:
                yield picture("head", 1)
                while True:
                    state["sent"] = state.get("sent", 0) + MiB
                    yield b"\0" * MiB
            finally:
                state["closed"] = True
        return Response(body(), content_type="image/png")

    return app


async def rigged_peer(state: dict | None = None):
    peer = Rigged(TOKEN)
    return peer, running(peer, endless_app(replicate.create_app(peer), state if state is not None else {}))


def catalog(url: str, capability: str = "image.generate", timeout_s: int = 120) -> str:
    tier = "default" if capability == "text.llm" else "1k"
    return f"""
[[models]]
id = "rep"
capability = "{capability}"
backend = "replicate"
resolutions = ["{tier}"]
concurrency = 4
timeout_s = {timeout_s}
prices = [{{ resolution = "{tier}", credits = "3.00" }}]
[models.engine]
model = "acme/pictures"
token_env = "REPLICATE_TEST_TOKEN"
url = "{url}/v1"
poll_s = 0.05
[models.engine.bind]
prompt = "prompt"
"""


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("REPLICATE_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("FAL_TEST_KEY", "fal-key-1")


def internal(hits: list[str]) -> QuartTrio:
    """A service on the node's own network (a cloud's metadata, an admin page): any GET is a PNG."""
    app = QuartTrio("internal")

    @app.get("/<path:path>")
    async def anything(path: str):
        hits.append(path)
        return Response(picture("internal", 1), content_type="image/png")

    return app


def png(i: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i, 0, 0)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


async def run_job(tmp_path, peer_url: str, body: dict | None = None, **kw) -> tuple[object, str, dict]:
    async with engine_node(tmp_path, catalog(peer_url, **kw)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, body or {"prompt": "x"}, path="/v1/generation/models/rep"))["request_id"]
        st = await wait_status(n, key, rid, timeout=20)
        texts = [(await fetch(n, key, o["url"])).decode() for o in st["outputs"]
                 if o["content_type"].startswith("text/")]
        return n, texts, st


@pytest.mark.parametrize("where", ["127.0.0.1", "localhost"])
async def test_a_replicate_output_url_to_a_private_address_is_not_fetched(token, tmp_path, where):
    hits: list[str] = []
    peer, serve = await rigged_peer()
    async with serving(internal(hits)) as inside, serve:
        peer.rig = [inside.replace("127.0.0.1", where) + "/latest/meta-data/iam.png"]
        _, _, st = await run_job(tmp_path, peer.url)
    assert (st["status"], st["error"], st["outputs"], hits) == ("failed", NO_OUTPUT, [], [])


async def test_a_url_in_the_prompt_fal_echoes_is_not_fetched(token, tmp_path):
    hits: list[str] = []
    async with serving(internal(hits)) as inside, run_fal("fal-key-1") as peer:
        async with engine_node(tmp_path, fal_catalog(peer.url)) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, {"prompt": f"{inside}/admin/secret.png"},
                                path="/v1/generation/models/fal-image"))["request_id"]
            st = await wait_status(n, key, rid, timeout=20)
    # the one image the app made; fal's answer also echoes the prompt
    assert (st["status"], [o["content_type"] for o in st["outputs"]], hits) == ("completed", ["image/png"], [])


@pytest.mark.parametrize("reply", ["URL", ["Visit ", "https://", "example.org", "."]])
async def test_a_text_llm_reply_is_its_text_never_fetched(token, tmp_path, reply, monkeypatch):
    monkeypatch.setattr(common, "RETRY_S", (0.1,))
    hits: list[str] = []
    peer, serve = await rigged_peer()
    async with serving(internal(hits)) as inside, serve:
        peer.rig = f"{inside}/latest/meta-data/" if reply == "URL" else reply
        _, texts, st = await run_job(tmp_path, peer.url, {"prompt": "x", "resolution": "default"},
                                     capability="text.llm")
    said = f"{inside}/latest/meta-data/" if reply == "URL" else "Visit https://example.org."
    assert (st["status"], st["error"], texts, hits) == ("completed", None, [said], [])


async def test_at_most_max_outputs_files_are_taken(token, tmp_path):
    peer, serve = await rigged_peer()
    async with serve:
        peer.rig = [png(i) for i in range(70)]
        _, _, st = await run_job(tmp_path, peer.url)
    assert (st["status"], len(st["outputs"]), common.MAX_OUTPUTS) == ("completed", 64, 64)


async def test_an_endless_output_file_is_read_to_its_bound_and_skipped(token, tmp_path, monkeypatch):
    monkeypatch.setattr(common, "OUTPUT_MAX_BYTES", 4 * MiB, raising=False)
    state: dict = {}
    peer, serve = await rigged_peer(state)
    async with serve:
        peer.rig = [f"{peer.url}/delivery/endless.png"]
        _, _, st = await run_job(tmp_path, peer.url)
        assert (st["status"], st["error"]) == ("failed", NO_OUTPUT)
        await wait_until(lambda: state.get("closed"), 10)  # the node dropped the connection


async def test_an_endless_answer_fails_the_job_as_incomplete(token, tmp_path):
    """fal's `status_url` answering without end: read to ANSWER_MAX_BYTES (64 MiB), then the job fails."""
    app = QuartTrio("fal-endless")
    state: dict = {}

    @app.post("/fal-ai/flux/schnell")
    async def submitted():
        base = state["url"]
        return {"request_id": "r1", "status_url": f"{base}/status", "response_url": f"{base}/out",
                "cancel_url": f"{base}/stop"}

    @app.get("/status")
    async def status():
        async def body():
            try:
                yield b'{"status": "IN_PROGRESS", "logs": "'
                while True:
                    yield b"x" * MiB
            finally:
                state["closed"] = True
        return Response(body(), content_type="application/json")

    async with serving(app) as url:
        state["url"] = url
        async with engine_node(tmp_path, fal_catalog(url)) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, {"prompt": "x"}, path="/v1/generation/models/fal-image"))["request_id"]
            st = await wait_status(n, key, rid, timeout=20)
    assert (st["status"], st["error"], state["closed"], common.ANSWER_MAX_BYTES) == (
        "failed", INCOMPLETE, True, 64 * MiB)


def nested(depth: int) -> object:
    value: object = png(1)
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("rig", "answer_list", "error"), [
    (nested(900), False, INCOMPLETE),  # deeper than the walk of the output goes
    (None, True, INCOMPLETE),  # every answer a list, not a prediction
    (["http://[::1/x.png"], False, NO_OUTPUT),  # no URL at all
    ([{"url": 5}, None, 3.5, True], False, NO_OUTPUT),
])
async def test_an_answer_of_another_shape_fails_with_the_spec_message(token, tmp_path, rig, answer_list, error):
    peer, serve = await rigged_peer()
    async with serve:
        peer.rig, peer.answer_list = rig, answer_list
        _, _, st = await run_job(tmp_path, peer.url)
    assert (st["status"], st["error"]) == ("failed", error)

"""The OpenAI-compatible engine: `text.llm` against a real llama-cpp-python server serving
a tiny GGUF model the tests write (one server per test run), and images (generations as
b64_json and as URLs, edits) against a protocol-faithful peer (tests/peers/openai_images.py),
which also serves the failure and usage cases a real server is not made to show."""

from __future__ import annotations

import logging

import httpx
import pytest
import trio

from engine_support import LlamaServer, engine_node, free_port
from peers.openai_images import run_peer
from test_builtin_speech import fetch
from test_generation_support import balance, submit, upload_ok, wait_hold, wait_status

UPSTREAM = "Generation failed upstream (HTTP {}). Credits were released."
INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
TOKEN = "sk-local-7d3f0b9a2c"


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    server = LlamaServer(tmp_path_factory.mktemp("llama")).start()
    yield server
    server.stop()


def model(id_: str, capability: str, url: str, name: str, extra: str = "", resolution: str = "1k",
          concurrency: int = 1) -> str:
    return f"""
[[models]]
id = "{id_}"
capability = "{capability}"
backend = "openai"
resolutions = ["{resolution}"]
concurrency = {concurrency}
prices = [{{ resolution = "{resolution}", credits = "1.50" }}]
[models.engine]
url = "{url}"
model = "{name}"
{extra}
"""


def llm_catalog(url: str) -> str:
    return (model("tiny-greedy", "text.llm", url, "tiny", "max_tokens = 24\ntemperature = 0.0", "default")
            + model("tiny-warm", "text.llm", url, "tiny", "max_tokens = 24\ntemperature = 0.9", "default")
            + model("tiny-long", "text.llm", url, "tiny", "", "default"))


async def reply(n, key: str, st: dict) -> str:
    [out] = st["outputs"]
    assert out["content_type"] == "text/plain; charset=utf-8"
    return (await fetch(n, key, out["url"])).decode("utf-8")


async def test_a_chat_streams_into_a_text_asset_and_a_seed_repeats_it(llama, tmp_path):
    async with engine_node(tmp_path, llm_catalog(llama.url)) as n:
        key = (await n.create_org())["api_key"]
        texts = {}
        for name, m, seed in (("a", "tiny-greedy", 5), ("b", "tiny-greedy", 5), ("c", "tiny-warm", 11),
                              ("d", "tiny-warm", 11), ("e", "tiny-warm", 12)):
            rid = (await submit(n, key, {"prompt": "Tell me about tides.", "seed": seed},
                                path=f"/v1/generation/models/{m}"))["request_id"]
            st = await wait_status(n, key, rid)
            assert st["status"] == "completed", st
            texts[name] = await reply(n, key, st)
            assert (await wait_hold(n, key, rid, "captured"))["amount"] == "1.50"
        assert texts["a"] and texts["a"] == texts["b"]  # temperature 0 and a seed: the same text twice
        assert texts["c"] == texts["d"] != texts["e"]  # sampled: the seed decides
        assert (await balance(n, key))["available"] == "192.50"


async def test_a_stream_the_server_breaks_off_fails_the_job(llama, tmp_path):
    # the model's chat template refuses "[refuse]": llama-cpp-python has already sent 200
    async with engine_node(tmp_path, llm_catalog(llama.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "please [refuse]"}, path="/v1/generation/models/tiny-greedy"))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == INCOMPLETE
        await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == "200.00"


async def test_cancelling_a_streaming_chat_stops_the_server_generating(llama, tmp_path):
    # tiny-long has no max_tokens: left alone it writes the whole 16k context (30 s or
    # more). llama-cpp-python runs one request at a time, so a short request sent after
    # the cancel finishes soon only if the long one stopped.
    async with engine_node(tmp_path, llm_catalog(llama.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "Go on for ever."}, path="/v1/generation/models/tiny-long"))["request_id"]
        await wait_status(n, key, rid, wanted=("rendering",))
        await trio.sleep(1.0)  # well into the stream
        r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
        assert r.status_code == 200 and (await r.get_json())["status"] == "canceled"
        await wait_hold(n, key, rid, "released")
        async with httpx.AsyncClient() as c:
            with trio.fail_after(15):
                r = await c.post(f"{llama.url}/chat/completions", timeout=30,
                                 json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4


def images_catalog(url: str, token: bool = False) -> str:
    auth = 'token_env = "OPENAI_TEST_KEY"' if token else ""
    return (model("peer-image", "image.generate", url, "peer-image", auth)
            + model("peer-url", "image.generate", url, "url-only", auth)
            + model("peer-edit", "image.edit", url, "peer-image", auth)
            + model("peer-chat", "text.llm", url, "peer-chat", auth, "default"))


async def test_images_generations_as_b64_and_as_urls_and_edits(tmp_path):
    async with run_peer() as peer, engine_node(tmp_path, images_catalog(f"{peer.url}/v1")) as n:
        key = (await n.create_org())["api_key"]
        for m in ("peer-image", "peer-url"):
            rid = (await submit(n, key, {"prompt": "a lighthouse", "aspect_ratio": "16:9"},
                                path=f"/v1/generation/models/{m}"))["request_id"]
            st = await wait_status(n, key, rid)
            assert st["status"] == "completed", st
            [out] = st["outputs"]
            assert (out["content_type"], out["width"], out["height"]) == ("image/png", 1024, 576)
        assert [c[1]["size"] for c in peer.calls] == ["1024x576", "1024x576"]
        assert {c[1]["response_format"] for c in peer.calls} == {"b64_json"}
        assert len(peer.files) == 1  # the url-only model answered with a URL, which was fetched
        from PIL import Image
        import io
        buf = io.BytesIO()
        Image.new("RGB", (320, 200), (10, 20, 30)).save(buf, "PNG")
        asset = await upload_ok(n, key, buf.getvalue())
        rid = (await submit(n, key, {"prompt": "invert it", "inputs": {"image": [asset["id"]]}},
                            path="/v1/generation/models/peer-edit"))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        [out] = st["outputs"]
        edited = Image.open(io.BytesIO(await fetch(n, key, out["url"]))).convert("RGB")
        assert edited.size == (320, 200) and edited.getpixel((5, 5)) == (245, 235, 225)
        assert peer.calls[-1][0] == "edits" and peer.calls[-1][1]["image"][1] == (320, 200)


async def test_failures_usage_and_the_token(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_TEST_KEY", TOKEN)
    async with run_peer(TOKEN) as peer, engine_node(tmp_path, images_catalog(f"{peer.url}/v1", token=True)) as n:
        key = (await n.create_org())["api_key"]
        fail = (await submit(n, key, {"prompt": "x [fail]"}, path="/v1/generation/models/peer-image"))["request_id"]
        empty = (await submit(n, key, {"prompt": "x [empty]"}, path="/v1/generation/models/peer-image"))["request_id"]
        chat_fail = (await submit(n, key, {"prompt": "x [fail]"}, path="/v1/generation/models/peer-chat"))["request_id"]
        assert (await wait_status(n, key, fail))["error"] == UPSTREAM.format(500)
        assert (await wait_status(n, key, empty))["error"] == NO_OUTPUT
        assert (await wait_status(n, key, chat_fail))["error"] == UPSTREAM.format(500)
        for rid in (fail, empty, chat_fail):
            await wait_hold(n, key, rid, "released")
        assert (await balance(n, key))["available"] == "200.00"
        ok = (await submit(n, key, {"prompt": "one two three four"}, path="/v1/generation/models/peer-chat"))["request_id"]
        st = await wait_status(n, key, ok)
        assert await reply(n, key, st) == "one two three four"
        assert st["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}
        peer.token = "rotated"  # the node's token is now refused
        rid = (await submit(n, key, {"prompt": "x"}, path="/v1/generation/models/peer-image"))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["error"] == UPSTREAM.format(401)
        assert TOKEN not in str(st)
    assert "HTTP 401" in caplog.text and TOKEN not in caplog.text


async def test_a_server_that_cannot_be_reached_makes_the_model_unavailable(tmp_path):
    async with engine_node(tmp_path, images_catalog(f"http://127.0.0.1:{free_port()}/v1")) as n:
        key = (await n.create_org())["api_key"]
        r = await n.call("POST", "/v1/generation/models/peer-image", key, json={"prompt": "x"})
        assert r.status_code == 503
        e = (await r.get_json())["error"]
        assert (e["code"], e["message"]) == ("request.service_unavailable",
                                             "Model peer-image is not available on this deployment.")
        assert (await balance(n, key))["available"] == "200.00"


async def test_chat_streams_ending_without_done_or_broken_off(tmp_path):
    """A reply with its finish_reason is whole: ended without `[DONE]` (usage kept), or the
    connection dropped after it (no usage). Dropped before any finish_reason: failed."""
    async with run_peer() as peer, engine_node(tmp_path, images_catalog(f"{peer.url}/v1")) as n:
        key = (await n.create_org())["api_key"]
        rids = {k: (await submit(n, key, {"prompt": f"one two {k}"}, path="/v1/generation/models/peer-chat"))["request_id"]
                for k in ("[nodone]", "[reset]", "[cut]")}
        st = await wait_status(n, key, rids["[nodone]"])
        assert await reply(n, key, st) == "one two [nodone]"
        assert st["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
        st = await wait_status(n, key, rids["[reset]"])
        assert (st["status"], await reply(n, key, st)) == ("completed", "one two [reset]")
        assert "usage" not in st or not st["usage"]
        st = await wait_status(n, key, rids["[cut]"])
        assert st["error"] == INCOMPLETE
        await wait_hold(n, key, rids["[cut]"], "released")
        peer.file_404_reads = 2  # a URL answer not readable at first: read again
        rid = (await submit(n, key, {"prompt": "a lighthouse"}, path="/v1/generation/models/peer-url"))["request_id"]
        assert (await wait_status(n, key, rid))["status"] == "completed"
        assert list(peer.reads.values()) == [3]

"""The OpenAI-compatible front door through OpenAI's own Python SDK: chat (plain and
streamed) against a real llama-cpp-python server, images and speech on the built-ins,
every error code of the spec, and a stream the client abandons releasing its hold."""

from __future__ import annotations

import base64
import io
import wave
from contextlib import aclosing

import httpx
import openai
import pytest
import trio
from PIL import Image

from engine_support import engine_node
from test_engines_openai import INCOMPLETE, llama, model  # noqa: F401 - llama: the session's server fixture
from test_generation_support import balance, holds, wait_hold

BUILTINS = """
[[models]]
id = "proc-image"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k", "2k"]
concurrency = 2
prices = [{ resolution = "1k", credits = "1.00" }, { resolution = "2k", credits = "2.00" }]

[[models]]
id = "espeak-ng"
capability = "audio.speech"
backend = "espeak_speech"
resolutions = ["en-us", "en-gb"]
concurrency = 2
prices = [{ resolution = "en-us", credits = "0.10" }, { resolution = "en-gb", credits = "0.10" }]

[[models]]
id = "pricey"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "250.00" }]

[[models]]
id = "ghost"
capability = "image.generate"
backend = "cog"  # its only server refuses connections: known down from the start
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1.00" }]
engine = { urls = ["http://127.0.0.1:9"] }
"""


def catalog(llama_url: str) -> str:
    return (BUILTINS + model("tiny-greedy", "text.llm", llama_url, "tiny", "max_tokens = 24\ntemperature = 0.0",
                             "default")
            + model("tiny-long", "text.llm", llama_url, "tiny", "", "default"))


CLIENTS: list[openai.AsyncOpenAI] = []


def sdk(n, key: str) -> openai.AsyncOpenAI:
    """OpenAI's client on the node's front door (closed by the `front` fixture)."""
    c = openai.AsyncOpenAI(base_url=f"{n.parts.settings.base_url}/openai/v1", api_key=key, max_retries=0)
    CLIENTS.append(c)
    return c


@pytest.fixture(autouse=True)
async def close_clients():
    yield
    while CLIENTS:
        await CLIENTS.pop().close()


@pytest.fixture
async def front(llama, tmp_path):  # noqa: F811
    async with engine_node(tmp_path, catalog(llama.url)) as n:
        org = await n.create_org()
        yield n, org["api_key"], org


async def runs_of(n, key: str) -> list[dict]:
    r = await n.call("GET", "/v1/runs?limit=100", key)
    assert r.status_code == 200
    return (await r.get_json())["data"]["items"]


async def test_models_lists_the_catalog(front):
    n, key, _ = front
    ids = [m.id async for m in sdk(n, key).models.list()]
    assert ids == ["proc-image", "espeak-ng", "pricey", "ghost", "tiny-greedy", "tiny-long"]
    assert (await sdk(n, key).models.retrieve("espeak-ng")).owned_by == "genservice"


async def test_chat_plain_is_a_captured_api_job(front):
    n, key, _ = front
    c = sdk(n, key)
    done = await c.chat.completions.create(model="tiny-greedy", seed=5, messages=[
        {"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Tell me about tides."}])
    text = done.choices[0].message.content
    assert text and done.choices[0].finish_reason in ("stop", "length")
    assert done.usage is None  # llama-cpp-python reports no usage on a stream: none is made up
    job_id = done.id.removeprefix("chatcmpl-")
    assert (await wait_hold(n, key, job_id, "captured"))["amount"] == "1.50"
    [run] = [r for r in await runs_of(n, key) if r["id"] == job_id]
    assert run["source"] == "api"
    again = await c.chat.completions.create(model="tiny-greedy", seed=5, messages=[
        {"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Tell me about tides."}])
    assert again.choices[0].message.content == text  # temperature 0 and a seed: the same reply


async def test_chat_streamed_in_chunks_ending_done(front):
    n, key, _ = front
    c = sdk(n, key)
    stream = await c.chat.completions.create(model="tiny-greedy", seed=5, stream=True,
                                             stream_options={"include_usage": True},
                                             messages=[{"role": "user", "content": "Tell me about tides."}])
    pieces, finish, usage, ids = [], None, None, set()
    async for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    plain = await c.chat.completions.create(model="tiny-greedy", seed=5,
                                            messages=[{"role": "user", "content": "Tell me about tides."}])
    assert len([p for p in pieces if p]) > 1 and "".join(pieces) == plain.choices[0].message.content
    assert finish in ("stop", "length") and usage is None  # the server reported none
    [cid] = ids
    await wait_hold(n, key, cid.removeprefix("chatcmpl-"), "captured")


async def test_an_abandoned_stream_cancels_its_job_and_releases_its_hold(front, llama):  # noqa: F811
    n, key, _ = front
    c = sdk(n, key)
    got = 0
    async with await c.chat.completions.create(model="tiny-long", stream=True, messages=[
            {"role": "user", "content": "Go on for ever."}]) as stream:
        async with aclosing(stream.__aiter__()) as chunks:
            async for chunk in chunks:
                got += sum(1 for ch in chunk.choices if ch.delta.content)
                if got >= 3:
                    break
    job_id = chunk.id.removeprefix("chatcmpl-")
    await wait_hold(n, key, job_id, "released", timeout=20)
    r = await n.call("GET", f"/v1/generation/requests/{job_id}/status", key)
    assert (await r.get_json())["status"] == "canceled"
    async with httpx.AsyncClient() as h:  # llama-cpp-python serves one at a time: the long one stopped
        with trio.fail_after(15):
            r = await h.post(f"{llama.url}/chat/completions", timeout=30, json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert r.status_code == 200


async def test_images_as_urls_and_as_b64(front):
    n, key, _ = front
    c = sdk(n, key)
    got = await c.images.generate(model="proc-image", prompt="a red fox", n=2, size="1792x1024")
    assert len(got.data) == 2
    async with httpx.AsyncClient() as h:
        url = got.data[0].url.replace("http://testserver", n.parts.settings.base_url)  # the signer's base URL
        img = Image.open(io.BytesIO((await h.get(url)).content))
    assert img.width > img.height  # 1792x1024 -> a landscape aspect ratio
    b64 = await c.images.generate(model="proc-image", prompt="a red fox", response_format="b64_json")
    [one] = b64.data
    assert Image.open(io.BytesIO(base64.b64decode(one.b64_json))).format == "PNG"
    captured = [h for h in await holds(n, key) if h["status"] == "captured"]
    assert sorted(h["amount"] for h in captured) == ["1.00", "2.00", "2.00"]  # 1792 wide: the 2k tier
    assert (await balance(n, key))["available"] == "195.00"


async def test_speech_answers_wav_bytes(front):
    n, key, _ = front
    resp = await sdk(n, key).audio.speech.create(model="espeak-ng", input="Hello there.", voice="en-gb",
                                                 response_format="wav")
    with wave.open(io.BytesIO(resp.content)) as w:
        assert w.getnframes() > 0
    [h] = await holds(n, key)
    assert h["status"] == "captured" and h["amount"] == "0.10"


async def test_a_bad_key_is_401_invalid_api_key(front):
    n, _, _ = front
    with pytest.raises(openai.AuthenticationError) as e:
        await sdk(n, "aak_not-a-key").models.list()
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    assert e.value.body["message"] == "Incorrect API key provided."


async def test_an_unknown_or_wrong_model_is_404_model_not_found(front):
    n, key, _ = front
    c = sdk(n, key)
    for name in ("no-such-model", "proc-image"):  # proc-image exists but does not chat
        with pytest.raises(openai.NotFoundError) as e:
            await c.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])
        assert e.value.code == "model_not_found" and e.value.param == "model"
        assert e.value.body["message"].startswith(f"The model '{name}' does not exist")
    assert await holds(n, key) == []


async def test_bad_requests_are_400_invalid_request_error(front):
    n, key, _ = front
    c = sdk(n, key)
    with pytest.raises(openai.BadRequestError) as e:
        await c.images.generate(model="proc-image", prompt="fox", n=5)
    assert (e.value.code, e.value.param, e.value.type) == ("invalid_request_error", "n", "invalid_request_error")
    with pytest.raises(openai.BadRequestError) as e:
        await c.images.generate(model="proc-image", prompt="fox", size="big")
    assert e.value.param == "size" and e.value.body["message"] == "Invalid size 'big': expected WIDTHxHEIGHT, such as 1024x1024."
    with pytest.raises(openai.BadRequestError) as e:
        await c.audio.speech.create(model="espeak-ng", input="hi", voice="alloy")
    assert e.value.param == "voice" and e.value.body["message"] == "Unknown voice 'alloy' for espeak-ng. Known: en-us, en-gb."
    with pytest.raises(openai.BadRequestError) as e:
        await c.chat.completions.create(model="tiny-greedy", messages=[{"role": "user", "content": "  "}])
    assert e.value.param == "messages" and e.value.body["message"] == "The messages need a non-empty user message."
    with pytest.raises(openai.BadRequestError) as e:  # the whole conversation is bounded, not only its prompt
        await c.chat.completions.create(model="tiny-greedy", messages=[
            {"role": "user", "content": "x" * 9_000} for _ in range(12)])
    assert (e.value.status_code, e.value.code, e.value.param) == (400, "invalid_request_error", "messages")
    assert e.value.body["message"] == "The messages are longer than 100000 characters in all."
    assert await holds(n, key) == []


async def test_no_credits_is_429_insufficient_quota_and_holds_nothing(front):
    n, key, _ = front
    c = sdk(n, key)
    with pytest.raises(openai.RateLimitError) as e:
        await c.images.generate(model="pricey", prompt="fox")
    assert e.value.status_code == 429 and (e.value.code, e.value.type) == ("insufficient_quota", "insufficient_quota")
    assert e.value.body["message"] == "Not enough credits."
    assert await holds(n, key) == []


async def test_an_unavailable_model_is_503(front):
    n, key, _ = front
    with pytest.raises(openai.InternalServerError) as e:
        await sdk(n, key).images.generate(model="ghost", prompt="fox")
    assert e.value.status_code == 503 and e.value.code == "model_unavailable"
    assert e.value.body["message"] == "Model ghost is not available on this deployment."


async def test_the_request_limit_is_429_rate_limit_exceeded(llama, tmp_path):  # noqa: F811
    async with engine_node(tmp_path, catalog(llama.url), rate_limit_per_key=1, rate_limit_burst=1) as n:
        key = (await n.create_org())["api_key"]
        c = sdk(n, key)
        with pytest.raises(openai.RateLimitError) as e:
            for _ in range(5):
                await c.models.list()
        assert e.value.code == "rate_limit_exceeded" and int(e.value.response.headers["Retry-After"]) >= 1


async def test_a_read_only_key_is_403_permission_denied(front):
    n, key, org = front
    viewer = (await n.add_member(org["organization_id"], "read_only", "viewer@acme.test"))["api_key"]
    assert [m.id async for m in sdk(n, viewer).models.list()]  # reading is allowed
    with pytest.raises(openai.PermissionDeniedError) as e:
        await sdk(n, viewer).images.generate(model="proc-image", prompt="fox")
    assert e.value.code == "permission_denied"
    assert e.value.body["message"] == "The API key's role does not allow this request."


async def test_an_engine_failure_releases_the_hold_plain_and_streamed(front):
    # the model's chat template refuses "[refuse]": llama-cpp-python has already sent 200
    n, key, _ = front
    c = sdk(n, key)
    with pytest.raises(openai.InternalServerError) as e:
        await c.chat.completions.create(model="tiny-greedy", messages=[{"role": "user", "content": "please [refuse]"}])
    assert e.value.code == "generation_failed"
    assert e.value.body["message"] == INCOMPLETE
    with pytest.raises(openai.APIError) as e:
        async with await c.chat.completions.create(model="tiny-greedy", stream=True, messages=[
                {"role": "user", "content": "please [refuse]"}]) as stream:
            async for _ in stream:
                pass
    assert e.value.body["code"] == "generation_failed" and e.value.body["message"] == INCOMPLETE
    assert [h["status"] for h in await holds(n, key)] == ["released", "released"]
    assert (await balance(n, key))["available"] == "200.00"


async def test_a_stream_whose_head_never_went_out_cancels_its_job(front):
    """The client left as the answer's head was written (service/http/bodies.py): the chat's
    body never started, and its job was left to run and be charged for nobody."""
    import json as _json

    from werkzeug.datastructures import Headers

    from service.http.request_task import InlineHTTPConnection, ReadyRequest, _Scoped
    n, key, _ = front
    body = _json.dumps({"model": "tiny-long", "stream": True,
                        "messages": [{"role": "user", "content": "Go on for ever."}]}).encode()
    scope = {"type": "http", "method": "POST", "path": "/openai/v1/chat/completions", "headers": [],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 80), "scheme": "http", "root_path": ""}
    req = ReadyRequest("POST", "http", "/openai/v1/chat/completions", b"", Headers({
        "Host": "testserver", "Authorization": f"Bearer {key}", "Content-Type": "application/json",
        "Content-Length": str(len(body))}), "", "1.1", max_content_length=None, body_timeout=None,
        send_push_promise=None, scope=scope)
    req.body.append(body)
    req.body.set_complete()
    heads: list[int] = []

    async def send(message):
        if message["type"] == "http.response.start":
            heads.append(message["status"])
            raise trio.BrokenResourceError("the client went")

    with trio.CancelScope() as cancel_scope:
        try:
            await InlineHTTPConnection(n.app, scope).handle_request(_Scoped(cancel_scope), req, send)
        except trio.BrokenResourceError:
            pass
    assert heads == [200]
    [run] = [r for r in await runs_of(n, key) if r.get("model") == "tiny-long"]
    job_id = run["id"]
    await wait_hold(n, key, job_id, "released", timeout=20)
    r = await n.call("GET", f"/v1/generation/requests/{job_id}/status", key)
    assert (await r.get_json())["status"] == "canceled"

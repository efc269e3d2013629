"""What the operator's own engines send is bounded and never crashes a job: a ComfyUI
websocket message or history entry of another shape (against the ComfyUI peer), a ComfyUI or
OpenAI-compatible output file past OUTPUT_MAX_BYTES, a chat stream without end."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from quart import Response
from quart_trio import QuartTrio

from service.engines import comfyui
from service.engines import openai as openai_engine

from engine_support import engine_node
from peers import comfyui as comfy_peer
from peers.hosting import serving
from peers.openai_images import run_peer as run_openai
from test_engines_comfyui import catalog as comfy_catalog
from test_engines_comfyui import graph
from test_engines_openai import model as openai_model
from test_generation_support import submit, wait_status

INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
MiB = 1024 * 1024
COMFY = "/v1/generation/models/comfy-image"


class Odd(comfy_peer.Peer):
    """The ComfyUI peer, sending `junk` to a prompt's socket as it starts (`PID`: the
    prompt's id), and writing each history entry through `bend`."""

    junk: list[str] = []

    def send(self, event: str, data: dict, sid: str | None) -> None:
        if event == "execution_start" and sid in self.sockets:
            for message in self.junk:
                self.sockets[sid].send_nowait(message.replace("PID", data["prompt_id"]))
        super().send(event, data, sid)


class Bent(dict):
    def __init__(self, bend) -> None:
        super().__init__()
        self.bend = bend

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, self.bend(value))


@asynccontextmanager
async def odd_peer(root: Path):
    from peers.comfyui_app import create_app

    peer = Odd(root)
    async with trio.open_nursery() as n, serving(create_app(peer)) as url:
        peer.url = url
        n.start_soon(peer.worker)
        try:
            yield peer
        finally:
            n.cancel_scope.cancel()


async def comfy_job(tmp_path: Path, peer: Odd, g: dict) -> dict:
    async with engine_node(tmp_path / "n", comfy_catalog(peer.url), files={"wf.json": json.dumps(g)}) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "x", "resolution": "96x64", "seed": 5}, path=COMFY))["request_id"]
        return await wait_status(n, key, rid, timeout=20)


@pytest.mark.parametrize("junk", [
    "[1]", "null", '"text"', '{"type": "status", "data": "queue changed"}',  # a custom node's own messages
    '{"type": "progress", "data": {"prompt_id": "PID", "value": null, "max": 3, "node": "3"}}',
    '{"type": "progress", "data": {"prompt_id": "PID", "value": [1], "max": 3, "node": "3"}}',
    "[" * 100_000,
])
async def test_a_websocket_message_of_another_shape_is_ignored(tmp_path, junk):
    async with odd_peer(tmp_path / "comfy") as peer:
        peer.junk = [junk]
        st = await comfy_job(tmp_path, peer, graph(slow=0.3))
    assert (st["status"], st["error"], [o["content_type"] for o in st["outputs"]]) == (
        "completed", None, ["image/png"])


def bend_outputs(entry: dict) -> dict:
    return {**entry, "outputs": {"9": ["not an object"]}}


def bend_status(entry: dict) -> dict:
    return {**entry, "status": "success"}


def bend_entry(entry: dict) -> str:
    return "success"


@pytest.mark.parametrize("bend", [bend_outputs, bend_status, bend_entry])
async def test_a_history_entry_of_another_shape_fails_as_incomplete(tmp_path, bend):
    async with odd_peer(tmp_path / "comfy") as peer:
        peer.history = Bent(bend)
        st = await comfy_job(tmp_path, peer, graph())
    assert (st["status"], st["error"]) == ("failed", INCOMPLETE)


async def test_a_comfyui_output_file_past_the_bound_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(comfyui, "OUTPUT_MAX_BYTES", 64, raising=False)  # the 96x64 PNG is larger
    async with odd_peer(tmp_path / "comfy") as peer:
        st = await comfy_job(tmp_path, peer, graph())
    assert (st["status"], st["error"]) == ("failed", NO_OUTPUT)


async def test_an_openai_image_url_past_the_bound_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(openai_engine, "OUTPUT_MAX_BYTES", 1024, raising=False)  # the answer fits, its PNG not
    async with run_openai() as peer:
        async with engine_node(tmp_path, openai_model("peer-url", "image.generate", f"{peer.url}/v1",
                                                      "url-only")) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, {"prompt": "x"}, path="/v1/generation/models/peer-url"))["request_id"]
            st = await wait_status(n, key, rid, timeout=20)
    assert (st["status"], st["error"], len(peer.files)) == ("failed", NO_OUTPUT, 1)


async def test_a_chat_stream_without_end_is_cut_off_at_its_bound(tmp_path):
    """One line without end, at full speed: cut at ANSWER_MAX_BYTES (64 MiB), the job fails
    long before its 120 s timeout."""
    app = QuartTrio("endless-chat")
    state: dict = {}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "chat", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat():
        async def body():
            try:
                yield b'data: {"choices": [{"index": 0, "delta": {"content": "'
                while True:
                    yield b"a" * MiB
            finally:
                state["closed"] = True
        return Response(body(), content_type="text/event-stream")

    async with serving(app) as url:
        catalog = openai_model("chat", "text.llm", f"{url}/v1", "chat", resolution="default").replace(
            'capability = "text.llm"', 'capability = "text.llm"\ntimeout_s = 120')
        async with engine_node(tmp_path, catalog) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, {"prompt": "x"}, path="/v1/generation/models/chat"))["request_id"]
            st = await wait_status(n, key, rid, timeout=20)
    assert (st["status"], st["error"], state["closed"], openai_engine.ANSWER_MAX_BYTES) == (
        "failed", INCOMPLETE, True, 64 * MiB)

"""An engine's answer of another shape than its protocol's fails the job "could not complete"
where it is parsed (service/engines/common.py, `json_object`, `shaped`); an AttributeError of
the node's own code elsewhere in a job is a bug, and ends the job with `render`'s internal
error rather than passing for the engine's fault. On trio's mock clock against the scripted
engines of test_engines_retry.py."""

from __future__ import annotations

import httpx
import pytest
from test_engines_retry import (
    PID,
    cog_engine,
    cog_render,
    comfy_engine,
    comfy_render,
    context,
    fal_engine,
    fal_render,
    openai_engine,
    openai_render,
    render_request,
    replicate_engine,
    replicate_render,
)

from service.backends.base import MSG_INCOMPLETE, MSG_INTERNAL, Failed
from service.engines import Engines, cog, common
from service.node import read_catalog

URLS = {"get": "http://rep/v1/predictions/p1", "cancel": "http://rep/v1/predictions/p1/cancel"}
MALFORMED = [  # (engine, path, its answer): a list or a string where the protocol has an object
    ("comfyui", "/queue", [1]),
    ("comfyui", f"/history/{PID}", {PID: [1]}),
    ("comfyui", f"/history/{PID}", {PID: {"status": "done", "outputs": {}}}),
    ("comfyui", f"/history/{PID}", {PID: {"status": {}, "outputs": {"9": ["out.png"]}}}),
    ("cog", f"/predictions/{PID}", [{"id": PID, "status": "starting"}]),
    ("replicate", "/v1/predictions/p1", {"id": "p1", "status": "processing", "urls": ["get"]}),
    ("replicate", "/v1/models/acme/pictures/predictions", ["p1"]),
    ("fal", "/_q/s1/r/r1/state", ["COMPLETED"]),
    ("openai", "/v1/images/generations", {"data": ["http://oai/files/out.png"]}),
]


async def render_kind(kind: str, path: str, answer: object, tmp_path, monkeypatch):
    status = 201 if path.endswith("/predictions") else 200
    if kind == "cog":
        box: list = []
        engine = cog_engine(box, hook_after_checks=10_000)
        engine.routes[path] = httpx.Response(status, json=answer)
        return await cog_render(engine, box, tmp_path)
    engine = {"comfyui": comfy_engine, "replicate": replicate_engine, "fal": fal_engine,
              "openai": openai_engine}[kind]()
    if kind == "comfyui" and path != "/queue":
        engine.routes["/queue"] = httpx.Response(200, json={"queue_running": [], "queue_pending": []})
    engine.routes[path] = httpx.Response(status, json=answer)
    if kind == "comfyui":
        return await comfy_render(engine, tmp_path, monkeypatch)
    if kind == "replicate":
        return await replicate_render(engine, tmp_path, monkeypatch)
    if kind == "fal":
        return await fal_render(engine, tmp_path, monkeypatch)
    return await openai_render(engine, tmp_path)


@pytest.mark.parametrize(("kind", "path", "answer"), MALFORMED)
async def test_a_malformed_answer_is_incomplete_where_it_is_parsed(kind, path, answer, tmp_path, monkeypatch,
                                                                 autojump_clock):
    with pytest.raises(common.Incomplete, match="shaped as the protocol says"):
        await render_kind(kind, path, answer, tmp_path, monkeypatch)


CATALOG = """
[[models]]
id = "cog-image"
capability = "image.generate"
backend = "cog"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1.00" }]
[models.engine]
urls = ["http://cog"]
poll_s = 1.0
timeout_s = 5.0
[models.engine.bind]
prompt = "prompt"
"""


async def render(tmp_path, engine) -> Failed:
    path = tmp_path / "catalog.toml"
    path.write_text(CATALOG)
    catalog = read_catalog(str(path))
    engines = Engines(catalog, lambda: "http://node", b"hook-secret", lambda *args: None)
    await engines.http.aclose()  # the scripted engine's client instead
    ctx = context(engine)
    engines.context.http = ctx.http
    async with ctx.http:
        outcome = await engines.render(render_request(tmp_path, "cog"), catalog.model("cog-image"))
    assert isinstance(outcome, Failed)
    return outcome


async def test_a_bug_in_the_job_path_is_an_internal_error_not_the_engines_fault(tmp_path, monkeypatch,
                                                                               autojump_clock):
    """An AttributeError raised by the node's own code (here: binding the inputs)."""
    async def buggy(req, cfg):
        return req.promt  # a typo: RenderRequest has `prompt`

    monkeypatch.setattr(cog, "bound_inputs", buggy)
    assert (await render(tmp_path, cog_engine([]))).message == MSG_INTERNAL


async def test_a_malformed_answer_is_could_not_complete_through_render(tmp_path, autojump_clock):
    engine = cog_engine([])
    engine.routes[f"/predictions/{PID}"] = httpx.Response(202, json=["starting"])
    assert (await render(tmp_path, engine)).message == MSG_INCOMPLETE

"""The OpenAI-compatible front door (spec "OpenAI-compatible front door"): models, image
generations and speech; chat is service/http/routes/openai_chat.py. Each call is one job
per output (source `api`) through the `/v1` submit path; errors are in OpenAI's shape
(service/http/openai_compat.py). Hidden from the `/v1` OpenAPI document: its contract is
OpenAI's."""

from __future__ import annotations

import base64

import trio
from quart import Blueprint, Response
from quart_schema import hide

from service.catalog.request import SubmitRequest
from service.http.auth import node, principal, requires, resolve_project
from service.http.openai_compat import (FrontError, ImagesBody, SpeechBody, client_fields, install_errors, parse,
                                         size_to_tier)
from service.http.openai_jobs import WAIT_LIMIT, FrontJobs, job_failure, pick_model

bp = Blueprint("openai_front", __name__)
install_errors(bp)


@bp.get("/openai/v1/models")
@hide
@requires("generation:read")
async def models():
    """Every catalog model; `created` is 0 (the catalog has no dates)."""
    data = [{"id": m.id, "object": "model", "created": 0, "owned_by": "genservice"}
            for m in node().generation.catalog.models]
    return {"object": "list", "data": data}


@bp.get("/openai/v1/models/<path:model_id>")
@hide
@requires("generation:read")
async def model(model_id: str):
    m = node().generation.catalog.model(model_id)
    if m is None:
        raise FrontError(404, f"The model '{model_id}' does not exist or you do not have access to it.",
                         code="model_not_found", param="model")
    return {"id": m.id, "object": "model", "created": 0, "owned_by": "genservice"}


def _calls(gen) -> tuple[FrontJobs, dict]:
    project = resolve_project(None, write=True)
    return FrontJobs(gen, principal().org_id, project["id"]), project


@bp.post("/openai/v1/images/generations")
@hide
@requires("generation:write", limit=WAIT_LIMIT)
async def images():
    """`n` image.generate jobs; answers once every one has ended. Images whose job failed
    are left out (their holds released); when none completed, the first failure is the error."""
    data = await parse(ImagesBody)
    gen = node().generation
    m = pick_model(gen, data.model, "image.generate")
    calls, project = _calls(gen)
    plan = gen.plan(calls.org_id, project["id"], capability=None, model=m.id,
                    request=SubmitRequest(prompt=data.prompt, **size_to_tier(m, data.size)))
    try:
        for _ in range(data.n):
            gen.check_active_limit(calls.org_id)
            await calls.submit(plan)
        ends = await calls.wait_all()
        outputs = [o for st in ends if st["status"] == "completed" for o in st["outputs"]]
        if not outputs:
            raise job_failure(ends[0])
        items = []
        for out in outputs:
            if data.response_format == "b64_json":
                blob, _ = await trio.to_thread.run_sync(calls.output_file, out)
                items.append({"b64_json": base64.b64encode(blob).decode("ascii")})
            else:
                items.append({"url": gen.signer.url(out["id"])})
        return {"created": int(gen.clock.now()), "data": items}
    finally:
        await calls.close()


@bp.post("/openai/v1/audio/speech")
@hide
@requires("generation:write", limit=WAIT_LIMIT)
async def speech():
    """One audio.speech job; `voice` is one of the model's tiers (its default when absent);
    answers the audio bytes."""
    data = await parse(SpeechBody)
    gen = node().generation
    m = pick_model(gen, data.model, "audio.speech")
    if data.voice is not None and data.voice not in m.resolutions:
        raise FrontError(400, f"Unknown voice '{data.voice}' for {m.id}. Known: {', '.join(m.resolutions)}.",
                         param="voice")
    calls, project = _calls(gen)
    with client_fields(prompt="input"):
        plan = gen.plan(calls.org_id, project["id"], capability=None, model=m.id,
                        request=SubmitRequest(prompt=data.input, resolution=data.voice))
    try:
        gen.check_active_limit(calls.org_id)
        await calls.submit(plan)
        [st] = await calls.wait_all()
        if st["status"] != "completed" or not st["outputs"]:
            raise job_failure(st)
        blob, content_type = await trio.to_thread.run_sync(calls.output_file, st["outputs"][0])
        return Response(blob, status=200, content_type=content_type)
    finally:
        await calls.close()

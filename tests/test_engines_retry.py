"""Follow-up calls to an engine that has accepted a job are tried again after a transient
fault (service/engines/common.py, `patiently`): on trio's mock clock, against scripted
engines (httpx.MockTransport), a one-off 503, a connection reset and a timeout on each
follow-up read of every engine client end the job with its output; the same fault that
persists fails it after the bound (`sum(RETRY_S)`), with the error the spec's message is
made from (Upstream -> "failed upstream (HTTP 503)", a transport error -> "unavailable")."""

from __future__ import annotations

import base64
import inspect
from io import BytesIO

import httpx
import pytest
import trio
from PIL import Image

from service.backends.base import RenderRequest
from service.catalog.engines import CogEngine, ComfyEngine, FalEngine, OpenAIEngine, ReplicateEngine
from service.engines import cog, comfyui, fal, openai, replicate
from service.engines.common import RETRY_S, Upstream
from service.engines.context import Context
from service.engines.drive import drive

PID = "job-1"
TIMEOUT_S = 5.0
BOUND = sum(RETRY_S)


def png() -> bytes:
    buf = BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, "PNG")
    return buf.getvalue()


PNG = png()


class Engine:
    """A scripted engine: `routes` answer by path; `faults[path]` is the list of faults the
    next calls to that path meet, in order (`503`, `reset`, `timeout`; `always:<kind>` for
    every call). `calls` counts the calls per path."""

    def __init__(self, routes: dict) -> None:
        self.routes = routes
        self.faults: dict[str, list[str]] = {}
        self.calls: dict[str, int] = {}

    async def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls[path] = self.calls.get(path, 0) + 1
        pending = self.faults.get(path) or []
        fault = pending[0].removeprefix("always:") if pending else None
        if pending and not pending[0].startswith("always:"):
            pending.pop(0)
        if fault == "503":
            return httpx.Response(503, text="Service Unavailable")
        if fault == "reset":
            raise httpx.ReadError("[Errno 104] Connection reset by peer")
        if fault == "timeout":
            await trio.sleep(TIMEOUT_S)
            raise httpx.ReadTimeout("timed out")
        route = self.routes[path]
        if not callable(route):
            return route
        answer = route(request)
        return await answer if inspect.isawaitable(answer) else answer


def render_request(tmp_path, backend: str) -> RenderRequest:
    return RenderRequest(job_id=PID, capability="image.generate", model="m", backend=backend, prompt="a fox",
                         seed=7, aspect_ratio=None, resolution="1k", duration=None, inputs={},
                         work_dir=tmp_path / "work", test_mode=True)


def context(engine: Engine) -> Context:
    http = httpx.AsyncClient(transport=httpx.MockTransport(engine.handler))
    return Context(http, lambda: "http://node", b"hook-secret", lambda *args: None)


# -- ComfyUI -----------------------------------------------------------------------------------
def comfy_engine() -> Engine:
    reads = {"queue": 0}

    def queue(_request):
        reads["queue"] += 1  # running on the first read, then done
        running = [[0, PID, {}, {}, []]] if reads["queue"] == 1 else []
        return httpx.Response(200, json={"queue_running": running, "queue_pending": []})

    entry = {"status": {"status_str": "success", "completed": True, "messages": []},
             "outputs": {"9": {"images": [{"filename": "out.png", "subfolder": "", "type": "output"}]}}}
    return Engine({"/prompt": httpx.Response(200, json={"prompt_id": PID, "number": 1}), "/queue": queue,
                   f"/history/{PID}": lambda r: httpx.Response(200, json={PID: entry} if reads["queue"] > 1 else {}),
                   "/view": httpx.Response(200, content=PNG, headers={"content-type": "image/png"})})


async def comfy_render(engine: Engine, tmp_path, monkeypatch):
    async def no_socket(ctx, req, ws_url, ended, connected):  # polling alone: no real socket here
        connected.set()

    monkeypatch.setattr(comfyui, "_listen", no_socket)
    cfg = ComfyEngine(workflow="wf.json", urls=["http://comfy"], poll_s=1.0, timeout_s=TIMEOUT_S,
                      graph={"9": {"class_type": "SaveImage", "inputs": {}}})
    ctx = context(engine)
    async with ctx.http:
        return (await drive(comfyui.ComfyUI(ctx), cfg, ctx, render_request(tmp_path, "comfyui"), "http://comfy")).outputs


# -- Cog ---------------------------------------------------------------------------------------
def cog_engine(ctx_box: list, hook_after_checks: int = 0) -> Engine:
    checks = {"n": 0}
    done = {"status": "succeeded", "id": PID, "output": "http://cog/files/out.png"}

    def deliver() -> None:
        ctx = ctx_box[0]
        ctx.deliver(PID, ctx.token(PID), done)

    def put(_request):
        if not hook_after_checks:
            deliver()
        return httpx.Response(202, json={"id": PID, "status": "starting"})

    def health(_request):
        checks["n"] += 1
        if hook_after_checks and checks["n"] == hook_after_checks:
            deliver()
        return httpx.Response(200, json={"status": "BUSY"})

    return Engine({f"/predictions/{PID}": put, "/health-check": health,
                   "/files/out.png": httpx.Response(200, content=PNG)})


async def cog_render(engine: Engine, ctx_box: list, tmp_path):
    cfg = CogEngine(urls=["http://cog"], poll_s=1.0, timeout_s=TIMEOUT_S)
    ctx = context(engine)
    ctx_box.append(ctx)
    async with ctx.http:
        return (await drive(cog.Cog(ctx), cfg, ctx, render_request(tmp_path, "cog"), "http://cog", 1)).outputs


# -- Replicate ---------------------------------------------------------------------------------
def replicate_engine() -> Engine:
    reads = {"get": 0}
    urls = {"get": "http://rep/v1/predictions/p1", "cancel": "http://rep/v1/predictions/p1/cancel"}

    def get(_request):
        reads["get"] += 1
        if reads["get"] == 1:
            return httpx.Response(200, json={"id": "p1", "status": "processing", "urls": urls})
        return httpx.Response(200, json={"id": "p1", "status": "succeeded", "urls": urls,
                                         "output": ["http://rep/files/out.png"]})

    return Engine({"/v1/webhooks/default/secret": httpx.Response(200, json={
        "key": "whsec_" + base64.b64encode(b"k" * 24).decode()}),
        "/v1/models/acme/pictures/predictions": httpx.Response(201, json={"id": "p1", "status": "starting",
                                                                          "urls": urls}),
        "/v1/predictions/p1": get, "/files/out.png": httpx.Response(200, content=PNG)})


async def replicate_render(engine: Engine, tmp_path, monkeypatch, box: list | None = None):
    monkeypatch.setenv("RETRY_TEST_TOKEN", "r8_test")
    cfg = ReplicateEngine(model="acme/pictures", token_env="RETRY_TEST_TOKEN", url="http://rep/v1", poll_s=1.0,
                          timeout_s=TIMEOUT_S)
    ctx = context(engine)
    if box is not None:
        box.append(ctx)
    async with ctx.http:
        return (await drive(replicate.Replicate(ctx), cfg, ctx, render_request(tmp_path, "replicate"))).outputs


# -- fal ---------------------------------------------------------------------------------------
def fal_engine() -> Engine:
    reads = {"status": 0}
    base = "http://fal/_q/s1/r/r1"

    def status(_request):
        reads["status"] += 1
        return httpx.Response(200, json={"status": "IN_PROGRESS" if reads["status"] == 1 else "COMPLETED"})

    return Engine({"/acme/pictures": httpx.Response(200, json={
        "request_id": "r1", "status_url": f"{base}/state", "response_url": f"{base}/out",
        "cancel_url": f"{base}/stop"}), "/_q/s1/r/r1/state": status,
        "/_q/s1/r/r1/out": httpx.Response(200, json={"images": [{"url": "http://fal/files/out.png"}]}),
        "/files/out.png": httpx.Response(200, content=PNG)})


async def fal_render(engine: Engine, tmp_path, monkeypatch):
    monkeypatch.setenv("RETRY_TEST_TOKEN", "fal-key")
    cfg = FalEngine(app="acme/pictures", token_env="RETRY_TEST_TOKEN", url="http://fal", poll_s=1.0,
                    timeout_s=TIMEOUT_S)
    ctx = context(engine)
    async with ctx.http:
        return (await drive(fal.Fal(ctx), cfg, ctx, render_request(tmp_path, "fal"))).outputs


# -- OpenAI-compatible -------------------------------------------------------------------------
def openai_engine() -> Engine:
    return Engine({"/v1/images/generations": httpx.Response(200, json={"data": [{"url": "http://oai/files/out.png"}]}),
                   "/files/out.png": httpx.Response(200, content=PNG)})


async def openai_render(engine: Engine, tmp_path):
    cfg = OpenAIEngine(url="http://oai/v1", model="m", timeout_s=TIMEOUT_S)
    ctx = context(engine)
    async with ctx.http:
        return (await drive(openai.OpenAI(ctx), cfg, ctx, render_request(tmp_path, "openai"), "http://oai/v1")).outputs


# -- the cases ---------------------------------------------------------------------------------
READS = [  # (engine kind, path of a follow-up read)
    ("comfyui", "/queue"), ("comfyui", f"/history/{PID}"), ("comfyui", "/view"),
    ("cog", "/files/out.png"),
    ("replicate", "/v1/webhooks/default/secret"), ("replicate", "/v1/predictions/p1"),
    ("replicate", "/files/out.png"),
    ("fal", "/_q/s1/r/r1/state"), ("fal", "/_q/s1/r/r1/out"), ("fal", "/files/out.png"),
    ("openai", "/files/out.png"),
]


async def run(kind: str, faults: dict[str, list[str]], tmp_path, monkeypatch):
    if kind == "cog":
        box: list = []
        engine = cog_engine(box)
        engine.faults = faults
        return engine, await cog_render(engine, box, tmp_path)
    engine = {"comfyui": comfy_engine, "replicate": replicate_engine, "fal": fal_engine,
              "openai": openai_engine}[kind]()
    engine.faults = faults
    if kind == "comfyui":
        return engine, await comfy_render(engine, tmp_path, monkeypatch)
    if kind == "replicate":
        return engine, await replicate_render(engine, tmp_path, monkeypatch)
    if kind == "fal":
        return engine, await fal_render(engine, tmp_path, monkeypatch)
    return engine, await openai_render(engine, tmp_path)


@pytest.mark.parametrize("fault", ["503", "reset", "timeout"])
@pytest.mark.parametrize(("kind", "path"), READS)
async def test_a_one_off_fault_on_a_follow_up_read_does_not_fail_the_job(kind, path, fault, tmp_path, monkeypatch,
                                                                         autojump_clock):
    engine, outputs = await run(kind, {path: [fault]}, tmp_path, monkeypatch)
    assert [(o.content_type, o.path.read_bytes()) for o in outputs] == [("image/png", PNG)]
    assert engine.calls[path] >= 2  # the fault, then the read that answered


@pytest.mark.parametrize(("fault", "error"), [("503", Upstream), ("reset", httpx.ReadError),
                                              ("timeout", httpx.ReadTimeout)])
@pytest.mark.parametrize(("kind", "path"), READS)
async def test_a_fault_that_persists_fails_the_job_after_the_bound(kind, path, fault, error, tmp_path, monkeypatch,
                                                                   autojump_clock):
    start = trio.current_time()
    with pytest.raises(error) as caught:
        await run(kind, {path: [f"always:{fault}"]}, tmp_path, monkeypatch)
    if error is Upstream:
        assert caught.value.status == 503
    assert trio.current_time() - start >= BOUND
    assert trio.current_time() - start < BOUND + (len(RETRY_S) + 1) * TIMEOUT_S + 30  # bounded


async def test_cog_create_is_tried_again_after_a_transient_fault(tmp_path, autojump_clock):
    """PUT /predictions/{id} is keyed by the job id: Cog answers a repeated PUT with the same prediction."""
    for fault in ("503", "reset", "timeout"):
        box: list = []
        engine = cog_engine(box)
        engine.faults = {f"/predictions/{PID}": [fault]}
        outputs = await cog_render(engine, box, tmp_path / fault)
        assert len(outputs) == 1 and engine.calls[f"/predictions/{PID}"] == 2


async def test_cog_health_checks_failing_for_a_few_seconds_do_not_fail_the_job(tmp_path, autojump_clock):
    """Three failed health checks in a row (a 3 s reset), then the outcome by webhook: completed."""
    box: list = []
    engine = cog_engine(box, hook_after_checks=5)
    engine.faults = {"/health-check": ["reset", "reset", "reset"]}
    outputs = await cog_render(engine, box, tmp_path)
    assert len(outputs) == 1 and engine.calls["/health-check"] == 3 + 5  # the faults, then the checks


async def test_cog_health_checks_failing_past_the_bound_fail_the_job_unavailable(tmp_path, autojump_clock):
    box: list = []
    engine = cog_engine(box, hook_after_checks=10_000)
    engine.faults = {"/health-check": ["always:reset"]}
    start = trio.current_time()
    with pytest.raises(cog.Unreachable, match="^Cog server http://cog stopped answering$"):
        await cog_render(engine, box, tmp_path)
    assert BOUND <= trio.current_time() - start < BOUND + 5


@pytest.mark.parametrize("fault", ["reset", "timeout", "503"])
async def test_a_comfyui_submit_whose_answer_is_lost_is_followed_not_sent_again(fault, tmp_path, monkeypatch,
                                                                                autojump_clock):
    """ComfyUI queued the prompt but its answer never came: it is found by its id and followed."""
    engine = comfy_engine()

    async def queued_then_lost(request):  # ComfyUI has it (the scripted queue lists it); its answer fails
        if fault == "503":
            return httpx.Response(503, text="Service Unavailable")
        if fault == "timeout":
            await trio.sleep(TIMEOUT_S)
            raise httpx.ReadTimeout("timed out")
        raise httpx.ReadError("[Errno 104] Connection reset by peer")

    engine.routes["/prompt"] = queued_then_lost
    outputs = await comfy_render(engine, tmp_path, monkeypatch)
    assert len(outputs) == 1 and engine.calls["/prompt"] == 1


async def test_a_comfyui_submit_that_never_arrived_fails_and_is_not_sent_again(tmp_path, monkeypatch, autojump_clock):
    engine = comfy_engine()
    engine.routes["/queue"] = httpx.Response(200, json={"queue_running": [], "queue_pending": []})
    engine.routes[f"/history/{PID}"] = httpx.Response(200, json={})
    engine.faults = {"/prompt": ["reset"]}
    with pytest.raises(httpx.ReadError):
        await comfy_render(engine, tmp_path, monkeypatch)
    assert engine.calls["/prompt"] == 1
    assert engine.calls["/queue"] == len(comfyui.SETTLE_S) + 1  # looked up by its id first


def signed_hook(ctx: Context, payload: dict) -> None:
    """Deliver a Replicate webhook signed the Standard Webhooks way with the scripted secret."""
    import hashlib
    import hmac
    import json
    import time

    body = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    sig = base64.b64encode(hmac.new(b"k" * 24, f"msg_1.{stamp}.".encode() + body, hashlib.sha256).digest())
    headers = {"webhook-id": "msg_1", "webhook-timestamp": stamp, "webhook-signature": f"v1,{sig.decode()}"}
    assert ctx.deliver(PID, ctx.token(PID), payload, headers, body)


@pytest.mark.parametrize("fault", ["reset", "timeout"])
async def test_a_replicate_create_whose_answer_is_lost_ends_by_its_webhook(fault, tmp_path, monkeypatch,
                                                                          autojump_clock):
    """Replicate made the prediction but the create's answer was lost: not created again; its
    `completed` webhook ends the job."""
    engine = replicate_engine()
    box: list = []
    async def created_then_lost(_request):
        done = {"id": "p1", "status": "succeeded", "output": ["http://rep/files/out.png"]}
        if fault == "timeout":
            await trio.sleep(TIMEOUT_S + replicate.WAIT_S)
            signed_hook(box[0], done)
            raise httpx.ReadTimeout("timed out")
        signed_hook(box[0], done)
        raise httpx.ReadError("[Errno 104] Connection reset by peer")

    engine.routes["/v1/models/acme/pictures/predictions"] = created_then_lost
    outputs = await replicate_render(engine, tmp_path, monkeypatch, box)
    assert len(outputs) == 1 and engine.calls["/v1/models/acme/pictures/predictions"] == 1


async def test_a_replicate_create_that_never_made_a_prediction_fails_after_the_wait(tmp_path, monkeypatch,
                                                                                   autojump_clock):
    engine = replicate_engine()
    engine.faults = {"/v1/models/acme/pictures/predictions": ["reset"]}
    start = trio.current_time()
    with pytest.raises(httpx.ReadError):
        await replicate_render(engine, tmp_path, monkeypatch)
    assert trio.current_time() - start == pytest.approx(replicate.LOST_CREATE_S)
    assert engine.calls["/v1/models/acme/pictures/predictions"] == 1

"""Product runs over HTTP, end to end on the built-in models (spec "Product run", "Product
run and steps"): the full text-to-clip run, parallel steps, failure at each step, the
balance running out between steps, cancel in each state, version pinning."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace

import av
import pytest
from PIL import Image

from service.actors.runs import actor as runs_mod
from service.actors.balance.messages import PlaceHold
from service.catalog import products as P
from service.catalog.product_defs import TEXT_TO_CLIP
from service.catalog.product_types import FromInput, FromStep, Input, Product, Step
from conftest import get_run, j, wait_for_run
from waiting import settle

RUNS = "/v1/workflows/products/text-to-clip/runs"
BASE = "http://testserver"
FINAL = ("completed", "failed", "canceled")
MSG = {
    "upstream": "Generation failed upstream (HTTP {}). Credits were released.",
    "no-output": "Generation failed: the model returned no output. Credits were released.",
    "internal": "Generation failed due to an internal error. Credits were released.",
}


async def start(node, key, inputs, path=RUNS, **kw) -> dict:
    r = await node.call("POST", path, key, json={"inputs": inputs, **kw})
    assert r.status_code == 202, await r.get_data(as_text=True)
    return (await j(r))["data"]


async def wait_final(node, key, run_id, timeout=60) -> dict:
    return await wait_for_run(node, key, run_id, lambda r: r["status"] in FINAL, timeout)


def step(run, key) -> dict:
    return next(s for s in run["steps"] if s["key"] == key)


async def job_status(node, key, job_id) -> dict:
    r = await node.call("GET", f"/v1/generation/requests/{job_id}/status", key)
    assert r.status_code == 200
    return await j(r)


async def fetch(node, key, url) -> tuple[str, bytes]:
    r = await node.call("GET", url.removeprefix(BASE), key)
    assert r.status_code == 302
    r = await node.client.get(r.headers["Location"].removeprefix(BASE))
    assert r.status_code == 200
    return r.headers["Content-Type"], await r.get_data()


async def holds(node, key) -> list[dict]:
    r = await node.call("GET", "/v1/billing/holds", key)
    return (await j(r))["data"]


async def balance(node, key) -> dict:
    return (await j(await node.call("GET", "/v1/billing/balance", key)))["data"]


@pytest.fixture
async def key(node):
    org = await node.create_org()
    node.org = org
    return org["api_key"]


# -- the full run ------------------------------------------------------------------------------
async def test_text_to_clip_end_to_end(node, key):
    run = await start(node, key, {"prompt": "a lighthouse at dusk", "seed": 7})
    rid = run["id"]
    default_project = node.org["default_project_id"]
    # the 202 answer: the run queued with every step pending
    assert set(run) == {"id", "status", "product", "product_version", "project_id", "inputs", "steps", "outputs",
                        "credits", "error", "status_url", "cancel_url", "created_at", "started_at", "finished_at"}
    assert (run["status"], run["product"], run["product_version"], run["project_id"]) == (
        "queued", "text-to-clip", 1, default_project)
    assert run["inputs"] == {"prompt": "a lighthouse at dusk", "seed": 7}
    assert run["status_url"] == f"{BASE}/v1/workflows/runs/{rid}"
    assert run["cancel_url"] == f"{BASE}/v1/workflows/runs/{rid}/cancel"
    assert (run["outputs"], run["credits"], run["error"]) == ({}, {"estimate": "11.00", "actual": None}, None)
    assert run["created_at"] and run["started_at"] is None and run["finished_at"] is None
    assert [(s["key"], s["capability"], s["op"], s["model"], s["status"], s["request_id"], s["outputs"], s["error"])
            for s in run["steps"]] == [
        ("still", "image.generate", None, "proc-image", "pending", None, [], None),
        ("clip", "video.generate", None, "camera-move", "pending", None, [], None),
        ("thumb", None, "resize_image", None, "pending", None, [], None),
        ("cover", None, "extract_frame", None, "pending", None, [], None),
    ]

    # step outputs fill as soon as the step finishes, before the run completes
    mid = await wait_for_run(node, key, rid, lambda r: step(r, "still")["status"] == "completed")
    assert len(step(mid, "still")["outputs"]) == 1

    done = await wait_final(node, key, rid)
    assert done["status"] == "completed", done
    assert done["error"] is None and done["finished_at"] >= done["started_at"] >= done["created_at"]
    assert done["credits"] == {"estimate": "11.00", "actual": "11.00"}
    assert [s["status"] for s in done["steps"]] == ["completed"] * 4
    assert all(s["error"] is None for s in done["steps"])
    assert set(done["outputs"]) == {"still", "clip", "cover", "thumbnail"}
    outs = {name: assets[0] for name, assets in done["outputs"].items()}
    assert all(len(a) == 1 for a in done["outputs"].values())
    assert outs["still"] == step(done, "still")["outputs"][0]
    assert outs["thumbnail"] == step(done, "thumb")["outputs"][0]

    # a real PNG still, a real 5-second H.264 MP4, a real cover image, a real thumbnail
    ctype, data = await fetch(node, key, outs["still"]["url"])
    assert ctype == "image/png" and data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (outs["still"]["width"], outs["still"]["height"]) == (1024, 576)
    ctype, data = await fetch(node, key, outs["clip"]["url"])
    assert ctype == "video/mp4"
    with av.open(io.BytesIO(data)) as container:
        v = container.streams.video[0]
        assert v.codec_context.name == "h264"
        assert (v.codec_context.width, v.codec_context.height) == (854, 480)
        assert float(container.duration / av.time_base) == pytest.approx(5.0, abs=0.1)
        assert sum(1 for _ in container.decode(v)) > 24 * 4
    assert outs["clip"]["duration_s"] == pytest.approx(5.0)
    ctype, data = await fetch(node, key, outs["cover"]["url"])
    with Image.open(io.BytesIO(data)) as im:
        assert (ctype, im.format, im.size) == ("image/png", "PNG", (854, 480))
        lo, hi = im.convert("L").getextrema()
        assert hi - lo > 10  # a picture, not a blank frame
    ctype, data = await fetch(node, key, outs["thumbnail"]["url"])
    with Image.open(io.BytesIO(data)) as im:
        assert (im.format, im.size) == ("PNG", (512, 288))

    # op outputs are assets of the run's project; the run's assets are readable one by one
    for a in outs.values():
        r = await node.call("GET", f"/v1/generation/assets/{a['id']}", key)
        assert r.status_code == 200
        assert (await j(r))["data"]["project_id"] == default_project

    # the steps that do not depend on each other ran at the same time
    still, clip, thumb, cover = (step(done, k) for k in ("still", "clip", "thumb", "cover"))
    assert clip["started_at"] == thumb["started_at"] >= still["finished_at"]
    assert thumb["finished_at"] < clip["finished_at"]
    assert cover["started_at"] >= clip["finished_at"]
    assert done["started_at"] == still["started_at"]

    # each capability step is an ordinary job with source workflow
    for s in (still, clip):
        st = await job_status(node, key, s["request_id"])
        assert (st["status"], st["source"], st["project_id"]) == ("completed", "workflow", default_project)
        assert [o["id"] for o in st["outputs"]] == [o["id"] for o in s["outputs"]]
    assert (await job_status(node, key, still["request_id"]))["credits"] == {"estimate": "1.00", "actual": "1.00"}
    assert thumb["request_id"] is None and cover["request_id"] is None
    # each step held its own credits, captured; the run reserved nothing itself
    hs = await holds(node, key)
    assert sorted((h["job_id"], h["workflow_run_id"], h["status"], h["amount"]) for h in hs) == sorted([
        (still["request_id"], rid, "captured", "1.00"), (clip["request_id"], rid, "captured", "10.00")])
    b = await balance(node, key)
    assert (b["available"], b["held"]) == ("189.00", "0.00")

    # the run in the lists; its step jobs only inside it
    r = await node.call("GET", "/v1/workflows/runs", key)
    assert [x["id"] for x in (await j(r))["data"]] == [rid]
    assert (await j(r))["data"][0] == done
    r = await node.call("GET", "/v1/runs", key)
    feed = (await j(r))["data"]
    assert (feed["total"], feed["next_cursor"], [(x["type"], x["id"]) for x in feed["items"]]) == (
        1, None, [("run", rid)])
    row = feed["items"][0]
    assert (row["status"], row["source"], row["created_at"], row["steps"]) == (
        "completed", "workflow", done["created_at"], done["steps"])
    # cancel of a completed run: returned unchanged
    r = await node.call("POST", f"/v1/workflows/runs/{rid}/cancel", key)
    assert r.status_code == 200 and (await j(r))["data"] == done


async def test_run_by_id_is_org_scoped(node, key):
    run = await start(node, key, {"prompt": "x [[fail:internal]]"})
    other = await node.create_org(name="Other", email="o@other.test")
    for method, path in (("GET", f"/v1/workflows/runs/{run['id']}"), ("POST", f"/v1/workflows/runs/{run['id']}/cancel"),
                         ("GET", f"/v1/workflows/runs/{uuid.uuid4()}")):
        r = await node.call(method, path, other["api_key"])
        assert r.status_code == 404
        assert (await j(r))["error"]["code"] == "request.not_found"
    await wait_final(node, key, run["id"])


# -- failures ------------------------------------------------------------------------------------
def lab_product() -> Product:
    """text-to-clip with a separate prompt per capability step, so a directive hits one step."""
    return Product(
        slug="fail-lab", name="Fail lab", category="video", description="test only", version=1,
        inputs={"still_prompt": Input("text", "Still", required=True),
                "clip_prompt": Input("text", "Clip", required=True)},
        steps=(
            Step("still", capability="image.generate", model="proc-image",
                 params={"prompt": FromInput("still_prompt"), "aspect_ratio": "16:9", "resolution": "1k"}),
            Step("clip", capability="video.generate", model="camera-move", params={
                "prompt": FromInput("clip_prompt"), "aspect_ratio": "16:9", "resolution": "480p", "duration": 5,
                "inputs": {"start_frame": FromStep("still")}}),
            Step("thumb", op="resize_image", params={"image": FromStep("still"), "max_side": 512}),
            Step("cover", op="extract_frame", params={"video": FromStep("clip"), "at": "middle"}),
        ),
        outputs={"still": "still", "clip": "clip", "cover": "cover", "thumbnail": "thumb"},
    )


@pytest.fixture
def lab(monkeypatch):
    registry = P.ProductRegistry([*(P.REGISTRY.by_version(p.slug, p.version) for p in P.list_products()),
                                  lab_product()])
    monkeypatch.setattr(P, "REGISTRY", registry)
    return "/v1/workflows/products/fail-lab/runs"


async def test_still_fails(node, key):
    run = await start(node, key, {"prompt": "a harbour [[fail:upstream:502]]"})
    done = await wait_final(node, key, run["id"])
    assert done["status"] == "failed"
    assert done["error"] == "still: " + MSG["upstream"].format(502)
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "failed"), ("clip", "canceled"), ("thumb", "canceled"), ("cover", "canceled")]
    assert step(done, "still")["error"] == MSG["upstream"].format(502)
    assert all(step(done, k)["error"] is None for k in ("clip", "thumb", "cover"))
    assert (done["outputs"], done["credits"]["actual"]) == ({}, "0.00")
    assert done["finished_at"] is not None
    st = await job_status(node, key, step(done, "still")["request_id"])
    assert (st["status"], st["error"]) == ("failed", MSG["upstream"].format(502))
    assert [(h["status"], h["amount"]) for h in await holds(node, key)] == [("released", "1.00")]
    assert (await balance(node, key))["available"] == "200.00"


async def test_still_flagged(node, key):
    run = await start(node, key, {"prompt": "a harbour [[nsfw]]"})
    done = await wait_final(node, key, run["id"])
    assert (done["status"], done["error"]) == ("failed", "still: " + runs_mod.MSG_FLAGGED)
    assert (await job_status(node, key, step(done, "still")["request_id"]))["status"] == "nsfw"


async def test_clip_fails_after_the_still_was_charged(node, key, lab):
    run = await start(node, key, {"still_prompt": "a harbour", "clip_prompt": "[[delay:0.5]] [[fail:no-output]]"},
                      path=lab)
    done = await wait_final(node, key, run["id"])
    assert done["status"] == "failed"
    assert done["error"] == "clip: " + MSG["no-output"]
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "completed"), ("clip", "failed"), ("thumb", "completed"), ("cover", "canceled")]
    assert len(step(done, "thumb")["outputs"]) == 1  # completed steps keep their outputs
    assert (done["outputs"], done["credits"]["actual"]) == ({}, "1.00")  # completed steps stay charged
    assert sorted((h["status"], h["amount"]) for h in await holds(node, key)) == [
        ("captured", "1.00"), ("released", "10.00")]
    assert (await balance(node, key))["available"] == "199.00"


async def test_thumb_fails_and_cancels_the_clip_in_flight(node, key, monkeypatch):
    def broken(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr("service.media.ops.resize_image", broken)
    run = await start(node, key, {"prompt": "a harbour [[delay:1]]"})
    done = await wait_final(node, key, run["id"], timeout=30)
    assert done["status"] == "failed"
    assert done["error"] == "thumb: " + MSG["internal"]
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "completed"), ("clip", "canceled"), ("thumb", "failed"), ("cover", "canceled")]
    clip = await job_status(node, key, step(done, "clip")["request_id"])
    assert clip["status"] == "canceled"
    hs = {h["job_id"]: h for h in await holds(node, key)}
    assert hs[step(done, "clip")["request_id"]]["status"] == "released"
    assert hs[step(done, "still")["request_id"]]["status"] == "captured"
    assert done["credits"]["actual"] == "1.00"


async def test_cover_fails_after_everything_else(node, key, monkeypatch):
    def broken(*a, **kw):
        raise ValueError("no decodable frame")

    monkeypatch.setattr("service.media.ops.extract_frame", broken)
    run = await start(node, key, {"prompt": "a harbour"})
    done = await wait_final(node, key, run["id"])
    assert (done["status"], done["error"]) == ("failed", "cover: " + MSG["internal"])
    assert [s["status"] for s in done["steps"]] == ["completed", "completed", "completed", "failed"]
    assert (done["outputs"], done["credits"]["actual"]) == ({}, "11.00")


async def test_balance_used_up_between_steps(node, key):
    run = await start(node, key, {"prompt": "a harbour [[delay:1]]"})
    await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    # while the still renders, something else takes all but 5.00 (the still holds 1.00)
    await node.parts.balances.ask(node.org["organization_id"], PlaceHold(str(uuid.uuid4()), 194_000_000))
    done = await wait_final(node, key, run["id"])
    assert done["status"] == "failed"
    assert done["error"] == "clip: Not enough credits to start this step (required 10.00, available 5.00)."
    assert [(s["key"], s["status"]) for s in done["steps"]] == [
        ("still", "completed"), ("clip", "failed"), ("thumb", "canceled"), ("cover", "canceled")]
    assert step(done, "clip")["outputs"] == []
    # the clip's job was never created: its request id names nothing
    r = await node.call("GET", f"/v1/generation/requests/{step(done, 'clip')['request_id']}/status", key)
    assert r.status_code == 404
    assert done["credits"]["actual"] == "1.00"
    assert (await balance(node, key))["available"] == "5.00"


# -- cancel ------------------------------------------------------------------------------------
async def cancel(node, key, run_id) -> dict:
    r = await node.call("POST", f"/v1/workflows/runs/{run_id}/cancel", key)
    assert r.status_code == 200
    return (await j(r))["data"]


async def test_cancel_while_queued(node, key, monkeypatch):
    async def hold_back(self):
        return None

    monkeypatch.setattr(runs_mod.RunActor, "_advance", hold_back)
    run = await start(node, key, {"prompt": "x"})
    assert (await get_run(node, key, run["id"]))["status"] == "queued"
    out = await cancel(node, key, run["id"])
    assert out["status"] == "canceled" and out["finished_at"] is not None
    assert [s["status"] for s in out["steps"]] == ["canceled"] * 4
    assert all(s["request_id"] is None for s in out["steps"])
    assert (out["error"], out["outputs"], out["credits"]["actual"]) == (None, {}, "0.00")
    assert await holds(node, key) == []
    assert await get_run(node, key, run["id"]) == out


async def test_cancel_while_the_first_step_renders(node, key):
    run = await start(node, key, {"prompt": "x [[delay:5]]"})
    await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    out = await cancel(node, key, run["id"])
    assert (out["status"], out["error"], out["credits"]["actual"]) == ("canceled", None, "0.00")
    assert [s["status"] for s in out["steps"]] == ["canceled"] * 4
    st = await job_status(node, key, step(out, "still")["request_id"])
    assert st["status"] == "canceled"
    assert [h["status"] for h in await holds(node, key)] == ["released"]
    assert (await balance(node, key))["available"] == "200.00"
    # a canceled run is returned unchanged; it stays canceled
    assert await cancel(node, key, run["id"]) == out
    await settle()  # whatever the cancel set going has run
    assert await get_run(node, key, run["id"]) == out


async def test_cancel_while_the_clip_renders(node, key, lab):
    run = await start(node, key, {"still_prompt": "a harbour", "clip_prompt": "[[delay:5]] waves"}, path=lab)
    await wait_for_run(node, key, run["id"], lambda r: step(r, "thumb")["status"] == "completed"
                   and step(r, "clip")["status"] == "running")
    out = await cancel(node, key, run["id"])
    assert [(s["key"], s["status"]) for s in out["steps"]] == [
        ("still", "completed"), ("clip", "canceled"), ("thumb", "completed"), ("cover", "canceled")]
    assert (out["status"], out["credits"]["actual"], out["outputs"]) == ("canceled", "1.00", {})
    assert (await job_status(node, key, step(out, "clip")["request_id"]))["status"] == "canceled"
    assert sorted(h["status"] for h in await holds(node, key)) == ["captured", "released"]
    assert (await balance(node, key))["available"] == "199.00"


async def test_cancel_a_failed_run_returns_it_unchanged(node, key):
    run = await start(node, key, {"prompt": "x [[fail:internal]]"})
    done = await wait_final(node, key, run["id"])
    assert done["status"] == "failed"
    assert await cancel(node, key, run["id"]) == done


async def test_a_step_job_canceled_outside_the_run_fails_the_run(node, key):
    run = await start(node, key, {"prompt": "x [[delay:5]]"})
    mid = await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    r = await node.call("POST", f"/v1/generation/requests/{step(mid, 'still')['request_id']}/cancel", key)
    assert r.status_code == 200
    done = await wait_final(node, key, run["id"])
    assert (done["status"], done["error"]) == ("failed", "still: " + runs_mod.MSG_JOB_CANCELED)


# -- version pinning -------------------------------------------------------------------------------
async def test_a_run_keeps_the_version_it_started_with(node, key, monkeypatch):
    run = await start(node, key, {"prompt": "a harbour [[delay:1]]"})
    assert run["product_version"] == 1
    await wait_for_run(node, key, run["id"], lambda r: step(r, "still")["status"] == "running")
    # v2 is published mid-run: a smaller thumbnail and no cover
    thumb_v2 = Step("thumb", op="resize_image", params={"image": FromStep("still"), "max_side": 128})
    v2 = replace(TEXT_TO_CLIP, version=2, steps=(TEXT_TO_CLIP.steps[0], TEXT_TO_CLIP.steps[1], thumb_v2),
                 outputs={"still": "still", "clip": "clip", "thumbnail": "thumb"})
    registry = P.ProductRegistry(P.REGISTRY.by_version(p.slug, p.version) for p in P.list_products())
    registry.add(v2)
    monkeypatch.setattr(P, "REGISTRY", registry)
    r = await node.call("GET", "/v1/workflows/products/text-to-clip", key)
    assert (await j(r))["data"]["version"] == 2

    done = await wait_final(node, key, run["id"])
    assert (done["status"], done["product_version"]) == ("completed", 1)
    assert [s["key"] for s in done["steps"]] == ["still", "clip", "thumb", "cover"]
    assert set(done["outputs"]) == {"still", "clip", "cover", "thumbnail"}
    assert (done["outputs"]["thumbnail"][0]["width"], done["outputs"]["thumbnail"][0]["height"]) == (512, 288)

    new = await start(node, key, {"prompt": "a harbour"})
    assert (new["product_version"], [s["key"] for s in new["steps"]]) == (2, ["still", "clip", "thumb"])
    done2 = await wait_final(node, key, new["id"])
    assert done2["status"] == "completed"
    assert set(done2["outputs"]) == {"still", "clip", "thumbnail"}
    assert done2["outputs"]["thumbnail"][0]["width"] == 128


# -- lists -----------------------------------------------------------------------------------------
async def test_workflow_runs_list(node, key, lab):
    a = await start(node, key, {"prompt": "a [[fail:internal]]"})
    b = await start(node, key, {"still_prompt": "b [[fail:internal]]", "clip_prompt": "b"}, path=lab)
    r = await node.call("POST", "/v1/projects", key, json={"name": "Side"})
    side = (await j(r))["data"]
    c = await start(node, key, {"prompt": "c [[fail:internal]]"}, project_id=side["id"])
    for x in (a, b, c):
        await wait_final(node, key, x["id"])

    async def ids(query="", headers=None):
        r = await node.call("GET", "/v1/workflows/runs" + query, key, headers=headers)
        assert r.status_code == 200
        return [x["id"] for x in (await j(r))["data"]]

    assert await ids() == [b["id"], a["id"]]
    assert await ids("?product=text-to-clip") == [a["id"]]
    assert await ids("?product=nope") == []
    assert await ids("?limit=1") == [b["id"]]
    assert await ids("?limit=0") == [b["id"]]
    assert await ids("?limit=9999") == [b["id"], a["id"]]
    assert await ids(headers={"X-Service-Project": "side"}) == [c["id"]]
    assert await ids(f"?project_id={side['id']}") == [c["id"]]
    r = await node.call("GET", "/v1/workflows/runs?limit=x", key)
    assert r.status_code == 400
    r = await node.call("GET", "/v1/workflows/runs", key, headers={"X-Service-Project": "nowhere"})
    assert r.status_code == 404


"""Generation over HTTP: lists, submit (both routes), every 422/503/402/404/409 the default
and a custom catalog can produce (exact status, code, message, details), the fixed order,
estimate, request lists and status objects, permissions, idempotency keys."""

from __future__ import annotations

import pytest
import trio

from test_generation_support import (
    IMAGE, VIDEO, hold_of, holds, balance, job_row, local, running_node, submit, upload_ok, wait_status,
)
from test_media_samples import image_bytes, wav_bytes
from conftest import err

RATIOS = "1:1, 4:3, 3:4, 3:2, 2:3, 16:9, 9:16, 21:9, 4:5, 5:4"
SUBMIT_KEYS = {"status", "request_id", "status_url", "cancel_url", "credits_estimate"}
STATUS_KEYS = {"status", "request_id", "status_url", "cancel_url", "capability", "model", "project_id",
               "source", "outputs", "images", "video", "credits", "error", "created_at", "finished_at"}

CUSTOM_CATALOG = """
[[models]]
id = "ghost"
capability = "image.generate"
backend = "cog"  # its only server refuses connections: known down from the start
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1.00" }]
engine = { urls = ["http://127.0.0.1:9"] }

[[models]]
id = "half-priced"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k", "2k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1.00" }]

[[models]]
id = "pricey"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "250.00" }]
"""


@pytest.fixture
async def custom(nursery, tmp_path):
    path = tmp_path / "catalog.toml"
    path.write_text(CUSTOM_CATALOG)
    async with running_node(tmp_path / "node", test_mode=True, catalog_file=str(path)) as n:
        yield n


# -- lists -------------------------------------------------------------------------------------
async def test_capabilities_and_models_lists(node, org):
    r = await node.call("GET", "/v1/generation/capabilities", org["api_key"])
    assert r.status_code == 200
    caps = (await r.get_json())["data"]
    assert [c["id"] for c in caps] == ["image.generate", "video.generate", "image.edit", "mask.segment",
                                       "media.upscale", "audio.speech", "video.lipsync", "text.llm"]
    image = caps[0]
    assert [m["id"] for m in image["models"]] == ["proc-image"]
    assert image["models"][0]["available"] is True
    assert image["models"][0]["prices"] == [{"resolution": "1k", "duration": None, "credits": "1.00"},
                                            {"resolution": "2k", "duration": None, "credits": "2.00"}]
    assert caps[2]["models"] == []
    r = await node.call("GET", "/v1/generation/models", org["api_key"])
    models = (await r.get_json())["data"]
    assert [m["id"] for m in models] == ["proc-image", "camera-move", "lanczos-upscale", "espeak-ng", "mediapipe-selfie"]
    assert models[1]["capabilities"] == [{"id": "video.generate", "prices": [
        {"resolution": "480p", "duration": 5, "credits": "10.00"},
        {"resolution": "720p", "duration": 5, "credits": "20.00"}]}]


# -- submit ------------------------------------------------------------------------------------
async def test_submit_answers_bare_202_and_status_object_has_every_field(node, org):
    key = org["api_key"]
    body = await submit(node, key, {"prompt": "a quiet lake", "aspect_ratio": "16:9"})
    assert set(body) == SUBMIT_KEYS
    rid = body["request_id"]
    assert body["status"] == "queued"
    assert body["credits_estimate"] == "1.00"
    assert body["status_url"] == f"http://testserver/v1/generation/requests/{rid}/status"
    assert body["cancel_url"] == f"http://testserver/v1/generation/requests/{rid}/cancel"
    st = await wait_status(node, key, rid)
    assert set(st) == STATUS_KEYS
    assert st["status"] == "completed"
    assert st["capability"] == "image.generate" and st["model"] == "proc-image"
    assert st["project_id"] == org["default_project_id"]
    assert st["source"] == "api"
    assert st["credits"] == {"estimate": "1.00", "actual": "1.00"}
    assert st["error"] is None and st["finished_at"] is not None and st["created_at"] < st["finished_at"]
    assert st["video"] is None
    assert len(st["outputs"]) == 1 and st["images"] == st["outputs"]
    out = st["outputs"][0]
    assert set(out) == {"id", "url", "content_type", "width", "height", "duration_s"}
    assert out["url"] == f"http://testserver/v1/generation/assets/{out['id']}/content"
    assert (out["content_type"], out["width"], out["height"], out["duration_s"]) == ("image/png", 1024, 576, None)
    h = await hold_of(node, key, rid)
    assert (h["status"], h["amount"], h["captured"]) == ("captured", "1.00", "1.00")
    assert h["project_id"] == org["default_project_id"]
    assert (await balance(node, key))["available"] == "199.00"
    assert job_row(node, rid)["hold_settled"] == 1


async def test_model_route_and_tier_price(node, org):
    key = org["api_key"]
    body = await submit(node, key, {"prompt": "x", "resolution": "2k"}, path="/v1/generation/models/proc-image")
    assert body["credits_estimate"] == "2.00"
    st = await wait_status(node, key, body["request_id"])
    assert (st["outputs"][0]["width"], st["credits"]["actual"]) == (2048, "2.00")


async def test_queued_status_object_before_the_render(node, org):
    key = org["api_key"]
    body = await submit(node, key, {"prompt": "slow [[delay:30]]"})
    st = await wait_status(node, key, body["request_id"], wanted=("rendering",))
    assert st["credits"] == {"estimate": "1.00", "actual": None}
    assert (st["outputs"], st["images"], st["video"], st["finished_at"], st["error"]) == ([], [], None, None, None)
    assert (await hold_of(node, key, body["request_id"]))["status"] == "held"
    assert (await balance(node, key))["held"] == "1.00"
    await node.call("POST", f"/v1/generation/requests/{body['request_id']}/cancel", key)


# -- every 422 of the default catalog ----------------------------------------------------------
CASES = [
    (IMAGE, {"prompt": ""}, "prompt is required.", {"field": "prompt"}),
    (IMAGE, {}, "prompt is required.", {"field": "prompt"}),
    (IMAGE, {"prompt": "   "}, "prompt is required.", {"field": "prompt"}),
    (IMAGE, {"prompt": "x" * 10_001}, "prompt must be at most 10000 characters; got 10001.",
     {"field": "prompt", "max_length": 10_000, "length": 10_001}),
    (VIDEO, {"prompt": "é" * 100_000}, "prompt must be at most 10000 characters; got 100000.",
     {"field": "prompt", "max_length": 10_000, "length": 100_000}),
    ("/v1/generation/capabilities/image.edit", {"prompt": "x"}, "No model implements image.edit yet.",
     {"capability": "image.edit"}),
    ("/v1/generation/capabilities/video.lipsync", {}, "No model implements video.lipsync yet.",
     {"capability": "video.lipsync"}),
    ("/v1/generation/capabilities/text.llm", {"prompt": "x"}, "No model implements text.llm yet.",
     {"capability": "text.llm"}),
    (IMAGE, {"prompt": "x", "model": "nope"}, "Unknown model 'nope'. Known: proc-image.",
     {"model": "nope", "known": ["proc-image"]}),
    (IMAGE, {"prompt": "x", "model": "camera-move"}, "Unknown model 'camera-move'. Known: proc-image.",
     {"model": "camera-move", "known": ["proc-image"]}),
    ("/v1/generation/models/nope", {"prompt": "x"},
     "Unknown model 'nope'. Known: proc-image, camera-move, lanczos-upscale, espeak-ng, mediapipe-selfie.",
     {"model": "nope", "known": ["proc-image", "camera-move", "lanczos-upscale", "espeak-ng", "mediapipe-selfie"]}),
    ("/v1/generation/models/proc-image", {"prompt": "x", "model": "camera-move"},
     "Unknown model 'camera-move'. Known: proc-image.", {"model": "camera-move", "known": ["proc-image"]}),
    (IMAGE, {"prompt": "x", "aspect_ratio": "7:3"}, f"aspect_ratio must be one of {RATIOS}.",
     {"field": "aspect_ratio", "allowed": RATIOS.split(", ")}),
    ("/v1/generation/capabilities/media.upscale", {"aspect_ratio": "1:1"},
     "media.upscale has no aspect_ratio setting.", {"field": "aspect_ratio"}),
    (IMAGE, {"prompt": "x", "resolution": "4k"}, "proc-image resolution must be one of 1k, 2k.",
     {"field": "resolution", "model": "proc-image", "allowed": ["1k", "2k"]}),
    (VIDEO, {"prompt": "x", "resolution": "1080p"}, "camera-move resolution must be one of 480p, 720p.",
     {"field": "resolution", "model": "camera-move", "allowed": ["480p", "720p"]}),
    ("/v1/generation/capabilities/media.upscale", {"resolution": "4x"},
     "lanczos-upscale resolution must be one of 2x.",
     {"field": "resolution", "model": "lanczos-upscale", "allowed": ["2x"]}),
    (VIDEO, {"prompt": "x", "duration": 10}, "camera-move duration must be one of 5 seconds.",
     {"field": "duration", "model": "camera-move", "allowed": [5]}),
    (VIDEO, {"prompt": "x", "duration": 5.5}, "camera-move duration must be one of 5 seconds.",
     {"field": "duration", "model": "camera-move", "allowed": [5]}),
    (IMAGE, {"prompt": "x", "duration": 5}, "proc-image has no duration setting.",
     {"field": "duration", "model": "proc-image"}),
    (IMAGE, {"prompt": "x", "quality": "high"}, "proc-image has no quality setting.",
     {"field": "quality", "model": "proc-image"}),
    (VIDEO, {"prompt": "x", "quality": "high"}, "camera-move has no quality setting.",
     {"field": "quality", "model": "camera-move"}),
    (VIDEO, {"prompt": "x"}, "video.generate on camera-move: slot 'start_frame' takes 1 asset(s); got 0.",
     {"slot": "start_frame", "expected": 1, "got": 0}),
    ("/v1/generation/capabilities/media.upscale", {},
     "media.upscale on lanczos-upscale: slot 'media' takes 1 asset(s); got 0.",
     {"slot": "media", "expected": 1, "got": 0}),
    (IMAGE, {"prompt": "x", "inputs": {"image": []}},
     "image.generate on proc-image: unknown slot 'image'. Known: none.", {"slot": "image"}),
    (VIDEO, {"prompt": "x", "inputs": {"start_frame": ["https://example.com/a.png"]}},
     "Inputs must be asset ids or URLs returned by /v1/generation.",
     {"slot": "start_frame", "values": ["https://example.com/a.png"]}),
    (VIDEO, {"prompt": "x", "inputs": {"start_frame": ["not-an-id"]}},
     "Inputs must be asset ids or URLs returned by /v1/generation.",
     {"slot": "start_frame", "values": ["not-an-id"]}),
    (VIDEO, {"prompt": "x", "inputs": {"start_frame": ["http://testserver/v1/generation/assets/x/content"]}},
     "Inputs must be asset ids or URLs returned by /v1/generation.",
     {"slot": "start_frame", "values": ["http://testserver/v1/generation/assets/x/content"]}),
    (VIDEO, {"prompt": "x", "inputs": {"start_frame": ["00000000-0000-4000-8000-000000000000"]}},
     "Input asset not found in this project.", {"asset_ids": ["00000000-0000-4000-8000-000000000000"]}),
]


@pytest.mark.parametrize("path,body,message,details", CASES)
async def test_422_messages(node, org, path, body, message, details):
    r = await node.call("POST", path, org["api_key"], json=body)
    got = await r.get_json()
    assert r.status_code == 422, got
    assert err(got) == {"code": "request.validation_failed", "message": message, "details": details}
    assert await holds(node, org["api_key"]) == []


async def test_422_inputs_other_project_wrong_kind_and_urls(node, org):
    key = org["api_key"]
    image = await upload_ok(node, key, image_bytes("PNG"))
    audio = await upload_ok(node, key, wav_bytes(), ctype="audio/wav")
    r = await node.call("POST", "/v1/projects", key, json={"name": "Other"})
    other = (await r.get_json())["data"]
    elsewhere = await upload_ok(node, key, image_bytes("PNG", 32, 32), fields=[("project_id", other["id"])])
    assert elsewhere["project_id"] == other["id"]

    async def check(inputs, message, details):
        r = await node.call("POST", VIDEO, key, json={"prompt": "x", "inputs": inputs})
        got = await r.get_json()
        assert r.status_code == 422, got
        assert err(got) == {"code": "request.validation_failed", "message": message, "details": details}

    await check({"start_frame": [elsewhere["id"]]}, "Input asset not found in this project.",
                {"asset_ids": [elsewhere["id"]]})
    await check({"start_frame": [audio["id"]]}, "Input slot 'start_frame' takes image assets.",
                {"slot": "start_frame", "kinds": ["image"], "asset_ids": [audio["id"]]})
    await check({"start_frame": [image["id"], image["id"]]},
                "video.generate on camera-move: slot 'start_frame' takes 1 asset(s); got 2.",
                {"slot": "start_frame", "expected": 1, "got": 2})
    await check({"start_frame": [f"https://elsewhere.example/v1/generation/assets/{image['id']}/content"]},
                "Inputs must be asset ids or URLs returned by /v1/generation.",
                {"slot": "start_frame",
                 "values": [f"https://elsewhere.example/v1/generation/assets/{image['id']}/content"]})
    # in the other project (body project_id) the asset is found and the image of the default is not
    r = await node.call("POST", VIDEO, key, json={"prompt": "x", "project_id": other["slug"],
                                                   "inputs": {"start_frame": [image["id"]]}})
    assert r.status_code == 422 and err(await r.get_json())["details"] == {"asset_ids": [image["id"]]}
    # the asset's content URL and its signed URL count as ours (upscale is cheap to run)
    r = await node.call("GET", f"/v1/generation/assets/{image['id']}/url", key)
    signed = (await r.get_json())["data"]["url"]
    for ref in (image["url"], signed, image["id"].upper()):
        body = await submit(node, key, {"inputs": {"media": [ref]}},
                            path="/v1/generation/capabilities/media.upscale")
        st = await wait_status(node, key, body["request_id"])
        assert st["status"] == "completed", st
        assert (st["outputs"][0]["width"], st["outputs"][0]["height"]) == (128, 96)
    assert len(await holds(node, key)) == 3


async def test_project_comes_first_404_and_409(node, org):
    key = org["api_key"]
    r = await node.call("POST", IMAGE, key, json={"prompt": "", "model": "nope", "project_id": "missing"})
    assert r.status_code == 404
    assert err(await r.get_json())["code"] == "request.not_found"
    r = await node.call("POST", IMAGE, key, json={"prompt": "x"}, headers={"X-Service-Project": "missing"})
    assert r.status_code == 404
    r = await node.call("POST", "/v1/projects", key, json={"name": "Old"})
    old = (await r.get_json())["data"]
    r = await node.call("POST", f"/v1/projects/{old['id']}/archive", key)
    assert r.status_code == 200
    r = await node.call("POST", IMAGE, key, json={"prompt": "", "model": "nope", "project_id": old["slug"]})
    assert r.status_code == 409
    assert err(await r.get_json()) == {"code": "request.conflict", "message": "The project is archived.",
                                       "details": {"project_id": old["id"]}}


ORDER = [
    ({"prompt": "", "model": "nope", "resolution": "9k"}, "Unknown model 'nope'. Known: proc-image."),
    ({"prompt": "", "aspect_ratio": "7:3", "resolution": "9k"}, "prompt is required."),
    ({"prompt": "x", "aspect_ratio": "7:3", "resolution": "9k"}, f"aspect_ratio must be one of {RATIOS}."),
    ({"prompt": "x", "resolution": "9k", "duration": 3, "quality": "hi"},
     "proc-image resolution must be one of 1k, 2k."),
    ({"prompt": "x", "duration": 3, "quality": "hi"}, "proc-image has no duration setting."),
]


@pytest.mark.parametrize("body,message", ORDER)
async def test_fixed_order(node, org, body, message):
    r = await node.call("POST", IMAGE, org["api_key"], json=body)
    assert r.status_code == 422
    assert err(await r.get_json())["message"] == message


async def test_unknown_capability_is_404(node, org):
    r = await node.call("POST", "/v1/generation/capabilities/image.paint", org["api_key"], json={"prompt": "x"})
    assert r.status_code == 404
    assert err(await r.get_json()) == {"code": "request.not_found", "message": "Unknown capability 'image.paint'.",
                                       "details": {"capability": "image.paint"}}


@pytest.mark.parametrize("body,key", [
    ({"prompt": 5}, "prompt"), ({"prompt": "x", "colour": "red"}, "colour"),
    ({"prompt": "x", "inputs": {"image": "abc"}}, "inputs.image"),
    ({"prompt": "x", "duration": True}, "duration"), ({"prompt": "x", "duration": "5"}, "duration"),
])
async def test_schema_errors_are_400(node, org, body, key):
    r = await node.call("POST", IMAGE, org["api_key"], json=body)
    got = await r.get_json()
    assert r.status_code == 400, got
    e = err(got)
    assert e["code"] == "request.validation_failed"
    assert any(x["key"] == key or x["key"].startswith(key + ".") for x in e["details"]["errors"]), e


async def test_webhook_url_http_is_accepted(node, org):
    body = await submit(node, org["api_key"], {"prompt": "x", "webhook_url": "http://example.com/hook"})
    assert body["status"] == "queued"


async def test_read_only_cannot_submit_or_cancel_but_can_read(node, org):
    ro = await node.add_member(org["organization_id"], "read_only")
    body = await submit(node, org["api_key"], {"prompt": "x"})
    r = await node.call("POST", IMAGE, ro["api_key"], json={"prompt": "x"})
    assert r.status_code == 403 and await r.get_json() == {"status": False, "error": "Forbidden"}
    r = await node.call("POST", f"/v1/generation/requests/{body['request_id']}/cancel", ro["api_key"])
    assert r.status_code == 403
    r = await node.call("GET", f"/v1/generation/requests/{body['request_id']}/status", ro["api_key"])
    assert r.status_code == 200
    r = await node.call("POST", "/v1/generation/estimate", ro["api_key"],
                        json={"capability": "image.generate"})
    assert r.status_code == 200
    r = await node.call("GET", "/v1/generation/requests", None)
    assert r.status_code == 401


# -- custom catalog: 503s and 402 ---------------------------------------------------------------
async def test_503_model_not_runnable(custom):
    org = await custom.create_org()
    r = await custom.call("POST", "/v1/generation/models/ghost", org["api_key"], json={"prompt": "x"})
    assert r.status_code == 503
    assert err(await r.get_json()) == {"code": "request.service_unavailable",
                                       "message": "Model ghost is not available on this deployment.",
                                       "details": {"model": "ghost"}}
    r = await custom.call("POST", IMAGE, org["api_key"], json={"prompt": "x", "model": "ghost"})
    assert r.status_code == 503
    # omitted: the first available model (half-priced) is used
    body = await submit(custom, org["api_key"], {"prompt": "x"})
    st = await wait_status(custom, org["api_key"], body["request_id"])
    assert st["model"] == "half-priced"
    r = await custom.call("GET", "/v1/generation/models", org["api_key"])
    assert [m["available"] for m in (await r.get_json())["data"]] == [False, True, True]


async def test_503_no_price_for_the_tier(custom):
    org = await custom.create_org()
    r = await custom.call("POST", IMAGE, org["api_key"], json={"prompt": "x", "model": "half-priced",
                                                              "resolution": "2k"})
    assert r.status_code == 503
    assert err(await r.get_json()) == {
        "code": "request.service_unavailable",
        "message": "Model half-priced has no price for this tier and cannot be run.",
        "details": {"capability": "image.generate", "model": "half-priced", "resolution": "2k", "duration": None}}
    r = await custom.call("POST", "/v1/generation/estimate", org["api_key"],
                          json={"model": "half-priced", "resolution": "2k"})
    assert r.status_code == 503


async def test_402_creates_nothing(custom):
    org = await custom.create_org()
    key = org["api_key"]
    before = await balance(custom, key)
    r = await custom.call("POST", "/v1/generation/models/pricey", key, json={"prompt": "x"})
    assert r.status_code == 402
    assert err(await r.get_json()) == {"code": "billing.insufficient_credits", "message": "Not enough credits.",
                                       "details": {"required": "250.00", "available": "200.00"}}
    assert await holds(custom, key) == []
    assert await balance(custom, key) == before
    r = await custom.call("GET", "/v1/generation/requests", key)
    assert (await r.get_json())["data"] == []
    assert custom.store.one("SELECT COUNT(*) AS n FROM jobs")["n"] == 0
    r = await custom.call("GET", "/v1/billing/ledger", key)
    assert [e["kind"] for e in (await r.get_json())["data"]] == ["grant"]


# -- estimate ------------------------------------------------------------------------------------
async def test_estimate(node, org):
    key = org["api_key"]
    cases = [
        ({"capability": "image.generate"}, {"capability": "image.generate", "model": "proc-image",
                                            "resolution": "1k", "duration": None, "credits": "1.00", "tier": "1k"}),
        ({"model": "proc-image", "resolution": "2k"}, {"capability": "image.generate", "model": "proc-image",
                                                       "resolution": "2k", "duration": None, "credits": "2.00",
                                                       "tier": "2k"}),
        ({"capability": "video.generate", "resolution": "720p"},
         {"capability": "video.generate", "model": "camera-move", "resolution": "720p", "duration": 5,
          "credits": "20.00", "tier": "720p/5s"}),
    ]
    for body, data in cases:
        r = await node.call("POST", "/v1/generation/estimate", key, json=body)
        assert r.status_code == 200, await r.get_json()
        assert await r.get_json() == {"data": data}
    r = await node.call("POST", "/v1/generation/estimate", key, json={"model": "proc-image", "resolution": "8k"})
    assert r.status_code == 422
    assert err(await r.get_json())["message"] == "proc-image resolution must be one of 1k, 2k."
    r = await node.call("POST", "/v1/generation/estimate", key, json={})
    assert r.status_code == 422
    assert err(await r.get_json())["message"] == "capability or model is required."
    assert await holds(node, key) == []
    assert (await (await node.call("GET", "/v1/generation/requests", key)).get_json())["data"] == []


# -- lists, reads, org isolation -----------------------------------------------------------------
async def test_requests_list_newest_first_limit_and_project(node, org):
    key = org["api_key"]
    ids = [(await submit(node, key, {"prompt": f"p{i}"}))["request_id"] for i in range(3)]
    r = await node.call("POST", "/v1/projects", key, json={"name": "Side"})
    side = (await r.get_json())["data"]
    other = (await submit(node, key, {"prompt": "side", "project_id": side["id"]}))["request_id"]
    r = await node.call("GET", "/v1/generation/requests", key)
    data = (await r.get_json())["data"]
    assert [s["request_id"] for s in data] == ids[::-1]
    assert set(data[0]) == STATUS_KEYS
    r = await node.call("GET", "/v1/generation/requests?limit=2", key)
    assert [s["request_id"] for s in (await r.get_json())["data"]] == ids[:0:-1]
    r = await node.call("GET", "/v1/generation/requests?limit=0", key)
    assert len((await r.get_json())["data"]) == 1
    r = await node.call("GET", "/v1/generation/requests?limit=100000", key)
    assert len((await r.get_json())["data"]) == 3
    r = await node.call("GET", "/v1/generation/requests", key, headers={"X-Service-Project": "side"})
    assert [s["request_id"] for s in (await r.get_json())["data"]] == [other]
    r = await node.call("GET", "/v1/generation/requests?limit=abc", key)
    assert r.status_code == 400
    for i in ids + [other]:
        await wait_status(node, key, i)


async def test_other_organization_gets_404(node, org):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "mine [[delay:30]]"}))["request_id"]
    stranger = await node.create_org(name="Else", email="o@else.test")
    for method, path in [("GET", f"/v1/generation/requests/{rid}/status"),
                         ("POST", f"/v1/generation/requests/{rid}/cancel"),
                         ("GET", "/v1/generation/requests/00000000-0000-4000-8000-000000000000/status")]:
        r = await node.call(method, path, stranger["api_key"])
        assert r.status_code == 404
        assert err(await r.get_json()) == {"code": "request.not_found", "message": "Generation request not found."}
    assert (await wait_status(node, key, rid, wanted=("queued", "rendering")))["status"] in ("queued", "rendering")
    await node.call("POST", f"/v1/generation/requests/{rid}/cancel", key)


# -- idempotency keys ----------------------------------------------------------------------------
async def test_idempotency_same_key_same_body_returns_the_first_answer(node, org):
    key = org["api_key"]
    h = {"Idempotency-Key": "order-1"}
    first = await submit(node, key, {"prompt": "once"}, headers=h)
    again = await submit(node, key, {"prompt": "once"}, headers=h)
    assert again == first
    await wait_status(node, key, first["request_id"])
    third = await submit(node, key, {"prompt": "once"}, headers=h)
    assert third == first  # the original 202 (status queued), even after the job finished
    assert len(await holds(node, key)) == 1
    r = await node.call("GET", "/v1/generation/requests", key)
    assert len((await r.get_json())["data"]) == 1
    # another key, or no key: a new job
    other = await submit(node, key, {"prompt": "once"}, headers={"Idempotency-Key": "order-2"})
    assert other["request_id"] != first["request_id"]
    # the model route with the same key is another request
    r = await node.call("POST", "/v1/generation/models/proc-image", key, json={"prompt": "once"}, headers=h)
    assert r.status_code == 422


async def test_idempotency_same_key_other_body_is_422(node, org):
    key = org["api_key"]
    h = {"Idempotency-Key": "k-7"}
    first = await submit(node, key, {"prompt": "a"}, headers=h)
    r = await node.call("POST", IMAGE, key, json={"prompt": "b"}, headers=h)
    assert r.status_code == 422
    assert err(await r.get_json()) == {
        "code": "request.validation_failed",
        "message": "Idempotency-Key was already used with a different request; use a new key.",
        "details": {"header": "Idempotency-Key", "request_id": first["request_id"]}}
    r = await node.call("POST", IMAGE, key, json={"prompt": "a"}, headers={**h, "X-Service-Project": "default"})
    assert r.status_code == 422
    assert len(await holds(node, key)) == 1


async def test_idempotency_concurrent_requests_create_one_job(node, org):
    key = org["api_key"]
    answers = []

    async def one():
        answers.append(await submit(node, key, {"prompt": "race"}, headers={"Idempotency-Key": "race"}))

    async with trio.open_nursery() as n:
        for _ in range(8):
            n.start_soon(one)
    assert len({a["request_id"] for a in answers}) == 1
    assert len(await holds(node, key)) == 1


async def test_idempotency_key_expires_after_24_hours_and_is_per_org(node, org):
    key = org["api_key"]
    h = {"Idempotency-Key": "daily"}
    first = await submit(node, key, {"prompt": "d"}, headers=h)
    stranger = await node.create_org(name="Else", email="o@else.test")
    theirs = await submit(node, stranger["api_key"], {"prompt": "d"}, headers=h)
    assert theirs["request_id"] != first["request_id"]
    node.clock.advance(24 * 3600 + 1)
    later = await submit(node, key, {"prompt": "d"}, headers=h)
    assert later["request_id"] != first["request_id"]
    assert len(await holds(node, key)) == 2


async def test_idempotency_key_402_and_422_are_not_remembered(custom):
    org = await custom.create_org()
    key = org["api_key"]
    h = {"Idempotency-Key": "retry-me"}
    r = await custom.call("POST", "/v1/generation/models/pricey", key, json={"prompt": "x"}, headers=h)
    assert r.status_code == 402
    r = await custom.call("POST", IMAGE, key, json={"prompt": ""}, headers=h)
    assert r.status_code == 422
    body = await submit(custom, key, {"prompt": "fine"}, headers=h)
    assert body["status"] == "queued"


@pytest.mark.parametrize("value", ["", "x" * 256, "has space", "tab\tkey"])
async def test_idempotency_key_format(node, org, value):
    r = await node.call("POST", IMAGE, org["api_key"], json={"prompt": "x"}, headers={"Idempotency-Key": value})
    assert r.status_code == 400
    assert err(await r.get_json()) == {"code": "request.bad_request",
                                       "message": "Idempotency-Key must be 1 to 255 visible ASCII characters.",
                                       "details": {"header": "Idempotency-Key"}}


async def test_openapi_documents_idempotency_key(node):
    r = await node.client.get("/v1/openapi.json")
    doc = await r.get_json()
    for path in ("/v1/generation/capabilities/{capability}", "/v1/generation/models/{model}"):
        params = doc["paths"][path]["post"]["parameters"]
        header = {p["name"]: p for p in params if p["in"] == "header"}
        assert "Idempotency-Key" in header, header
        assert not header["Idempotency-Key"].get("required", False)
        assert "24 hours" in header["Idempotency-Key"]["description"]
    upload = doc["paths"]["/v1/generation/uploads"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload


async def test_local_helper():
    assert local("http://testserver/v1/x") == "/v1/x"

"""Products over HTTP: the list, one product, estimates, and every refusal of a run start
(spec "Products and runs", "Errors"; 402/404/409/422/503, Idempotency-Key)."""

from __future__ import annotations

import io
import uuid

import pytest
from PIL import Image

from service.actors.balance.messages import PlaceHold
from service.catalog import products as P
from service.catalog.product_types import FromInput, Input, Product, Step
from conftest import err, j

PRODUCTS = "/v1/workflows/products"


def run_count(node):
    return node.store.scalar("SELECT COUNT(*) FROM product_runs")


def hold_count(node):
    return node.store.scalar("SELECT COUNT(*) FROM credit_holds")


# -- the list and one product ------------------------------------------------------------------
async def test_list_products_and_categories(node, org):
    key = org["api_key"]
    r = await node.call("GET", PRODUCTS, key)
    assert r.status_code == 200
    data = (await j(r))["data"]
    assert [p["slug"] for p in data] == ["text-to-clip", "text-to-clip-vertical", "talking-portrait", "voiceover"]
    clip = data[0]
    assert set(clip) == {"slug", "name", "category", "kind", "description", "thumbnail_url", "version", "base",
                         "inputs", "outputs", "steps", "available", "unavailable_reasons", "credits_estimate"}
    assert (clip["available"], clip["unavailable_reasons"], clip["credits_estimate"]) == (True, [], "11.00")
    assert clip["outputs"] == ["still", "clip", "cover", "thumbnail"]
    assert [(s["key"], s["capability"], s["op"], s["model"]) for s in clip["steps"]] == [
        ("still", "image.generate", None, "proc-image"),
        ("clip", "video.generate", None, "camera-move"),
        ("thumb", None, "resize_image", None),
        ("cover", None, "extract_frame", None),
    ]
    portrait = data[2]
    assert (portrait["available"], portrait["credits_estimate"]) == (False, None)
    assert portrait["unavailable_reasons"] == [
        "step 'lipsync': no model implements video.lipsync yet",
    ]

    r = await node.call("GET", PRODUCTS + "?category=audio", key)
    assert [p["slug"] for p in (await j(r))["data"]] == ["voiceover"]
    r = await node.call("GET", PRODUCTS + "?category=image", key)
    assert (await j(r))["data"] == []
    r = await node.call("GET", PRODUCTS + "?category=music", key)
    assert r.status_code == 400 and err(await j(r))["code"] == "request.bad_request"


async def test_one_product_and_unknown_slug(node, org):
    key = org["api_key"]
    r = await node.call("GET", PRODUCTS + "/text-to-clip-vertical", key)
    p = (await j(r))["data"]
    assert (p["kind"], p["base"], list(p["inputs"])) == ("preset", "text-to-clip", ["prompt", "resolution", "seed"])
    r = await node.call("GET", PRODUCTS + "/nope", key)
    assert r.status_code == 404
    assert err(await j(r))["code"] == "request.not_found"


async def test_read_only_can_look_and_estimate_but_not_run(node, org):
    ro = await node.add_member(org["organization_id"], "read_only")
    key = ro["api_key"]
    assert (await node.call("GET", PRODUCTS, key)).status_code == 200
    r = await node.call("POST", PRODUCTS + "/text-to-clip/estimate", key, json={"inputs": {"prompt": "x"}})
    assert r.status_code == 200
    r = await node.call("POST", PRODUCTS + "/text-to-clip/runs", key, json={"inputs": {"prompt": "x"}})
    assert (r.status_code, await j(r)) == (403, {"status": False, "error": "Forbidden"})


# -- estimates ------------------------------------------------------------------------------------
async def test_estimate_follows_the_inputs(node, org):
    key = org["api_key"]
    url = PRODUCTS + "/text-to-clip/estimate"
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "a harbour"}})
    assert r.status_code == 200
    assert (await j(r))["data"]["credits_estimate"] == "11.00"
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "a harbour", "resolution": "720p"}})
    body = (await j(r))["data"]
    assert (body["slug"], body["available"], body["unavailable_reasons"], body["credits_estimate"]) == (
        "text-to-clip", True, [], "21.00")
    # validated as for a run: required inputs must be present
    r = await node.call("POST", url, key, json={"inputs": {}})
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed", "message": "prompt is required.",
                               "details": {"input": "prompt"}}
    # an unavailable product is answered, not refused
    r = await node.call("POST", PRODUCTS + "/voiceover/estimate", key, json={"inputs": {"topic": "tides"}})
    body = (await j(r))["data"]
    assert (r.status_code, body["available"], body["credits_estimate"]) == (200, False, None)
    assert body["unavailable_reasons"] == ["step 'script': no model implements text.llm yet"]
    r = await node.call("POST", PRODUCTS + "/nope/estimate", key, json={"inputs": {}})
    assert r.status_code == 404
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "x"}, "project_id": "nowhere"})
    assert r.status_code == 404


# -- run start refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize("inputs, message, name", [
    ({}, "prompt is required.", "prompt"),
    ({"prompt": "x", "style": "noir"}, "Unknown input 'style'. Known: prompt, aspect_ratio, resolution, seed.",
     "style"),
    ({"prompt": 5}, "prompt must be a string.", "prompt"),
    ({"prompt": "x", "seed": "7"}, "seed must be a number.", "seed"),
    ({"prompt": "x", "seed": 10**400}, "seed must be a number.", "seed"),  # past a float: was a 500
    ({"prompt": "x", "resolution": "1080p"}, "resolution must be one of 480p, 720p.", "resolution"),
])
async def test_run_start_422_names_the_input(node, org, inputs, message, name):
    r = await node.call("POST", PRODUCTS + "/text-to-clip/runs", org["api_key"], json={"inputs": inputs})
    assert r.status_code == 422
    e = err(await j(r))
    assert (e["code"], e["message"], e["details"]["input"]) == ("request.validation_failed", message, name)
    assert run_count(node) == 0 and hold_count(node) == 0


async def test_run_start_body_and_route_refusals(node, org):
    key = org["api_key"]
    url = PRODUCTS + "/text-to-clip/runs"
    r = await node.call("POST", url, key, json={"prompt": "x"})
    assert r.status_code == 400
    e = err(await j(r))
    assert e["code"] == "request.validation_failed"
    assert {"message": "Object contains unknown field", "key": "prompt", "source": "body"} in e["details"]["errors"]
    r = await node.call("POST", url, key, json={"inputs": "x"})
    assert r.status_code == 400
    r = await node.call("POST", PRODUCTS + "/nope/runs", key, json={"inputs": {"prompt": "x"}})
    assert r.status_code == 404 and err(await j(r))["code"] == "request.not_found"
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "x"}, "project_id": "nowhere"})
    assert r.status_code == 404
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "x"}},
                        headers={"X-Service-Project": str(uuid.uuid4())})
    assert r.status_code == 404
    # archived project: 409
    r = await node.call("POST", "/v1/projects", key, json={"name": "Old"})
    old = (await j(r))["data"]
    assert (await node.call("POST", f"/v1/projects/{old['id']}/archive", key)).status_code == 200
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "x"}, "project_id": "old"})
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict", "message": "The project is archived.",
                               "details": {"project_id": old["id"]}}
    assert run_count(node) == 0


async def test_unavailable_product_is_503(node, org):
    r = await node.call("POST", PRODUCTS + "/talking-portrait/runs", org["api_key"],
                        json={"inputs": {"prompt": "a sailor", "script": "Ahoy."}})
    assert r.status_code == 503
    e = err(await j(r))
    assert e["code"] == "request.service_unavailable"
    assert e["details"] == {"product": "talking-portrait", "reasons": [
        "step 'lipsync': no model implements video.lipsync yet",
    ]}
    assert run_count(node) == 0


async def test_balance_must_cover_the_whole_estimate(node, org):
    key, org_id = org["api_key"], org["organization_id"]
    # leave 15.00 available: enough for a 480p run (11.00), not for a 720p one (21.00)
    await node.parts.balances.ask(org_id, PlaceHold(str(uuid.uuid4()), 185_000_000))
    r = await node.call("POST", PRODUCTS + "/text-to-clip/runs", key,
                        json={"inputs": {"prompt": "x", "resolution": "720p"}})
    assert r.status_code == 402
    assert err(await j(r)) == {"code": "billing.insufficient_credits", "message": "Not enough credits to start this run.",
                               "details": {"required": "21.00", "available": "15.00"}}
    assert run_count(node) == 0 and hold_count(node) == 1  # nothing reserved, nothing created
    r = await node.call("GET", "/v1/billing/balance", key)
    assert (await j(r))["data"]["available"] == "15.00"
    # the check reserves nothing: a 480p run starts and its first step holds only its own price
    r = await node.call("POST", PRODUCTS + "/text-to-clip/runs", key,
                        json={"inputs": {"prompt": "x [[fail:internal]]"}})
    assert r.status_code == 202


# -- asset inputs (a test product with an image input) ---------------------------------------
ANIMATE = Product(
    slug="animate-photo", name="Animate a photo", category="video", description="test only", version=1,
    inputs={"photo": Input("image", "Photo", required=True), "prompt": Input("text", "Motion", required=True)},
    steps=(Step("clip", capability="video.generate", model="camera-move", params={
        "prompt": FromInput("prompt"), "inputs": {"start_frame": FromInput("photo")},
    }),),
    outputs={"clip": "clip"},
)


def png_bytes(size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 80, 20)).save(buf, format="PNG")
    return buf.getvalue()


async def upload(node, key, project_id=None) -> dict:
    from werkzeug.datastructures import FileStorage
    form = {} if project_id is None else {"project_id": project_id}
    files = {"file": FileStorage(io.BytesIO(png_bytes()), filename="p.png", content_type="image/png")}
    r = await node.client.post("/v1/generation/uploads", headers={"Authorization": f"Bearer {key}"},
                               form=form, files=files)
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await j(r))["data"]


async def test_asset_inputs_must_be_ours_and_in_the_project(node, org, monkeypatch):
    registry = P.ProductRegistry([*(P.REGISTRY.by_version(p.slug, p.version) for p in P.list_products()), ANIMATE])
    monkeypatch.setattr(P, "REGISTRY", registry)
    key = org["api_key"]
    url = PRODUCTS + "/animate-photo/estimate"
    r = await node.call("POST", "/v1/projects", key, json={"name": "Other"})
    other = (await j(r))["data"]
    mine = await upload(node, key)
    theirs = await upload(node, key, other["id"])

    r = await node.call("POST", url, key, json={"inputs": {"photo": mine["id"], "prompt": "pan"}})
    assert r.status_code == 200 and (await j(r))["data"]["credits_estimate"] == "10.00"
    r = await node.call("POST", url, key, json={"inputs": {"photo": mine["url"], "prompt": "pan"}})
    assert r.status_code == 200
    r = await node.call("POST", url, key, json={"inputs": {"photo": "https://example.com/a.png", "prompt": "pan"}})
    assert r.status_code == 422
    assert err(await j(r))["message"] == "Inputs must be asset ids or URLs returned by /v1/generation."
    r = await node.call("POST", PRODUCTS + "/animate-photo/runs", key,
                        json={"inputs": {"photo": theirs["id"], "prompt": "pan"}})
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed", "message": "Input asset not found in this project.",
                               "details": {"input": "photo", "asset_ids": [theirs["id"]]}}
    # in the asset's own project it runs
    r = await node.call("POST", PRODUCTS + "/animate-photo/runs", key,
                        json={"inputs": {"photo": theirs["id"], "prompt": "pan [[fail:internal]]"},
                              "project_id": other["slug"]})
    assert r.status_code == 202
    assert (await j(r))["data"]["project_id"] == other["id"]


# -- Idempotency-Key --------------------------------------------------------------------------
async def test_idempotency_key_on_run_start(node, org):
    key = org["api_key"]
    url = PRODUCTS + "/text-to-clip/runs"
    body = {"inputs": {"prompt": "a bell [[fail:internal]]"}}
    h = {"Idempotency-Key": "run-1"}
    r1 = await node.call("POST", url, key, json=body, headers=h)
    r2 = await node.call("POST", url, key, json=body, headers=h)
    assert r1.status_code == r2.status_code == 202
    first, again = await j(r1), await j(r2)
    assert first == again
    assert run_count(node) == 1
    r = await node.call("POST", url, key, json={"inputs": {"prompt": "another"}}, headers=h)
    assert r.status_code == 422
    e = err(await j(r))
    assert e["code"] == "request.validation_failed"
    assert e["details"] == {"header": "Idempotency-Key", "run_id": first["data"]["id"]}
    # another key, another run; keys are per organization
    r = await node.call("POST", url, key, json=body, headers={"Idempotency-Key": "run-2"})
    assert r.status_code == 202 and (await j(r))["data"]["id"] != first["data"]["id"]
    other = await node.create_org(name="Other", email="o@other.test")
    r = await node.call("POST", url, other["api_key"], json=body, headers=h)
    assert r.status_code == 202 and (await j(r))["data"]["id"] != first["data"]["id"]
    r = await node.call("POST", url, key, json=body, headers={"Idempotency-Key": "bad key"})
    assert r.status_code == 400
    assert run_count(node) == 3


async def test_concurrent_starts_with_one_key_make_one_run(node, org):
    import trio

    key = org["api_key"]
    bodies = []

    async def start():
        r = await node.call("POST", PRODUCTS + "/text-to-clip/runs", key,
                            json={"inputs": {"prompt": "x [[fail:internal]]"}}, headers={"Idempotency-Key": "k"})
        bodies.append((r.status_code, await j(r)))

    async with trio.open_nursery() as n:
        for _ in range(5):
            n.start_soon(start)
    assert {b[0] for b in bodies} == {202}
    assert len({b[1]["data"]["id"] for b in bodies}) == 1
    assert run_count(node) == 1


async def test_a_key_expires_after_24_hours(node, org):
    key = org["api_key"]
    url = PRODUCTS + "/text-to-clip/runs"
    body = {"inputs": {"prompt": "x [[fail:internal]]"}}
    r1 = await node.call("POST", url, key, json=body, headers={"Idempotency-Key": "day"})
    node.clock.advance(24 * 3600 + 1)
    r2 = await node.call("POST", url, key, json=body, headers={"Idempotency-Key": "day"})
    assert r2.status_code == 202
    assert (await j(r1))["data"]["id"] != (await j(r2))["data"]["id"]


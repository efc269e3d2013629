"""Request values found wrong from outside: integral numbers where the document says
integer (`656.0` is an integer in JSON Schema), and timestamps far enough out that their UTC
time leaves the years 1 to 9999 (a 500 before). One rule each, for every route."""

from __future__ import annotations

import importlib
import pkgutil
from types import SimpleNamespace

import pytest

import service.http.routes as routes
from service.http.schemas import Body, _kinds
from service.roles import ROLE_IDS

IMAGE = "/v1/generation/capabilities/image.generate"


def error_of(body: dict) -> dict:
    body["error"].pop("request_id", None)
    return body["error"]


@pytest.mark.parametrize("path,payload", [
    ("/v1/billing/topups", {"credits": 656.0}),
    (IMAGE, {"prompt": "a hill", "seed": 656.0}),
    ("/v1/generation/models/proc-image", {"prompt": "a hill", "seed": 656.0}),
    ("/v1/generation/estimate", {"capability": "image.generate", "prompt": "a hill", "seed": 656.0}),
])
async def test_integral_numbers_are_integers(node, path, payload):
    org = await node.create_org()
    r = await node.call("POST", path, org["api_key"], json=payload)
    assert r.status_code in (200, 201, 202), await r.get_data(as_text=True)
    half = {k: (v + 0.5 if isinstance(v, float) else v) for k, v in payload.items()}
    r = await node.call("POST", path, org["api_key"], json=half)
    assert r.status_code == 400
    e = error_of(await r.get_json())
    assert e["code"] == "request.validation_failed"
    assert [x["key"] for x in e["details"]["errors"]] == [next(k for k, v in payload.items() if isinstance(v, float))]


async def test_a_seed_given_as_656_0_renders_as_seed_656(node):
    org = await node.create_org()
    a = await node.call("POST", "/v1/generation/estimate", org["api_key"],
                        json={"capability": "image.generate", "prompt": "x", "seed": 656.0})
    b = await node.call("POST", "/v1/generation/estimate", org["api_key"],
                        json={"capability": "image.generate", "prompt": "x", "seed": 656})
    assert await a.get_json() == await b.get_json()


def test_every_body_integer_field_takes_integral_numbers():
    """The rule lives in `Body`, so every body model gets it: each integer field of each
    route's body model turns 7.0 into 7 and leaves 7.5 and true to the strict check."""
    models = set()
    for m in pkgutil.iter_modules(routes.__path__):
        module = importlib.import_module(f"service.http.routes.{m.name}")
        models |= {v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Body) and v is not Body}
    checked = 0
    for model in models:
        for name, field in model.model_fields.items():
            kinds = _kinds(field.annotation)
            if int in kinds and float not in kinds:
                info = SimpleNamespace(field_name=name)
                assert type(model._integral_numbers(7.0, info)) is int
                assert model._integral_numbers(7.5, info) == 7.5
                assert model._integral_numbers(True, info) is True
                checked += 1
    assert checked >= 2  # top-up credits, submit/estimate seed


FAR = "9999-12-31T23:59:59-14:00"
OUT_OF_RANGE = "Value error, Timestamp is out of range: its UTC time must fall in the years 1 to 9999"


@pytest.mark.parametrize("when", [FAR, "0001-01-01T00:00:00+14:00"])
async def test_a_key_expiry_outside_the_representable_years_is_400(node, when):
    org = await node.create_org()
    r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "far", "expires_at": when})
    assert r.status_code == 400
    e = error_of(await r.get_json())
    assert (e["code"], e["details"]) == ("request.validation_failed", {"errors": [
        {"message": OUT_OF_RANGE, "key": "expires_at", "source": "body"}]})
    keys = (await (await node.call("GET", "/v1/api-keys", org["api_key"])).get_json())["data"]
    assert "far" not in [k["name"] for k in keys]


async def test_the_last_representable_instant_converts(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/api-keys", org["api_key"],
                        json={"name": "last", "expires_at": "9999-12-31T23:59:59+00:00", "role_id": ROLE_IDS["member"]})
    assert r.status_code == 201
    assert (await r.get_json())["data"]["expires_at"] == "9999-12-31T23:59:59.000000Z"


async def test_a_grant_expiring_outside_the_representable_years_is_400_and_the_balance_still_reads(node):
    org = await node.create_org()
    r = await node.op("POST", f"/organizations/{org['organization_id']}/grants",
                      {"credits": "5.00", "expires_at": FAR, "reason": "far"})
    assert r.status_code == 400
    assert error_of(await r.get_json())["details"]["errors"][0]["key"] == "expires_at"
    r = await node.call("GET", "/v1/billing/balance", org["api_key"])
    assert r.status_code == 200 and (await r.get_json())["data"]["available"] == "200.00"


@pytest.mark.parametrize("raw", [b'{"advance_seconds": NaN}', b'{"advance_seconds": Infinity}',
                                 b'{"advance_seconds": -Infinity}'])
async def test_non_finite_numbers_are_not_json_and_the_node_keeps_working(node, raw):
    org = await node.create_org()
    r = await node.client.post("/operator/v1/test/clock", data=raw, headers={
        **node.op_headers(), "Content-Type": "application/json"})
    assert r.status_code == 400
    e = error_of(await r.get_json())
    assert (e["code"], e["message"]) == ("request.bad_request", "The request body is not valid JSON.")
    r = await node.call("GET", "/v1/billing/balance", org["api_key"])  # every actor still answers
    assert r.status_code == 200 and (await r.get_json())["data"]["available"] == "200.00"
    r = await node.call("POST", IMAGE, org["api_key"], json={"prompt": "after [[fail:internal]]"})
    assert r.status_code == 202


async def test_a_non_finite_number_is_refused_on_any_body(node):
    org = await node.create_org()
    r = await node.client.post("/v1/billing/topups", data=b'{"credits": NaN}', headers={
        "Authorization": f"Bearer {org['api_key']}", "Content-Type": "application/json"})
    assert r.status_code == 400
    assert error_of(await r.get_json())["code"] == "request.bad_request"

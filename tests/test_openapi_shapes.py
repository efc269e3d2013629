"""The document's response shapes come from one class each (service/http/responses), and the
test-mode check holds every real answer of a route that does not declare its shape by its
return annotation (those mypy holds) to its class.

- every status enum (job, run, step, hold, top-up, ticket) is an open string whose known
  values are exactly its machine's states (service/machines.py); event names, roles,
  capabilities, product categories and kinds come from their owners;
- no response schema closes an enum (a new value may appear, spec "Versioning");
- model ids and product slugs are strings with examples, not enums of the live catalog;
- the feed's two item kinds are named components; every operation documents the 503;
- a view that drifts from its class (a field added, one dropped, a type changed) fails the
  request in test mode with a 500 and the reason in the log.
"""

from __future__ import annotations

import json
import logging

import pytest

from service.actors.delivery import EVENT_NAMES
from service.actors.tickets import PRIORITIES, TYPES
from service.catalog.capabilities import CAPABILITIES
from service.catalog.product_types import CATEGORIES, KINDS
from service.http import openapi
from service.http.openapi_table import ROUTE, Op
from service.http.responses import Data, Hold, JobStatus, Project
from service.http.responses.check import ResponseMismatch, check
from service.machines import HOLD, JOB, RUN, STEP, TICKET, TOPUP
from service.roles import ROLE_IDS, ROLE_NAMES
from service.storage import billing as billing_sql


async def _doc(node) -> dict:
    r = await node.client.get("/v1/openapi.json")
    assert r.status_code == 200
    return await r.get_json()


def _known(schema: dict) -> list[str]:
    """The known values of an open string (nullable or not)."""
    for s in [schema, *schema.get("anyOf", [])]:
        if s.get("type") == "string" and "examples" in s:
            assert "enum" not in s
            return s["examples"]
    raise AssertionError(f"not an open string: {schema}")


async def test_status_enums_are_the_machines_states(node):
    schemas = (await _doc(node))["components"]["schemas"]
    owners = {
        ("JobStatus", "status"): JOB, ("FeedJob", "status"): JOB, ("ProductRun", "status"): RUN,
        ("FeedRun", "status"): RUN, ("RunStep", "status"): STEP, ("Hold", "status"): HOLD,
        ("Topup", "status"): TOPUP, ("Ticket", "state"): TICKET, ("TicketWithReplies", "state"): TICKET,
    }
    for (name, prop), machine in owners.items():
        known = _known(schemas[name]["properties"][prop])
        assert set(known) == set(machine.states) and len(known) == len(machine.states), (name, prop)
    others = {
        ("Ticket", "type"): TYPES, ("Ticket", "priority"): PRIORITIES, ("Role", "name"): ROLE_NAMES,
        ("Role", "id"): tuple(ROLE_IDS.values()), ("RoleUser", "role"): ROLE_NAMES,
        ("Product", "category"): CATEGORIES, ("Product", "kind"): KINDS,
        ("JobStatus", "capability"): tuple(c.id for c in CAPABILITIES),
    }
    for (name, prop), values in others.items():
        assert _known(schemas[name]["properties"][prop]) == list(values), (name, prop)
    assert _known(schemas["Webhook"]["properties"]["events"]["items"]) == list(EVENT_NAMES)
    assert _known(schemas["EventList"]["properties"]["events"]["items"]) == list(EVENT_NAMES)
    # the request side: the hold filter is the machine's states
    holds = (await _doc(node))["paths"]["/v1/billing/holds"]["get"]["parameters"]
    status = next(p for p in holds if p["name"] == "status")
    assert set(status["schema"]["enum"]) == set(HOLD.states)


async def test_no_response_schema_closes_an_enum(node):
    doc = await _doc(node)
    shapes = {k: v for k, v in doc["components"]["schemas"].items()
              if k not in ("Error", "Unauthorized", "Forbidden", "Timeout") and not k.endswith("Body")}
    found = []

    def walk(s, where):
        if isinstance(s, dict):
            if "enum" in s:
                found.append(where)
            for k, v in s.items():
                walk(v, f"{where}.{k}")
        elif isinstance(s, list):
            for i, v in enumerate(s):
                walk(v, f"{where}[{i}]")

    walk(shapes, "components")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, resp in op["responses"].items():
                walk(resp.get("content", {}), f"{method} {path} {status}")
    assert found == []


async def test_catalog_names_are_open_strings(node):
    doc = await _doc(node)
    paths = doc["paths"]

    def param(path, method, name):
        return next(p for p in paths[path][method]["parameters"] if p["name"] == name)["schema"]

    model = param("/v1/generation/models/{model}", "post", "model")
    assert model["type"] == "string" and "enum" not in model
    assert model["examples"] == [m.id for m in node.parts.catalog.models]
    for path, method in (("/v1/workflows/products/{slug}", "get"), ("/v1/workflows/products/{slug}/estimate", "post"),
                         ("/v1/workflows/products/{slug}/runs", "post")):
        slug = param(path, method, "slug")
        assert slug["type"] == "string" and "enum" not in slug and "text-to-clip" in slug["examples"]
    body = paths["/v1/generation/estimate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "anyOf" not in body  # every field is typed, not only capability / model
    typed = {"prompt", "model", "capability", "resolution", "duration", "inputs", "aspect_ratio"}
    assert typed <= set(body["properties"])
    model_field = body["properties"]["model"]
    assert "enum" not in json.dumps(model_field)


async def test_feed_items_are_named_and_every_operation_answers_503(node):
    doc = await _doc(node)
    schemas = doc["components"]["schemas"]
    items = schemas["RunsPage"]["properties"]["items"]["items"]
    assert [s["$ref"] for s in items["oneOf"]] == ["#/components/schemas/FeedJob", "#/components/schemas/FeedRun"]
    assert items["discriminator"]["propertyName"] == "type"
    assert {"started_at", "finished_at"} <= set(schemas["RunStep"]["required"])
    assert "needs" in schemas["ProductStep"]["required"]
    assert "hold_id" in schemas["LedgerEntry"]["required"]
    ops = [(m, p, op) for p, o in doc["paths"].items() for m, op in o.items()]
    assert len(ops) >= 56
    assert [f"{m} {p}" for m, p, op in ops if "503" not in op["responses"]] == []


def test_the_check_refuses_drift():
    job = {"status": "queued", "request_id": "r", "status_url": "s", "cancel_url": "c",
           "capability": "image.generate", "model": "proc-image", "project_id": "p", "source": "api",
           "outputs": [], "images": [], "video": None, "credits": {"estimate": "1.00", "actual": None},
           "error": None, "created_at": "t", "finished_at": None}
    check(JobStatus, json.dumps(job))
    check(JobStatus, json.dumps({**job, "status": "a-status-added-later"}))  # open: known values only
    check(JobStatus, json.dumps({**job, "usage": {"input_tokens": 3}}))     # sent only when reported
    cases = [
        ({**job, "extra": 1}, "$.extra: sent but not in the class"),
        ({k: v for k, v in job.items() if k != "error"}, "error\n  Field required"),
        ({**job, "credits": {"estimate": 1, "actual": None}}, "credits.estimate\n  Input should be a valid string"),
        ({**job, "video": {"id": "a"}}, "video.url\n  Field required"),
    ]
    for body, reason in cases:
        with pytest.raises(ResponseMismatch) as e:
            check(JobStatus, json.dumps(body))
        assert reason in str(e.value), str(e.value)
    with pytest.raises(ResponseMismatch, match=r"expected \{\"data\": \.\.\.\}, got keys \['items'\]"):
        check(Data[list[Hold]], json.dumps({"items": []}))


async def test_a_view_that_drifts_is_a_500_in_test_mode(node, monkeypatch, caplog):
    from service.http.routes import roles as roles_route

    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("GET", "/v1/roles", key)
    assert r.status_code == 200 and (await r.get_json())["data"]
    plain = roles_route.role_view
    monkeypatch.setattr(roles_route, "role_view", lambda name: {**plain(name), "undocumented": 1})
    caplog.set_level(logging.ERROR)
    r = await node.call("GET", "/v1/roles", key)
    assert r.status_code == 500
    body = await r.get_json()
    assert body["error"]["code"] == "request.internal_error"
    assert body["error"]["message"] == "Something went wrong on our side."
    assert ("GET /v1/roles answers off its documented shape: $[0].undocumented: sent but not in "
            "the class") in caplog.text


def test_every_shape_is_a_class():
    """The components of success bodies are exactly the classes' schemas (nothing hand-written
    beside the four error bodies)."""
    comps = openapi.components({})["schemas"]
    hand = set(openapi.SCHEMAS)
    assert hand == {"Error", "Unauthorized", "Forbidden", "Timeout"}
    for name, schema in comps.items():
        if name not in hand:
            assert "properties" in schema or "oneOf" in schema, name


async def test_document_is_valid_openapi_3_1(node):
    from openapi_spec_validator import OpenAPIV31SpecValidator

    doc = await _doc(node)
    assert doc["openapi"].startswith("3.1")
    errors = [e.message for e in OpenAPIV31SpecValidator(doc).iter_errors()]
    assert errors == []


def test_a_route_declares_its_shape_by_its_return_annotation():
    """`ROUTE` in the table: the document reads the shape from the route function (mypy holds
    the function to it); a route without one is refused, never documented without a shape."""
    async def created() -> tuple[Data[Project], int]:
        raise NotImplementedError

    async def bare():
        raise NotImplementedError

    assert openapi.route_shape(created) == Data[Project]
    assert openapi.route_shape(bare) is ROUTE
    bare.permission = None  # type: ignore[attr-defined]  # as @requires(None) sets it
    with pytest.raises(openapi.DocumentError, match="the table says ROUTE and the route function has no return"):
        openapi.apply("GET", "/v1/bare", bare, {}, Op(200, ROUTE))

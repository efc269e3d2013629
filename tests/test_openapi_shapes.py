"""The document's response shapes come from one class each (service/http/responses), and
every route declares its shape by its return annotation, so mypy (not a run-time check)
holds the route, its builders and the document together.

- every status enum (job, run, step, hold, top-up, ticket) is an open string whose known
  values are exactly its machine's states (service/machines.py); event names, roles,
  capabilities, product categories and kinds come from their owners;
- no response schema closes an enum (a new value may appear, spec "Versioning");
- model ids and product slugs are strings with examples, not enums of the live catalog;
- the feed's two item kinds are named components; every operation documents the 503;
- a builder that drifts from its class (a field added, one dropped, a type changed) is a
  mypy error.
"""

from __future__ import annotations

import json

import pytest

from service.actors.delivery import EVENT_NAMES
from service.actors.tickets import PRIORITIES, TYPES
from service.catalog.capabilities import CAPABILITIES
from service.catalog.product_types import CATEGORIES, KINDS
from service.http import openapi
from service.http.openapi_table import ROUTE, Op
from service.http.responses import Data, Project
from service.machines import HOLD, JOB, RUN, STEP, TICKET, TOPUP
from service.roles import ROLE_IDS, ROLE_NAMES


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


def test_every_success_body_is_declared_by_its_route():
    """No answer relies on a runtime check: every `/v1` JSON success body is `ROUTE` in the
    table, so the route function's return annotation gives it and mypy holds the route, its
    builders and the document together (only event streams and bodiless answers are not)."""
    table = openapi.operations()
    assert sum(op.schema is ROUTE for op in table.values()) == 53
    assert [f"{m} {p}" for (m, p), op in table.items()
            if op.schema is not ROUTE and op.schema is not None and not isinstance(op.schema, dict)] == []


def test_mypy_refuses_a_builder_that_drifts(tmp_path):
    """A builder that adds, drops or mistypes a key of its shape is a type error (what the
    test-mode response check used to catch at run time)."""
    import subprocess
    import sys
    from pathlib import Path

    code = tmp_path / "drift.py"
    code.write_text(
        "from service.http.responses import Data, Hold, UsageRow\n"
        "def usage() -> Data[list[UsageRow]]:\n"
        "    return {'data': [{'project_id': 'p', 'day': 'd', 'credits': '1.00', 'jobs': 1, 'extra': 1}]}\n"
        "def hold(h: Hold) -> Hold:\n"
        "    return {**h, 'amount': 1}\n"
        "def dropped() -> UsageRow:\n"
        "    return {'project_id': 'p', 'day': 'd', 'credits': '1.00'}\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--cache-dir",
                          str(tmp_path / "cache"), str(code)], cwd=root, capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'Extra key "extra" for TypedDict "UsageRow"' in out.stdout, out.stdout
    assert 'expression has type "int", TypedDict item "amount" has type "str"' in out.stdout, out.stdout
    assert 'Missing key "jobs" for TypedDict "UsageRow"' in out.stdout, out.stdout


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

"""The HTTP frame: error envelopes, validation, limits, headers, OpenAPI (spec "Errors",
"Endpoints: Conventions")."""

import uuid

import pytest
from quart import Blueprint

from service.http.auth import requires


async def body(r):
    return await r.get_json()


def no_request_id(b):
    b["error"].pop("request_id")
    return b


async def test_unknown_route_is_404_envelope(node):
    r = await node.client.get("/v1/nope")
    assert r.status_code == 404
    b = await body(r)
    uuid.UUID(b["error"]["request_id"])
    assert no_request_id(b) == {"error": {"code": "request.not_found",
                                          "message": "The requested resource was not found."}}
    assert "X-Process-Time" in r.headers


async def test_method_not_allowed_keeps_allow(node):
    r = await node.client.delete("/v1/projects")
    assert r.status_code == 405
    assert no_request_id(await body(r)) == {"error": {"code": "request.method_not_allowed",
                                                      "message": "The method is not allowed for this route."}}
    assert set(r.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


async def test_invalid_json_is_bad_request(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/projects", org["api_key"], data=b"{not json",
                        headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert no_request_id(await body(r)) == {"error": {"code": "request.bad_request",
                                                      "message": "The request body is not valid JSON."}}


async def test_non_utf8_body_is_bad_request(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/projects", org["api_key"], data=b'{"name": "\xff\xfe"}',
                        headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert (await body(r))["error"]["code"] == "request.bad_request"


@pytest.mark.parametrize("payload, entry", [
    ({"name": "x", "colour": "red"}, {"message": "Object contains unknown field", "key": "colour",
                                      "source": "body"}),
    ({"name": 5}, {"message": "Input should be a valid string", "key": "name", "source": "body"}),
])
async def test_validation_failed_details(node, payload, entry):
    org = await node.create_org()
    r = await node.call("POST", "/v1/projects", org["api_key"], json=payload)
    assert r.status_code == 400
    b = no_request_id(await body(r))
    assert b == {"error": {"code": "request.validation_failed", "message": "The request failed validation.",
                           "details": {"errors": [entry]}}}


async def test_missing_required_field(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/api-keys", org["api_key"], json={})
    assert r.status_code == 400
    assert (await body(r))["error"]["details"]["errors"] == [
        {"message": "Field required", "key": "name", "source": "body"}]


async def test_body_not_an_object(node):
    org = await node.create_org()
    r = await node.call("POST", "/v1/projects", org["api_key"], json=[1, 2])
    assert r.status_code == 400
    assert (await body(r))["error"]["code"] == "request.validation_failed"


async def test_body_over_route_limit_is_413(node):
    org = await node.create_org()
    big = b'{"name": "' + b"a" * (1024 * 1024 + 10) + b'"}'
    r = await node.call("POST", "/v1/projects", org["api_key"], data=big,
                        headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert no_request_id(await body(r)) == {"error": {"code": "request.bad_request",
                                                      "message": "The request body is too large."}}


async def test_internal_error_is_generic(node, caplog):
    bp = Blueprint("boom", __name__)

    @bp.get("/v1/boom")
    @requires(None)
    async def boom():
        raise RuntimeError("secret detail")

    node.app.register_blueprint(bp)
    org = await node.create_org()
    r = await node.call("GET", "/v1/boom", org["api_key"])
    assert r.status_code == 500
    text = await r.get_data(as_text=True)
    assert "secret detail" not in text and "Traceback" not in text
    assert no_request_id(await body(r)) == {"error": {"code": "request.internal_error",
                                                      "message": "Something went wrong on our side."}}
    assert "secret detail" in caplog.text


async def test_route_timeout_is_flat_408(node, autojump_clock):
    import trio

    bp = Blueprint("slow", __name__)

    @bp.get("/v1/slow")
    @requires(None, limit=3)
    async def slow():
        await trio.sleep(60)

    node.app.register_blueprint(bp)
    org = await node.create_org()
    r = await node.call("GET", "/v1/slow", org["api_key"])
    assert r.status_code == 408
    assert await body(r) == {"error": "Request timeout", "message": "Request took longer than 3 seconds to process"}


async def test_openapi_document_lists_routes(node):
    r = await node.client.get("/v1/openapi.json")
    assert r.status_code == 200
    doc = await body(r)
    assert doc["openapi"].startswith("3.1")
    assert "/v1/projects" in doc["paths"] and "/v1/api-keys/{key_id}" in doc["paths"]
    post = doc["paths"]["/v1/projects"]["post"]
    assert post["requestBody"]["required"] is True
    assert not any(p.startswith("/operator") for p in doc["paths"])


async def test_plain_answers_skip_the_conversion_and_read_the_same(monkeypatch):
    """`plain_answers_as_they_are` hands plain dict and list answers to Quart directly, with
    a status and headers the conversion would not change: the bytes match quart-schema's own
    path, a model nested in a dict included, and answers it does not take (a model, headers
    the conversion changes or might) still go through quart-schema."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from pydantic import BaseModel
    from quart_schema import QuartSchema
    from quart_trio import QuartTrio

    from service.http.app import plain_answers_as_they_are

    class Inner(BaseModel):
        at: datetime
        amount: Decimal

    inner = Inner(at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), amount=Decimal("1.50"))
    answers = {
        "dict": lambda: {"a": 1, "inner": inner, "list": [inner, None]},
        "status": lambda: ({"created": True}, 201),
        "list": lambda: [1, "two", {"three": inner}],
        "model": lambda: inner,
        "headers": lambda: ({"h": 1}, 200, {"X-Seen": "yes"}),
        "headers_only": lambda: ({"h": 1}, {"X-Seen": "yes"}),
        "snake_header": lambda: ({"h": 1}, 200, {"X_Seen": "yes"}),  # quart-schema's kebab rule
        "int_header": lambda: ({"h": 1}, 200, {"X-Seen": 7}),
    }
    converts = {"model", "snake_header", "int_header"}  # the answers that keep quart-schema's path

    def make(bypass: bool) -> QuartTrio:
        app = QuartTrio("frame-test")
        QuartSchema(app)
        if bypass:
            plain_answers_as_they_are(app)
        for name, answer in answers.items():
            app.add_url_rule(f"/{name}", name, lambda answer=answer: answer())
        return app

    import quart_schema.conversion as conversion

    conversions = []
    real = conversion.model_dump

    def counted(*args, **kwargs):
        conversions.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(conversion, "model_dump", counted)
    plain, converted = make(True).test_client(), make(False).test_client()
    for name in answers:
        before = len(conversions)
        a = await plain.get(f"/{name}")
        took = len(conversions) > before
        b = await converted.get(f"/{name}")
        assert (a.status_code, await a.get_data()) == (b.status_code, await b.get_data()), name
        assert a.headers.get("X-Seen") == b.headers.get("X-Seen"), name
        assert took == (name in converts), name  # the bypass skipped the conversion, or not

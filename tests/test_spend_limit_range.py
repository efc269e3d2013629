"""The largest spend limit (operations.md "Spend limits": "0" or more): a limit is kept to
the micro-credit like every amount, so it stops at 1,000,000,000 credits (`MAX_UC`, the
largest amount the node takes anywhere); past that the 400 says so instead of repeating a
format rule the value meets."""

from __future__ import annotations

from conftest import err, j

TOO_BIG = "1000000000.01"


async def test_the_largest_limit_is_taken_and_shown_exactly(node, org):
    r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "big", "spend_limit": "1000000000"})
    assert r.status_code == 201
    assert (await j(r))["data"]["spend_limit"] == "1000000000.00"


async def test_a_key_limit_past_the_largest_is_400_naming_the_maximum(node, org):
    r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "big", "spend_limit": TOO_BIG})
    assert r.status_code == 400
    assert err(await j(r)) == {
        "code": "request.validation_failed",
        "message": "spend_limit must be at most 1000000000 credits.",
        "details": {"field": "spend_limit", "maximum": "1000000000.00",
                    "errors": [{"message": "Invalid spend limit", "key": "spend_limit", "source": "body"}]}}


async def test_a_project_limit_past_the_largest_is_400_naming_the_maximum(node, org):
    r = await node.call("PATCH", f"/v1/projects/{org['default_project_id']}", org["api_key"],
                        json={"monthly_spend_limit": "999999999999.99"})
    assert r.status_code == 400
    body = err(await j(r))
    assert (body["code"], body["message"], body["details"]["field"]) == (
        "request.validation_failed", "monthly_spend_limit must be at most 1000000000 credits.",
        "monthly_spend_limit")

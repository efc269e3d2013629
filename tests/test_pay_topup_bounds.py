"""Adversarial review of `POST /v1/billing/topups` (docs/security-limits.md, "Payments
review"): amounts at and past the bounds in every JSON spelling, return URLs that would
break the redirect or the provider, and an abandoned checkout credits nothing."""

from __future__ import annotations

import pytest

from test_topups import RANGE, create, created, err, j, pay, row, tnode  # noqa: F401  (fixture)

RAW = {"Content-Type": "application/json"}


async def raw_create(node, key, text: str):
    return await node.call("POST", "/v1/billing/topups", key, data=text.encode(), headers=RAW)


@pytest.mark.parametrize("text", [
    '{"credits": 100.5}', '{"credits": 100.000001}', '{"credits": "\u0661\u0660\u0660"}',
    '{"credits": "\uff11\uff10\uff10"}', '{"credits": "100"}', '{"credits": [100]}', '{"credits": {"n": 100}}',
    '{"credits": true}', '{"credits": NaN}', '{"credits": Infinity}',
])
async def test_amounts_that_are_not_json_integers_are_400(tnode, text):
    org = await tnode.create_org()
    r = await raw_create(tnode, org["api_key"], text)
    assert r.status_code == 400
    e = err(await j(r))
    assert e["code"] in ("request.validation_failed", "request.bad_request")
    if e["code"] == "request.validation_failed":
        assert [x["key"] for x in e["details"]["errors"]] == ["credits"]
    assert tnode.store.all("SELECT id FROM topups") == []


@pytest.mark.parametrize("text", ['{"credits": 100.0}', '{"credits": 1e2}', '{"credits": 1E+2}',
                                  '{"credits": 100.000000000000000001}'])
async def test_integral_json_numbers_buy_exactly_that_many_credits(tnode, text):
    """The project-wide Body rule: a number with no fraction is an integer. A float with
    more decimals than a double holds is the double it parses to (here 100.0): the price
    is computed from the integer bought, never from the text sent."""
    org = await tnode.create_org()
    r = await raw_create(tnode, org["api_key"], text)
    assert r.status_code == 201
    t = (await j(r))["data"]["topup"]
    assert (t["credits"], t["amount_cents"]) == ("100.00", 100)
    assert row(tnode, t["id"])["credits_uc"] == 100 * 1_000_000


async def test_negative_zero_is_zero_credits_422(tnode):
    org = await tnode.create_org()
    r = await raw_create(tnode, org["api_key"], '{"credits": -0.0}')
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed", "message": RANGE,
                               "details": {"credits": 0, "min": 100, "max": 100000}}


@pytest.mark.parametrize("credits", [2 ** 63, 10 ** 30, -(2 ** 63) - 1])
async def test_integers_past_any_column_are_422(tnode, credits):
    org = await tnode.create_org()
    r = await create(tnode, org["api_key"], credits)
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed", "message": RANGE,
                               "details": {"credits": credits, "min": 100, "max": 100000}}
    assert tnode.store.all("SELECT id FROM topups") == []


async def test_an_integer_too_long_to_parse_is_400(tnode):
    org = await tnode.create_org()
    r = await raw_create(tnode, org["api_key"], '{"credits": ' + "9" * 5000 + "}")
    assert r.status_code == 400
    assert err(await j(r))["code"] == "request.bad_request"
    assert tnode.store.all("SELECT id FROM topups") == []


@pytest.mark.parametrize("field", ["success_url", "cancel_url"])
@pytest.mark.parametrize("value", ["https://a.example/ok\r\nSet-Cookie: x=1", "https://a.example/o\nk",
                                   "https://a.example/o\tk", "https://a.example/\x00", "https://a.example/\x7f",
                                   "https://a.example/a\u2028b", "https://a.example/a b"])
async def test_return_urls_with_control_characters_are_422(tnode, field, value):
    """urlsplit drops tabs and newlines before parsing, so such a URL looked valid, was
    stored as sent, and broke the checkout's redirect and the provider's session."""
    org = await tnode.create_org()
    r = await create(tnode, org["api_key"], 500, **{field: value})
    assert r.status_code == 422
    assert err(await j(r)) == {"code": "request.validation_failed",
                               "message": f"{field} must be an absolute http or https URL.",
                               "details": {"field": field}}
    assert tnode.store.all("SELECT id FROM topups") == []


async def test_an_abandoned_checkout_credits_nothing_and_cannot_be_paid_later(tnode):
    org = await tnode.create_org()
    t = (await created(tnode, org["api_key"]))["topup"]
    r = await tnode.client.get(f"/checkout/test/{t['id']}")
    assert r.status_code == 200
    from service.payments import facade
    await facade.expire_topup(tnode.parts, t["id"], f"test_{t['id']}")
    assert row(tnode, t["id"])["status"] == "expired"
    r = await pay(tnode, t["id"])
    assert r.status_code == 409
    assert err(await j(r)) == {"code": "request.conflict",
                               "message": "The top-up has expired and can no longer be paid.",
                               "details": {"topup_id": t["id"], "status": "expired"}}
    assert tnode.balances.calls == []

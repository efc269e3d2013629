"""Amounts too large or too precise for Decimal's 28 digits: refused as bad credits (a
ValueError, so a 422), never an ArithmeticError that escapes as a 500, nor silently rounded."""

from __future__ import annotations

import pytest

from service.money import to_uc

GRANT_REFUSED = "credits must be a decimal number of credits above zero with at most two places."


@pytest.mark.parametrize("bad", ["1e30", "-1e30", "1e999999", "12345678901234567890123456789",
                                 10 ** 30, "100.000000000000000000000000001", "1.00000000000000000000000000001",
                                 "1e-999999999", "-1e-999999999", "0.001"])
def test_huge_or_over_precise_amounts_are_value_errors(bad):
    with pytest.raises(ValueError):
        to_uc(bad)


def test_exact_amounts_still_parse():
    assert to_uc("999999999.99") == 999_999_999_990_000
    assert to_uc("1.000000000000000000000000000000") == 1_000_000
    assert to_uc("1e9") == 10 ** 15
    assert to_uc("1e20") == 10 ** 26  # refused later by the range check (`bad_amount`)


@pytest.mark.parametrize("bad", ["1e30", "1e999999", "100.000000000000000000000000001"])
async def test_an_operator_grant_of_a_huge_amount_is_422(node, org, autojump_clock, bad):
    r = await node.op("POST", f"/organizations/{org['organization_id']}/grants", {"credits": bad})
    body = await r.get_json()
    body["error"].pop("request_id")
    assert (r.status_code, body) == (422, {"error": {"code": "request.validation_failed", "message": GRANT_REFUSED,
                                                      "details": {"credits": bad}}})
    r = await node.call("GET", "/v1/billing/balance", org["api_key"])
    assert (await r.get_json())["data"]["available"] == "200.00"

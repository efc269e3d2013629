"""The Billing page's top-up form reads the amount as the API does: ASCII digits only
(`service.digits`), so "١٠٠", "1_000", "+500" or 5,000 digits are the form's 422, never
another number than the one shown and never a 500."""

from __future__ import annotations

import pytest

from service.payments.pricing import RANGE_MESSAGE
from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in

WHOLE = "Enter a whole number of credits."


@pytest.mark.parametrize("credits, message", [
    ("\u0661\u0660\u0660", WHOLE), ("\uff15\uff10\uff10", WHOLE), ("1_000", WHOLE), ("+500", WHOLE),
    ("-500", WHOLE), ("500.0", WHOLE), ("5e2", WHOLE), ("", WHOLE),
    ("9" * 5000, RANGE_MESSAGE), ("0" * 4000 + "99", RANGE_MESSAGE),
])
async def test_amounts_that_are_not_ascii_digits_are_refused(node, credits, message):
    await logged_in(node)
    _, html = await page(node.client, "/billing")
    r = await node.client.post("/billing/topups", form={"csrf_token": csrf(html), "credits": credits})
    assert r.status_code == 422
    assert message in await r.get_data(as_text=True)
    assert node.store.all("SELECT id FROM topups") == []


async def test_padded_ascii_digits_buy_that_many(node):
    await logged_in(node)
    _, html = await page(node.client, "/billing")
    r = await node.client.post("/billing/topups", form={"csrf_token": csrf(html), "credits": " 0500 "})
    assert r.status_code == 303 and "/checkout/test/" in r.headers["Location"]
    [t] = node.store.all("SELECT credits_uc, amount_cents FROM topups")
    assert (t["credits_uc"], t["amount_cents"]) == (500 * 1_000_000, 500)

"""The test payment provider's checkout page: styled, with "Pay (test)" and "Cancel" forms
that confirm or expire the top-up and return to its URLs; CSRF-protected; test mode and the
test provider only."""

from __future__ import annotations

from conftest import err, j, start_node, stop_node
from tests.pages import csrf, page

FORGED = "This form was not sent from this site, or the page was open too long."


async def new_topup(node, key: str, credits: int = 500) -> dict:
    r = await node.call("POST", "/v1/billing/topups", key, json={"credits": credits})
    assert r.status_code == 201
    return (await j(r))["data"]["topup"]


async def available(node, key: str) -> str:
    return (await j(await node.call("GET", "/v1/billing/balance", key)))["data"]["available"]


async def status(node, key: str, topup_id: str) -> str:
    return (await j(await node.call("GET", f"/v1/billing/topups/{topup_id}", key)))["data"]["status"]


async def test_pay_adds_the_credits_once_and_returns_to_billing(node, org):
    key = org["api_key"]
    t = await new_topup(node, key)
    before = await available(node, key)
    r, html = await page(node.client, f"/checkout/test/{t['id']}")
    assert r.status_code == 200 and "Pay (test)" in html and "/static/dash-2.css" in html
    assert "500.00 credits" in html and "5.00 USD" in html and "no money moves" in html
    r = await node.client.post(f"/checkout/test/{t['id']}/pay", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    assert r.headers["Location"] == f"http://testserver/billing?topup={t['id']}&checkout=success"
    assert await status(node, key, t["id"]) == "paid"
    assert float(await available(node, key)) == float(before) + 500
    # the same form again (a reload, a second click): no second lot
    r = await node.client.post(f"/checkout/test/{t['id']}/pay", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and float(await available(node, key)) == float(before) + 500
    _, html = await page(node.client, f"/checkout/test/{t['id']}")
    assert "/pay\"" not in html and "nothing to pay" in html


async def test_cancel_expires_the_topup_and_returns_to_the_cancel_url(node, org):
    key = org["api_key"]
    t = await new_topup(node, key)
    before = await available(node, key)
    _, html = await page(node.client, f"/checkout/test/{t['id']}")
    r = await node.client.post(f"/checkout/test/{t['id']}/cancel", form={"csrf_token": csrf(html)})
    assert r.status_code == 303
    assert r.headers["Location"] == f"http://testserver/billing?topup={t['id']}&checkout=cancel"
    assert await status(node, key, t["id"]) == "expired"
    assert await available(node, key) == before
    r = await node.client.post(f"/checkout/test/{t['id']}/pay", form={"csrf_token": csrf(html)})
    assert r.status_code == 303 and await status(node, key, t["id"]) == "expired"


async def test_a_form_without_the_page_token_is_refused(node, org):
    t = await new_topup(node, org["api_key"])
    for form in ({}, {"csrf_token": "forged"}):
        r = await node.client.post(f"/checkout/test/{t['id']}/pay", form=form)
        assert r.status_code == 403 and FORGED in await r.get_data(as_text=True)
    r = await node.client.post(f"/checkout/test/{t['id']}/pay", form={"csrf_token": "x"},
                               headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    assert await status(node, org["api_key"], t["id"]) == "pending"


async def test_unknown_topups_are_404(node):
    _, html = await page(node.client, "/login")
    r = await node.client.post("/checkout/test/00000000-0000-0000-0000-000000000000/pay",
                               form={"csrf_token": csrf(html)})
    assert r.status_code == 404
    assert err(await j(r)) == {"code": "request.not_found", "message": "The requested resource was not found."}


async def test_outside_test_mode_the_buttons_do_not_exist(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=False)
    try:
        _, html = await page(n.client, "/login")
        r = await n.client.post("/checkout/test/00000000-0000-0000-0000-000000000000/pay",
                                form={"csrf_token": csrf(html)})
        assert r.status_code == 404
    finally:
        await stop_node(n)

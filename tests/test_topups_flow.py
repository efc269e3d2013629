"""Top-ups against the real balance actor: the balance rises once, the ledger shows one
grant with source `topup`, and bought credits expire `expiry_days` after payment.
(`test_topups.py` covers the rules with a fake balance registry.)"""

from __future__ import annotations

import pytest
import stripe
import trio

from fake_stripe import SECRET_KEY, WEBHOOK_SECRET, fake_stripe
from service.clock import iso, parse_iso
from test_topups import close, created, j, pay, row, start

YEAR = 365 * 86400


async def balance(node, key) -> dict:
    r = await node.call("GET", "/v1/billing/balance", key)
    assert r.status_code == 200, await r.get_data(as_text=True)
    return (await j(r))["data"]


async def topup_entries(node, key) -> list[dict]:
    r = await node.call("GET", "/v1/billing/ledger", key)
    assert r.status_code == 200, await r.get_data(as_text=True)
    return [e for e in (await j(r))["data"] if e["source"] == "topup"]


async def test_paid_topup_is_one_lot_and_one_ledger_grant(node):
    org = await node.create_org()
    key = org["api_key"]
    assert (await balance(node, key))["available"] == "200.00"  # the signup lot
    t = (await created(node, key, 500))["topup"]
    assert (await balance(node, key))["available"] == "200.00"  # nothing before payment
    paid = (await j(await pay(node, t["id"])))["data"]
    assert paid["status"] == "paid"

    b = await balance(node, key)
    assert b["available"] == "700.00"
    [lot] = [x for x in b["lots"] if x["source"] == "topup"]
    assert lot["id"] == row(node, t["id"])["lot_id"]
    assert (lot["amount"], lot["remaining"], lot["reason"]) == ("500.00", "500.00", "Top-up of 500.00 credits")
    assert lot["expires_at"] == iso(parse_iso(paid["paid_at"]) + YEAR)
    assert {s["source"]: s["remaining"] for s in b["by_source"]}["topup"] == "500.00"

    [entry] = await topup_entries(node, key)
    assert (entry["kind"], entry["amount"], entry["source"]) == ("grant", "500.00", "topup")
    assert entry["grant_id"] == lot["id"] and entry["project_id"] is None
    assert entry["description"] == "Top-up of 500.00 credits"


async def test_pay_twice_and_concurrently_adds_credits_once(node):
    org = await node.create_org()
    key = org["api_key"]
    t = (await created(node, key, 300))["topup"]
    assert (await pay(node, t["id"])).status_code == 200
    assert (await pay(node, t["id"])).status_code == 200
    u = (await created(node, key, 1000))["topup"]
    codes = []

    async def one():
        codes.append((await pay(node, u["id"])).status_code)

    async with trio.open_nursery() as n:
        for _ in range(10):
            n.start_soon(one)
    assert codes == [200] * 10
    assert (await balance(node, key))["available"] == "1500.00"
    entries = await topup_entries(node, key)
    assert sorted(e["amount"] for e in entries) == ["1000.00", "300.00"]
    assert len({e["grant_id"] for e in entries}) == 2


async def test_failed_checkout_charges_nothing(node):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.op("POST", "/test/payment-provider", {"fail_checkout": True})
    assert r.status_code == 200
    assert (await node.call("POST", "/v1/billing/topups", key, json={"credits": 500})).status_code == 503
    assert (await balance(node, key))["available"] == "200.00"
    assert await topup_entries(node, key) == []


async def test_bought_credits_expire_after_expiry_days(node):
    org = await node.create_org()
    key = org["api_key"]
    t = (await created(node, key, 400))["topup"]
    await pay(node, t["id"])
    node.clock.advance(YEAR - 3600)  # the signup lot (30 days) is gone, the top-up lot is not
    b = await balance(node, key)
    assert [(x["source"], x["remaining"]) for x in b["lots"]] == [("topup", "400.00")]
    node.clock.advance(7200)
    await topup_entries(node, key)  # the ledger route syncs the balance actor (due expiries)
    b = await balance(node, key)
    assert b["available"] == "0.00" and b["lots"] == []


@pytest.fixture
async def stripe_node(nursery, tmp_path):
    async with fake_stripe(nursery) as fake:
        n = await start(nursery, tmp_path, stripe_secret_key=SECRET_KEY, stripe_webhook_secret=WEBHOOK_SECRET,
                        stripe_api_base=fake.url)
        n.fake = fake
        yield n
        await n.parts.aclose()
        await close(n)


async def test_stripe_webhook_adds_credits_once(stripe_node):
    n = stripe_node
    org = await n.create_org()
    key = org["api_key"]
    t = (await created(n, key, 2000))["topup"]
    payload = n.fake.event("checkout.session.completed", row(n, t["id"])["provider_ref"])
    header = stripe.WebhookSignature.generate_signature_header(payload, WEBHOOK_SECRET)
    for _ in range(3):
        r = await n.client.post("/webhooks/stripe", data=payload.encode(),
                                headers={"Stripe-Signature": header, "Content-Type": "application/json"})
        assert r.status_code == 200 and (await j(r))["result"] == "paid"
    assert (await balance(n, key))["available"] == "2200.00"
    [entry] = await topup_entries(n, key)
    assert entry["amount"] == "2000.00"

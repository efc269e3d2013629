"""The Stripe path end to end: the real `stripe` SDK (async client, httpx under trio)
pointed at `tests/fake_stripe.py` on 127.0.0.1, and webhooks signed offline with
`stripe.WebhookSignature.generate_signature_header` and posted to the app.

Real sockets: no autojump clock here (one test freezes the mock clock)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import stripe
import trio
import trio.testing

from fake_stripe import SECRET_KEY, WEBHOOK_SECRET, fake_stripe
from service.clock import parse_iso
from service.payments.pricing import DAY
from test_topups import close, FakeBalances, created, err, j, pay, row, start

CHECKOUT_FAILED = "The payment provider could not start checkout; nothing was charged. Try again shortly."


@pytest.fixture
async def fake(nursery):
    async with fake_stripe(nursery) as f:
        yield f


async def stripe_node(nursery, tmp_path, fake, **overrides):
    settings = dict(test_mode=False, stripe_secret_key=SECRET_KEY, stripe_webhook_secret=WEBHOOK_SECRET,
                    stripe_api_base=fake.url)
    settings.update(overrides)
    return await start(nursery, tmp_path, balances=FakeBalances(), **settings)


@pytest.fixture
async def snode(nursery, tmp_path, fake):
    n = await stripe_node(nursery, tmp_path, fake)
    yield n
    await n.parts.aclose()
    await close(n)


async def post_event(node, payload: str, *, secret: str = WEBHOOK_SECRET, timestamp=None, header=None):
    if header is None:
        header = stripe.WebhookSignature.generate_signature_header(payload, secret, timestamp=timestamp)
    hdrs = {"Content-Type": "application/json"}
    if header is not False:
        hdrs["Stripe-Signature"] = header
    return await node.client.post("/webhooks/stripe", data=payload.encode(), headers=hdrs)


async def new_topup(node, fake, credits=500):
    org = await node.create_org()
    body = await created(node, org["api_key"], credits)
    t = body["topup"]
    session_id = row(node, t["id"])["provider_ref"]
    return org, t, session_id, body["checkout_url"]


# -- checkout ----------------------------------------------------------------------------
async def test_create_opens_a_stripe_checkout_session(snode, fake):
    org, t, sid, url = await new_topup(snode, fake, 1234)
    assert t["status"] == "pending" and t["amount_cents"] == 1234 and t["credits"] == "1234.00"
    assert sid in fake.sessions and url == fake.sessions[sid]["url"]
    [req] = fake.creates
    assert req.headers["Authorization"] == f"Bearer {SECRET_KEY}"
    assert req.headers["Idempotency-Key"] == t["id"]
    assert req.headers["Stripe-Version"]
    base = f"http://testserver/billing?topup={t['id']}&checkout="
    meta = {"topup_id": t["id"], "org_id": org["organization_id"]}
    assert req.form == {
        "mode": "payment",
        "line_items": [{"quantity": "1", "price_data": {"currency": "usd", "unit_amount": "1234",
                                                        "product_data": {"name": "1234 credits"}}}],
        "client_reference_id": t["id"],
        "metadata": meta,
        "payment_intent_data": {"metadata": meta},
        "success_url": base + "success",
        "cancel_url": base + "cancel",
    }
    stored = row(snode, t["id"])
    assert stored["provider"] == "stripe" and stored["checkout_url"] == url
    # the test provider's page and switch are not there
    assert (await snode.client.get(f"/checkout/test/{t['id']}")).status_code == 404
    r = await snode.op("POST", "/test/payment-provider", {"fail_checkout": True})
    assert r.status_code == 404


async def test_given_return_urls_reach_stripe(snode, fake):
    org = await snode.create_org()
    await created(snode, org["api_key"], 100, success_url="https://app.example/ok",
                  cancel_url="https://app.example/no")
    [req] = fake.creates
    assert (req.form["success_url"], req.form["cancel_url"]) == ("https://app.example/ok", "https://app.example/no")


@pytest.mark.parametrize("status, retry", [(500, False), (400, None), (402, None), (401, None)])
async def test_stripe_error_is_503_expired_nothing_charged(snode, fake, status, retry):
    org = await snode.create_org()
    fake.fail_next(status, retry=retry)
    r = await snode.call("POST", "/v1/billing/topups", org["api_key"], json={"credits": 500})
    assert r.status_code == 503
    [stored] = snode.store.all("SELECT * FROM topups")
    assert err(await j(r)) == {"code": "request.service_unavailable", "message": CHECKOUT_FAILED,
                               "details": {"topup_id": stored["id"]}}
    assert stored["status"] == "expired" and stored["provider_ref"] is None
    assert "stripe" in stored["failure"]
    assert snode.balances.calls == []


async def test_a_retryable_stripe_error_is_retried_with_the_same_idempotency_key(snode, fake):
    org = await snode.create_org()
    fake.fail_next(503, retry=True)
    body = await created(snode, org["api_key"], 300)
    assert [r.headers["Idempotency-Key"] for r in fake.creates] == [body["topup"]["id"]] * 2
    assert len(fake.sessions) == 1


async def test_stripe_unreachable_is_503(nursery, tmp_path, fake):
    n = await stripe_node(nursery, tmp_path, fake, stripe_api_base="http://127.0.0.1:1")
    org = await n.create_org()
    r = await n.call("POST", "/v1/billing/topups", org["api_key"], json={"credits": 500})
    assert r.status_code == 503 and err(await j(r))["message"] == CHECKOUT_FAILED
    assert n.store.one("SELECT status FROM topups")["status"] == "expired"
    await n.parts.aclose()
    await close(n)


async def test_a_slow_stripe_is_cut_off_in_time(snode, fake, mock_clock):
    """Frozen mock clock, moved just past the deadline once Stripe holds the request: the
    answer comes with the clock still short of Stripe's own answer."""
    mock_clock.autojump_threshold = 30  # a call stuck on the frozen clock fails late rather than hangs
    snode.parts.payments.deadline = 0.3
    fake.delay = 5
    org = await snode.create_org()
    start, answers = trio.current_time(), []

    async def topup():
        answers.append(await snode.call("POST", "/v1/billing/topups", org["api_key"], json={"credits": 500}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(topup)
        while not fake.creates and not answers:
            await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(0.31)
    [r] = answers
    assert trio.current_time() - start < fake.delay  # answered before the slow Stripe could
    assert r.status_code == 503
    assert snode.store.one("SELECT status FROM topups")["status"] == "expired"


async def test_test_switch_also_stops_stripe_checkouts_in_test_mode(nursery, tmp_path, fake):
    n = await stripe_node(nursery, tmp_path, fake, test_mode=True)
    assert n.parts.payments.name == "stripe"
    r = await n.op("POST", "/test/payment-provider", {"fail_checkout": True})
    assert await j(r) == {"data": {"provider": "stripe", "fail_checkout": True}}
    org = await n.create_org()
    assert (await n.call("POST", "/v1/billing/topups", org["api_key"], json={"credits": 500})).status_code == 503
    assert fake.creates == []
    await n.parts.aclose()
    await close(n)


# -- webhooks ----------------------------------------------------------------------------
async def test_completed_session_pays_once(snode, fake):
    org, t, sid, _ = await new_topup(snode, fake, 2500)
    payload = fake.event("checkout.session.completed", sid)
    r = await post_event(snode, payload)
    assert r.status_code == 200 and await j(r) == {"received": True, "result": "paid"}
    stored = row(snode, t["id"])
    assert stored["status"] == "paid" and stored["lot_id"] is not None
    [(key, grant)] = snode.balances.grants()
    assert key == org["organization_id"]
    assert (grant.grant_id, grant.amount_uc, grant.source) == (t["id"], 2500 * 1_000_000, "topup")
    assert grant.expires_at == parse_iso(stored["paid_at"]) + 365 * DAY

    # the same event delivered again, and another event for the same paid session
    assert await j(await post_event(snode, payload)) == {"received": True, "result": "paid"}
    again = fake.event("checkout.session.completed", sid)
    assert await j(await post_event(snode, again)) == {"received": True, "result": "paid"}
    assert len(snode.balances.grants()) == 1
    # the API shows it paid
    listed = (await j(await snode.call("GET", "/v1/billing/topups", org["api_key"])))["data"]
    assert listed == [{**t, "status": "paid", "paid_at": stored["paid_at"]}]
    # the operator's confirmation of a paid Stripe top-up adds nothing either
    assert (await pay(snode, t["id"])).status_code == 200
    assert len(snode.balances.grants()) == 1


async def test_concurrent_duplicate_webhooks_pay_once(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.completed", sid)
    answers = []

    async def deliver():
        r = await post_event(snode, payload)
        answers.append((r.status_code, await j(r)))

    async with trio.open_nursery() as n:
        for _ in range(6):
            n.start_soon(deliver)
    assert answers == [(200, {"received": True, "result": "paid"})] * 6
    assert len(snode.balances.grants()) == 1


async def test_webhook_answers_after_the_commit(snode, fake):
    """A 2xx means the lot is granted: when the grant fails the webhook is not 2xx, and
    Stripe's retry completes it (still one lot)."""
    _, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.completed", sid)
    snode.balances.fail = 1
    r = await post_event(snode, payload)
    assert r.status_code == 503
    assert row(snode, t["id"])["lot_id"] is None
    r = await post_event(snode, payload)
    assert r.status_code == 200 and row(snode, t["id"])["lot_id"] is not None
    assert len(snode.balances.topup_lots()) == 1


@pytest.mark.parametrize("case", ["wrong secret", "tampered", "no header", "garbage header", "stale"])
async def test_bad_signatures_are_400_and_change_nothing(snode, fake, case):
    _, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.completed", sid)
    if case == "wrong secret":
        r = await post_event(snode, payload, secret="whsec_other")
    elif case == "tampered":
        header = stripe.WebhookSignature.generate_signature_header(payload, WEBHOOK_SECRET)
        r = await post_event(snode, payload.replace('"paid"', '"paid" '), header=header)
    elif case == "no header":
        r = await post_event(snode, payload, header=False)
    elif case == "garbage header":
        r = await post_event(snode, payload, header="nonsense")
    else:
        r = await post_event(snode, payload, timestamp=int(time.time()) - 3600)
    assert r.status_code == 400
    e = err(await j(r))
    assert (e["code"], e["message"]) == ("request.bad_request", "The webhook could not be verified.")
    if case == "stale":
        assert "tolerance" in e["details"]["reason"]
    stored = row(snode, t["id"])
    assert stored["status"] == "pending" and stored["paid_at"] is None
    assert snode.balances.calls == []


async def test_a_signed_body_that_is_not_an_event_is_400(snode, fake):
    for payload in ["not json", json.dumps({"hello": "world"}), "[]"]:
        r = await post_event(snode, payload)
        assert r.status_code == 400, payload
        assert err(await j(r))["message"] == "The webhook could not be verified."


async def test_expired_session_expires_the_topup(snode, fake):
    org, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.expired", sid)
    r = await post_event(snode, payload)
    assert r.status_code == 200 and await j(r) == {"received": True, "result": "expired"}
    assert row(snode, t["id"])["status"] == "expired"
    assert await j(await post_event(snode, payload)) == {"received": True, "result": "expired"}
    # a completion that arrives for it anyway is acknowledged but credits nothing
    r = await post_event(snode, fake.event("checkout.session.completed", sid))
    assert r.status_code == 200 and await j(r) == {"received": True, "result": "conflict"}
    assert row(snode, t["id"])["status"] == "expired" and snode.balances.calls == []
    listed = (await j(await snode.call("GET", "/v1/billing/topups", org["api_key"])))["data"]
    assert listed[0]["status"] == "expired" and listed[0]["paid_at"] is None


async def test_expiry_of_a_paid_topup_changes_nothing(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake)
    await post_event(snode, fake.event("checkout.session.completed", sid))
    r = await post_event(snode, fake.event("checkout.session.expired", sid))
    assert r.status_code == 200 and (await j(r))["result"] == "paid"
    assert row(snode, t["id"])["status"] == "paid"


async def test_delayed_payment_methods(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake)
    r = await post_event(snode, fake.event("checkout.session.completed", sid, payment_status="unpaid"))
    assert await j(r) == {"received": True, "result": "ignored"}
    assert row(snode, t["id"])["status"] == "pending"
    r = await post_event(snode, fake.event("checkout.session.async_payment_succeeded", sid,
                                           payment_status="paid"))
    assert await j(r) == {"received": True, "result": "paid"}
    assert len(snode.balances.grants()) == 1

    _, t2, sid2, _ = await new_topup(snode, fake)
    r = await post_event(snode, fake.event("checkout.session.async_payment_failed", sid2))
    assert await j(r) == {"received": True, "result": "expired"}
    assert row(snode, t2["id"])["status"] == "expired"


async def test_events_that_are_not_ours(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake)
    # another event type
    other = json.dumps({"id": "evt_1", "object": "event", "type": "customer.created",
                        "data": {"object": {"id": "cus_1", "object": "customer"}}})
    assert await j(await post_event(snode, other)) == {"received": True, "result": "ignored"}
    # a session of something else on the same Stripe account
    foreign = fake.event("checkout.session.completed", "cs_test_other", metadata={})
    assert await j(await post_event(snode, foreign)) == {"received": True, "result": "ignored"}
    # expiry of a session naming a top-up this node never recorded
    unknown = fake.event("checkout.session.expired", "cs_test_x", metadata={"topup_id": str(uuid.uuid4())})
    assert await j(await post_event(snode, unknown)) == {"received": True, "result": "ignored"}
    # a paid session naming an unknown top-up: 404 so Stripe keeps retrying
    paid_unknown = fake.event("checkout.session.completed", "cs_test_y", metadata={"topup_id": str(uuid.uuid4())})
    r = await post_event(snode, paid_unknown)
    assert r.status_code == 404 and err(await j(r))["message"] == "Top-up not found."
    # a paid session whose id is not the top-up's checkout
    wrong = fake.event("checkout.session.completed", "cs_test_z", metadata={"topup_id": t["id"]})
    assert await j(await post_event(snode, wrong)) == {"received": True, "result": "conflict"}
    assert row(snode, t["id"])["status"] == "pending" and snode.balances.calls == []


async def test_webhook_without_a_secret_is_503(nursery, tmp_path, fake):
    n = await stripe_node(nursery, tmp_path, fake, stripe_webhook_secret=None)
    _, t, sid, _ = await new_topup(n, fake)
    r = await post_event(n, fake.event("checkout.session.completed", sid))
    assert r.status_code == 503
    assert err(await j(r)) == {"code": "billing.not_configured",
                               "message": "Stripe webhooks are not configured on this node."}
    assert row(n, t["id"])["status"] == "pending"
    await n.parts.aclose()
    await close(n)

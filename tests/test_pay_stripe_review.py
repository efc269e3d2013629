"""Adversarial review of Stripe's webhook (docs/security-limits.md, "Payments review"):
a signed event is credited only when it pays exactly what was ordered, for the
organization that ordered it; a signed body of the wrong shape is a 400, never a 500;
several signatures in one header; bodies past the size limit.

Real sockets (the fake Stripe API), like test_topups_stripe.py: no autojump clock."""

from __future__ import annotations

import json
import time

import pytest
import stripe

from fake_stripe import WEBHOOK_SECRET
from test_topups import err, j, row
from test_topups_stripe import fake, new_topup, post_event, snode  # noqa: F401  (fixtures)

NOT_VERIFIED = "The webhook could not be verified."


def sign(payload: str, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> str:
    ts = int(time.time()) if timestamp is None else timestamp
    return stripe.WebhookSignature._compute_signature(f"{ts}.{payload}", secret)


def assert_unpaid(node, topup_id: str) -> None:
    stored = row(node, topup_id)
    assert stored["status"] == "pending" and stored["paid_at"] is None and stored["lot_id"] is None
    assert node.balances.calls == []


# -- what was paid must be what was ordered --------------------------------------------------
@pytest.mark.parametrize("changes", [
    {"amount_total": 499},               # one cent short of 500 credits at 0.01
    {"amount_total": 0},                 # a 100 % discount code: nothing paid, nothing credited
    {"amount_total": "500"},             # not an integer
    {"amount_total": None},
    {"currency": "eur"},
    {"currency": None},
])
async def test_a_payment_that_differs_from_the_order_is_not_credited(snode, fake, changes):
    _, t, sid, _ = await new_topup(snode, fake, 500)
    assert t["amount_cents"] == 500 and fake.sessions[sid]["amount_total"] == 500
    r = await post_event(snode, fake.event("checkout.session.completed", sid, **changes))
    assert r.status_code == 200 and await j(r) == {"received": True, "result": "conflict"}
    assert_unpaid(snode, t["id"])


async def test_a_payment_with_a_tax_on_top_is_credited_the_order(snode, fake):
    """Stripe Tax adds to amount_total; the order's credits are what is credited."""
    _, t, sid, _ = await new_topup(snode, fake, 500)
    r = await post_event(snode, fake.event("checkout.session.completed", sid, amount_total=595))
    assert await j(r) == {"received": True, "result": "paid"}
    [grant] = snode.balances.grants()
    assert row(snode, t["id"])["status"] == "paid"


async def test_the_exact_amount_in_any_case_of_currency_is_credited(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake, 12_345)
    r = await post_event(snode, fake.event("checkout.session.completed", sid, currency="USD"))
    assert await j(r) == {"received": True, "result": "paid"}
    assert len(snode.balances.grants()) == 1


async def test_a_session_naming_another_organization_is_not_credited(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake)
    other = await snode.create_org(name="Other", email="o@other.test")
    meta = {"topup_id": t["id"], "org_id": other["organization_id"]}
    r = await post_event(snode, fake.event("checkout.session.completed", sid, metadata=meta))
    assert r.status_code == 200 and await j(r) == {"received": True, "result": "conflict"}
    assert_unpaid(snode, t["id"])


async def test_another_organizations_topup_id_with_its_own_session_is_not_credited(snode, fake):
    """Org B's paid session cannot be pointed at org A's top-up: the session is not A's checkout."""
    _, ta, _, _ = await new_topup(snode, fake)
    _, tb, sid_b, _ = await new_topup(snode, fake)
    meta = {"topup_id": ta["id"], "org_id": fake.sessions[sid_b]["metadata"]["org_id"]}
    r = await post_event(snode, fake.event("checkout.session.completed", sid_b, metadata=meta))
    assert await j(r) == {"received": True, "result": "conflict"}
    assert_unpaid(snode, ta["id"])
    assert row(snode, tb["id"])["status"] == "pending"


# -- signed bodies of the wrong shape: 400, nothing changes ------------------------------------
def completed(obj) -> str:
    return json.dumps({"id": "evt_1", "object": "event", "type": "checkout.session.completed", "data": obj})


@pytest.mark.parametrize("payload", [
    completed("x"),
    completed({"object": "x"}),
    completed({"object": {"object": "checkout.session", "id": "cs_1", "metadata": "m", "payment_status": "paid"}}),
    completed({"object": {"object": "checkout.session", "id": "cs_1", "payment_status": "paid",
                          "metadata": {"topup_id": ["a"]}}}),
    completed({"object": {"object": "checkout.session", "id": 5, "payment_status": "paid",
                          "metadata": {"topup_id": "a"}}}),
    "[" * 100_000 + "]" * 100_000,
    '{"object": "event", "type": "x", "n": ' + "1" * 5000 + "}",
])
async def test_signed_bodies_of_the_wrong_shape_are_400(snode, fake, payload):
    _, t, _, _ = await new_topup(snode, fake)
    r = await post_event(snode, payload)
    assert r.status_code == 400
    e = err(await j(r))
    assert (e["code"], e["message"]) == ("request.bad_request", NOT_VERIFIED)
    assert_unpaid(snode, t["id"])


# -- the signature header -----------------------------------------------------------------------
async def test_one_matching_signature_among_several_verifies(snode, fake):
    """Stripe sends one v1 per active secret (rotation): any one matching is enough."""
    _, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.completed", sid)
    ts = int(time.time())
    header = f"t={ts},v1={sign(payload, 'whsec_old', ts)},v0={'0' * 64},v1={sign(payload, timestamp=ts)}"
    r = await post_event(snode, payload, header=header)
    assert await j(r) == {"received": True, "result": "paid"}


@pytest.mark.parametrize("header", [
    "t={ts},v1={other},v1={other2}",          # several, none matching
    "t={ts},v0={good}",                       # the right digest under another scheme
    "t={ts},v1={good_for_other_body}",        # a signature over a different body
    "t={old},v1={good_old}",                  # an old signed event replayed
    "t={ts},v1=\u00e9{good}",                 # non-ASCII
    "t=abc,v1={good}",
])
async def test_headers_that_do_not_verify_are_400(snode, fake, header):
    _, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.completed", sid)
    ts, old = int(time.time()), int(time.time()) - 301
    header = header.format(ts=ts, old=old, good=sign(payload, timestamp=ts), other=sign(payload, "whsec_a", ts),
                           other2=sign(payload, "whsec_b", ts), good_old=sign(payload, timestamp=old),
                           good_for_other_body=sign(payload.replace('"paid"', '"paid" '), timestamp=ts))
    r = await post_event(snode, payload, header=header)
    assert r.status_code == 400
    e = err(await j(r))
    assert (e["code"], e["message"]) == ("request.bad_request", NOT_VERIFIED)
    assert WEBHOOK_SECRET not in json.dumps(e)
    assert_unpaid(snode, t["id"])


async def test_a_body_over_the_limit_is_413(snode, fake):
    _, t, sid, _ = await new_topup(snode, fake)
    payload = fake.event("checkout.session.completed", sid, padding="x" * (1024 * 1024))
    r = await post_event(snode, payload)
    assert r.status_code == 413
    assert_unpaid(snode, t["id"])

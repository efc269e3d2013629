"""Payment parts without HTTP: prices, provider choice, the test provider, Stripe event
mapping and checkout parameters."""

from __future__ import annotations

from decimal import Decimal

import pytest

from service.config import Settings
from service.payments import CheckoutFailed, Paid, ProviderEvent, TopupDraft
from service.payments.builtin import TestProvider
from service.payments.choose import provider_for
from service.payments.pricing import amount_cents, parse_currency, quote_from
from service.payments.stripe_checkout import StripeProvider, interpret


@pytest.mark.parametrize("credits, price, cents", [
    (100, "0.01", 100), (100000, "0.01", 100000), (12345, "0.01", 12345),
    (100, "0.0125", 125), (101, "0.0125", 126),      # 126.25 -> 126
    (3, "0.005", 2),                                  # 1.5 -> 2 (half up, not half even)
    (5, "0.005", 3),                                  # 2.5 -> 3
    (1, "0.0049", 0),                                 # 0.49 -> 0
    (99999, "0.07", 699993),
    (100000, "0.1", 1000000),
])
def test_amount_cents_is_exact_decimal_rounded_half_up(credits, price, cents):
    assert amount_cents(credits, Decimal(price)) == cents


def test_quote_view_and_limits():
    q = quote_from(" 0.01 ", "USD")
    assert q.view() == {"usd_per_credit": "0.01", "min_credits": 100, "max_credits": 100000,
                        "expiry_days": 365, "currency": "usd"}
    assert [q.in_range(n) for n in (99, 100, 100000, 100001)] == [False, True, True, False]
    assert q.expiry_seconds == 365 * 86400


@pytest.mark.parametrize("bad", ["", "us", "usdd", "u$d", "12a"])
def test_currency_must_be_three_letters(bad):
    with pytest.raises(ValueError):
        parse_currency(bad)


def draft(**kw) -> TopupDraft:
    base = dict(id="t1", organization_id="o1", credits=250, amount_cents=250, currency="usd",
                success_url="https://a.example/ok", cancel_url="https://a.example/no")
    return TopupDraft(**{**base, **kw})


async def test_test_provider_checkout_and_switch():
    p = TestProvider("http://node.example/")
    assert await p.start_checkout(draft()) == ("http://node.example/checkout/test/t1", "test_t1")
    p.fail_checkout = True
    with pytest.raises(CheckoutFailed):
        await p.start_checkout(draft())
    p.fail_checkout = False
    url, ref = await p.start_checkout(draft(id="t2"))
    assert url.endswith("/t2") and ref == "test_t2"


async def test_provider_choice():
    assert provider_for(Settings(test_mode=False)) is None
    p = provider_for(Settings(test_mode=True, base_url="http://x.example"))
    assert isinstance(p, TestProvider) and p.base_url == "http://x.example"
    for test_mode in (False, True):
        s = provider_for(Settings(test_mode=test_mode, stripe_secret_key="sk_test_1", stripe_webhook_secret="whsec_1"))
        assert isinstance(s, StripeProvider) and s.webhook_secret == "whsec_1"
        await s.aclose()


async def test_stripe_session_params():
    assert StripeProvider.session_params(draft()) == {
        "mode": "payment",
        "line_items": [{"quantity": 1, "price_data": {"currency": "usd", "unit_amount": 250,
                                                       "product_data": {"name": "250 credits"}}}],
        "client_reference_id": "t1",
        "metadata": {"topup_id": "t1", "org_id": "o1"},
        "payment_intent_data": {"metadata": {"topup_id": "t1", "org_id": "o1"}},
        "success_url": "https://a.example/ok",
        "cancel_url": "https://a.example/no",
    }


def ev(type_, **obj):
    return {"object": "event", "type": type_,
            "data": {"object": {"object": "checkout.session", "id": "cs_1", "metadata": {"topup_id": "t1"}, **obj}}}


UNSAID = Paid(None, None)  # the event names no amount: never matches an order


@pytest.mark.parametrize("event, expected", [
    (ev("checkout.session.completed", payment_status="paid"), ProviderEvent("confirm", "t1", "cs_1", paid=UNSAID)),
    (ev("checkout.session.completed", payment_status="no_payment_required"),
     ProviderEvent("confirm", "t1", "cs_1", paid=UNSAID)),
    (ev("checkout.session.async_payment_succeeded", payment_status="paid", amount_total=250, currency="USD",
        metadata={"topup_id": "t1", "org_id": "o1"}),
     ProviderEvent("confirm", "t1", "cs_1", paid=Paid(250, "usd", "o1"))),
    (ev("checkout.session.completed", payment_status="paid", amount_total=True, currency=5),
     ProviderEvent("confirm", "t1", "cs_1", paid=UNSAID)),
    (ev("checkout.session.expired"), ProviderEvent("expire", "t1", "cs_1")),
    (ev("checkout.session.async_payment_failed"), ProviderEvent("expire", "t1", "cs_1")),
    (ev("checkout.session.completed", metadata={}, client_reference_id="t9", payment_status="paid"),
     ProviderEvent("confirm", "t9", "cs_1", paid=UNSAID)),
])
def test_stripe_events_map_to_the_topup_machine(event, expected):
    assert interpret(event) == expected


@pytest.mark.parametrize("event", [
    ev("checkout.session.completed", payment_status="unpaid"),
    ev("checkout.session.completed", payment_status="paid", metadata={}),
    {"object": "event", "type": "payment_intent.succeeded", "data": {"object": {"object": "payment_intent"}}},
    {"object": "event", "type": "checkout.session.completed", "data": {"object": {"object": "customer"}}},
    {"object": "event", "type": "checkout.session.completed", "data": {}},
])
def test_other_stripe_events_are_ignored(event):
    assert interpret(event).action == "ignore"

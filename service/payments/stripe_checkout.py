"""Stripe Checkout through the official SDK, on trio (httpx via anyio).

- `start_checkout`: `checkout.sessions.create_async` with the top-up id as idempotency key
  (a retried create returns the same session), mode payment, one `price_data` line item of
  `amount_cents`, metadata `topup_id`/`org_id` (also `client_reference_id`), success and
  cancel URLs. The whole call, SDK retries included, is bounded by `deadline` seconds so a
  slow Stripe gives a 503 well inside the route's time limit. Any Stripe or network error,
  or a session without a URL, is `CheckoutFailed`.
- `parse_webhook`: `stripe.Webhook.construct_event` on the raw body with the
  `Stripe-Signature` header (a bad signature, or a timestamp older than `tolerance`
  seconds by the wall clock Stripe signs with, is `InvalidWebhook`). Events:
    checkout.session.completed, payment_status paid / no_payment_required -> confirm
      (a confirmation carries `Paid`: amount_total, currency, metadata org_id; the actor
      credits nothing unless they match the order)
    checkout.session.completed, unpaid (delayed payment methods)          -> ignore
    checkout.session.async_payment_succeeded                             -> confirm
    checkout.session.async_payment_failed, checkout.session.expired     -> expire
    anything else                                                        -> ignore
- `aclose`: closes the SDK's httpx client (an unclosed one leaks a socket).
"""

from __future__ import annotations

import logging
from typing import Any

import stripe
import trio

from service.payments.base import (Checkout, CheckoutFailed, InvalidWebhook, Paid, PaymentProvider, ProviderEvent,
                                   TopupDraft)

log = logging.getLogger(__name__)

CONFIRM_EVENTS = {"checkout.session.async_payment_succeeded"}
EXPIRE_EVENTS = {"checkout.session.expired", "checkout.session.async_payment_failed"}
PAID = {"paid", "no_payment_required"}


class StripeProvider(PaymentProvider):
    name = "stripe"

    def __init__(self, secret_key: str, webhook_secret: str | None, *, api_base: str | None = None,
                 timeout: float = 5.0, max_network_retries: int = 1, deadline: float = 8.0,
                 tolerance: int = stripe.Webhook.DEFAULT_TOLERANCE) -> None:
        super().__init__()
        self.webhook_secret = webhook_secret or None
        self.deadline = deadline
        self.tolerance = tolerance
        self.http_client = stripe.HTTPXClient(timeout=timeout)
        self.client = stripe.StripeClient(
            secret_key,
            base_addresses={"api": api_base.rstrip("/")} if api_base else None,
            http_client=self.http_client,
            max_network_retries=max_network_retries,
        )

    @staticmethod
    def session_params(t: TopupDraft) -> dict:
        meta = {"topup_id": t.id, "org_id": t.organization_id}
        return {
            "mode": "payment",
            "line_items": [{
                "quantity": 1,
                "price_data": {
                    "currency": t.currency,
                    "unit_amount": t.amount_cents,
                    "product_data": {"name": f"{t.credits} credits"},
                },
            }],
            "client_reference_id": t.id,
            "metadata": meta,
            "payment_intent_data": {"metadata": meta},
            "success_url": t.success_url,
            "cancel_url": t.cancel_url,
        }

    async def _create_checkout(self, t: TopupDraft) -> Checkout:
        session = None
        try:
            with trio.move_on_after(self.deadline):
                session = await self.client.v1.checkout.sessions.create_async(
                    self.session_params(t), {"idempotency_key": t.id})  # type: ignore[arg-type]  # a plain dict of its fields
        except stripe.StripeError as e:
            log.warning("stripe checkout for top-up %s failed: %s", t.id, e)
            raise CheckoutFailed(f"stripe: {type(e).__name__}: {e.user_message or e}") from e
        if session is None:
            log.warning("stripe checkout for top-up %s timed out after %ss", t.id, self.deadline)
            raise CheckoutFailed(f"stripe: no answer within {self.deadline} seconds")
        url = getattr(session, "url", None)
        if not url:
            raise CheckoutFailed("stripe: the checkout session has no URL")
        return Checkout(url, session.id)

    def parse_webhook(self, raw: bytes, headers) -> ProviderEvent:
        if not self.webhook_secret:
            raise InvalidWebhook("no webhook secret is configured")
        try:
            event = self.client.construct_event(raw, headers.get("Stripe-Signature"), self.webhook_secret,
                                                tolerance=self.tolerance)
        except stripe.SignatureVerificationError as e:
            raise InvalidWebhook(str(e).split("\n")[0]) from None
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # not JSON, or not an event
            raise InvalidWebhook(f"the body is not a Stripe event: {type(e).__name__}") from None
        data = event.to_dict()
        if data.get("object") != "event" or not isinstance(data.get("type"), str):
            raise InvalidWebhook("the body is not a Stripe event")
        return interpret(data)

    async def aclose(self) -> None:
        await self.http_client.close_async()


def _object(value: Any, where: str) -> dict:
    """A JSON object of a signed event (absent: empty); another type is not a Stripe event."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidWebhook(f"the body is not a Stripe event: {where} is not an object")
    return value


def _string(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidWebhook(f"the body is not a Stripe event: {where} is not a string")
    return value


def paid_of(session: dict, meta: dict) -> Paid:
    """What the session says was paid (amount_total in the currency's smallest unit)."""
    amount = session.get("amount_total")
    currency = session.get("currency")
    org = meta.get("org_id")
    return Paid(amount if type(amount) is int else None,
                currency.lower() if isinstance(currency, str) else None,
                org if isinstance(org, str) else None)


def interpret(event: dict) -> ProviderEvent:
    """Map a verified Stripe event (as a plain dict) to what the top-up machine does with it;
    a signed body of the wrong shape is `InvalidWebhook` (a 400), never an error of ours."""
    kind = str(event.get("type") or "")
    obj = _object(_object(event.get("data"), "data").get("object"), "data.object")
    if not kind.startswith("checkout.session.") or obj.get("object") != "checkout.session":
        return ProviderEvent("ignore", note=f"event {kind} is not handled")
    meta = _object(obj.get("metadata"), "metadata")
    topup_id = _string(meta.get("topup_id"), "metadata.topup_id") or _string(
        obj.get("client_reference_id"), "client_reference_id")
    ref = _string(obj.get("id"), "id")
    if not topup_id:
        return ProviderEvent("ignore", None, ref, "the session is not a top-up of this service")
    if kind == "checkout.session.completed":
        status = obj.get("payment_status")
        if status in PAID:
            return ProviderEvent("confirm", topup_id, ref, paid=paid_of(obj, meta))
        return ProviderEvent("ignore", topup_id, ref, f"completed with payment_status {status}; waiting")
    if kind in CONFIRM_EVENTS:
        return ProviderEvent("confirm", topup_id, ref, paid=paid_of(obj, meta))
    if kind in EXPIRE_EVENTS:
        return ProviderEvent("expire", topup_id, ref)
    return ProviderEvent("ignore", topup_id, ref, f"event {kind} is not handled")

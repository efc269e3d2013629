"""What the HTTP layer calls for top-ups: open a checkout and record it, confirm, expire.

The provider is called here, outside the actor, so a slow payment provider never blocks
an organization's top-up actor; the actor records the outcome (TOPUP: checkout_started ->
pending, checkout_failed -> expired). The top-up id is chosen before the provider call and
is the provider's idempotency key.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from service.errors import Conflict, NotFound, Unavailable, Unprocessable
from service.payments.actor import Confirm, Expire, RecordCheckout
from service.payments.base import CheckoutFailed, Paid, ProviderEvent, TopupDraft
from service.payments.pricing import RANGE_MESSAGE, Quote
from service.storage import topups as sql

log = logging.getLogger(__name__)

NOT_CONFIGURED = ("Top-ups are not available on this node: no payment provider is configured.")
CHECKOUT_FAILED = ("The payment provider could not start checkout; nothing was charged. "
                   "Try again shortly.")


@dataclass(frozen=True)
class Created:
    topup: dict
    checkout_url: str


def quote(node) -> Quote:
    return node.topup_quote


def check_credits(q: Quote, credits: int) -> None:
    if not q.in_range(credits):
        raise Unprocessable(RANGE_MESSAGE, {"credits": credits, "min": q.min_credits, "max": q.max_credits})


def default_urls(base_url: str, topup_id: str) -> tuple[str, str]:
    """The dashboard's Billing page of this node, told which top-up came back and how."""
    page = f"{base_url.rstrip('/')}/billing"
    return f"{page}?topup={topup_id}&checkout=success", f"{page}?topup={topup_id}&checkout=cancel"


async def create_topup(node, org_id: str, user_id: str | None, credits: int,
                       success_url: str | None = None, cancel_url: str | None = None) -> Created:
    q = quote(node)
    check_credits(q, credits)
    provider = node.payments
    if provider is None:
        raise Unavailable(NOT_CONFIGURED, code="billing.not_configured")
    topup_id = str(uuid.uuid4())
    ok_url, back_url = default_urls(node.settings.public_base_url, topup_id)
    draft = TopupDraft(topup_id, org_id, credits, q.amount_cents(credits), q.currency,
                       success_url or ok_url, cancel_url or back_url)
    created_at = node.clock.iso_now()

    def record(checkout=None, failure=None) -> RecordCheckout:
        return RecordCheckout(draft, provider.name, user_id, created_at, str(q.usd_per_credit), q.expiry_days,
                              checkout, failure)

    try:
        checkout = await provider.start_checkout(draft)
    except CheckoutFailed as e:
        await node.topups.ask(org_id, record(failure=str(e)))
        raise Unavailable(CHECKOUT_FAILED, {"topup_id": topup_id}) from None
    row = await node.topups.ask(org_id, record(checkout))
    return Created(row, checkout.url)


def _owner(node, topup_id: str) -> str:
    row = sql.get(node.store, topup_id)
    if row is None:
        raise NotFound("Top-up not found.")
    return row["organization_id"]


async def confirm_topup(node, topup_id: str, provider_ref: str | None = None, paid: Paid | None = None) -> dict:
    """The provider's confirmation: pending -> paid with one `topup` lot; repeats are no-ops."""
    return await node.topups.ask(_owner(node, topup_id), Confirm(topup_id, provider_ref, paid))


async def expire_topup(node, topup_id: str, provider_ref: str | None = None) -> dict:
    return await node.topups.ask(_owner(node, topup_id), Expire(topup_id, provider_ref))


async def apply_event(node, event: ProviderEvent) -> str:
    """Apply a verified provider event; returns what was done (for the webhook answer)."""
    if event.action == "ignore" or event.topup_id is None:
        log.info("payment provider event ignored: %s", event.note)
        return "ignored"
    try:
        if event.action == "confirm":
            row = await confirm_topup(node, event.topup_id, event.provider_ref, event.paid)
        else:
            row = await expire_topup(node, event.topup_id, event.provider_ref)
    except NotFound:
        if event.action == "confirm":
            # Money was taken for a top-up this node does not know: answer 404 so the
            # provider keeps retrying (and its dashboard shows it) while someone looks.
            log.error("payment confirmed for unknown top-up %s (%s)", event.topup_id, event.provider_ref)
            raise
        return "ignored"
    except Conflict as e:
        # Paid after it expired, a payment of another checkout, or not what was ordered (amount,
        # currency, organization): never credited twice or
        # wrongly; acknowledged so the provider stops, and logged for a person to look at.
        log.error("payment event %s for top-up %s not applied: %s", event.action, event.topup_id, e.message)
        return "conflict"
    return row["status"]

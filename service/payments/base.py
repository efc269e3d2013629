"""The payment-provider interface.

A provider does two things:

- `start_checkout(topup)` opens a checkout for a top-up that is about to be recorded and
  returns `Checkout(url, provider_ref)` (a 2-tuple); it raises `CheckoutFailed` when the
  checkout cannot start (then the top-up is recorded `expired` and nothing is charged).
  It must be safe to call again with the same top-up id (Stripe: idempotency key).
- Confirmation: the provider tells the node that a checkout was paid or abandoned. The
  built-in test provider's confirmation is the operator route `POST
  /operator/v1/topups/{id}/pay`; Stripe's is a signed webhook that `parse_webhook` turns
  into a `ProviderEvent` (confirm / expire / ignore), or raises `InvalidWebhook`.

`fail_checkout` is the test-mode switch of `POST /operator/v1/test/payment-provider`: while
it is on, every `start_checkout` fails before reaching the provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple


class CheckoutFailed(Exception):
    """The provider could not start a checkout; nothing was charged."""


class InvalidWebhook(Exception):
    """A webhook whose signature, timestamp or body does not verify. Nothing changes."""


@dataclass(frozen=True)
class TopupDraft:
    """What a provider needs to open a checkout for a top-up (not yet recorded)."""

    id: str
    organization_id: str
    credits: int
    amount_cents: int
    currency: str
    success_url: str
    cancel_url: str

    @property
    def description(self) -> str:
        return f"{self.credits} credits"


class Checkout(NamedTuple):
    url: str
    provider_ref: str | None


@dataclass(frozen=True)
class Paid:
    """What a provider says was paid. A confirmation carrying one credits nothing unless
    it matches the order exactly: a signed event is trusted for what it says, not for
    what the top-up asked (None: the event did not say, which never matches)."""

    amount_cents: int | None
    currency: str | None
    org_id: str | None = None  # echoed from the checkout's metadata; None: not echoed


@dataclass(frozen=True)
class ProviderEvent:
    """A verified provider notification, reduced to what the top-up machine needs."""

    action: Literal["confirm", "expire", "ignore"]
    topup_id: str | None = None
    provider_ref: str | None = None
    note: str = ""
    paid: Paid | None = None  # on confirmations: checked against the order


class PaymentProvider:
    name = "base"

    def __init__(self) -> None:
        self.fail_checkout = False

    async def start_checkout(self, topup: TopupDraft) -> Checkout:
        if self.fail_checkout:
            raise CheckoutFailed("checkout start refused by the test switch fail_checkout")
        return await self._create_checkout(topup)

    async def _create_checkout(self, topup: TopupDraft) -> Checkout:
        raise NotImplementedError

    def parse_webhook(self, raw: bytes, headers) -> ProviderEvent:
        """Verify and read a provider webhook; providers without webhooks never get one."""
        raise InvalidWebhook(f"the {self.name} provider takes no webhooks")

    async def aclose(self) -> None:
        """Release network resources at shutdown."""

"""Top-ups: prices, payment providers (built-in test provider, Stripe Checkout) and the
top-up actor that owns every top-up's status (TOPUP table of `service.machines`).

    pricing    quote constants, exact amount_cents, validation of the price settings
    base       PaymentProvider interface, TopupDraft, Checkout, ProviderEvent, CheckoutFailed
    builtin    TestProvider: checkout page of this node, confirmed by the operator's /pay
    stripe_checkout  StripeProvider: Stripe Checkout through the official SDK, signed webhooks
    actor      TopupActor (one per organization) and its messages
    facade     what HTTP handlers call: create, confirm, expire
    choose     pick the provider from the settings
"""

from service.payments.base import (
    Checkout,
    CheckoutFailed,
    InvalidWebhook,
    Paid,
    PaymentProvider,
    ProviderEvent,
    TopupDraft,
)

__all__ = ["Checkout", "CheckoutFailed", "InvalidWebhook", "Paid", "PaymentProvider", "ProviderEvent", "TopupDraft"]

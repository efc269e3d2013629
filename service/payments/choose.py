"""Choose the node's payment provider from the settings.

    GENSERVICE_STRIPE_SECRET_KEY set          -> Stripe Checkout (also in test mode, e.g.
                                                 with a Stripe test key or a local fake)
    no Stripe key, GENSERVICE_TEST_MODE=1     -> the built-in test provider
    neither                                   -> None: POST /v1/billing/topups answers
                                                 503 billing.not_configured
"""

from __future__ import annotations

import logging

from service.config import Settings
from service.payments.base import PaymentProvider

log = logging.getLogger(__name__)


def provider_for(settings: Settings) -> PaymentProvider | None:
    if settings.stripe_secret_key:
        from service.payments.stripe_checkout import StripeProvider

        if not settings.stripe_webhook_secret:
            log.warning("GENSERVICE_STRIPE_WEBHOOK_SECRET is not set: Stripe payments cannot be confirmed")
        return StripeProvider(settings.stripe_secret_key, settings.stripe_webhook_secret,
                              api_base=settings.stripe_api_base)
    if settings.test_mode:
        from service.payments.builtin import TestProvider

        return TestProvider(settings.public_base_url)
    return None

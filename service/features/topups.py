"""Top-ups: the price quote, the payment provider and the top-up actors.

Sets `services.payments` (the provider, or None when none is configured),
`services.topup_quote` (price and currency from the settings; a bad price fails the start)
and `services.topups` (registry of `TopupActor`, one per organization). The provider's
network client is closed at shutdown; after a restart, paid top-ups whose lot was not
granted yet are completed.
"""

from __future__ import annotations

from functools import partial

from service.actors.runtime import Registry
from service.payments.actor import TopupActor, recover
from service.payments.choose import provider_for
from service.payments.pricing import quote_from


def attach(services) -> None:
    settings = services.settings
    services.topup_quote = quote_from(settings.usd_per_credit, settings.currency)
    services.payments = provider_for(settings)
    services.topups = Registry("topups", lambda key: TopupActor(services), services.clock)
    services.registries.append(services.topups)
    services.recoveries.append(partial(recover, services))
    if services.payments is not None:
        services.closers.append(services.payments.aclose)

"""Account webhooks: the delivery actor (owner of webhooks and deliveries, reader of the
`events` outbox). `services.webhook_delivery` is its registry; `wake()` on it tells the actor
that events were committed (it also polls the outbox every 0.1 s)."""


def attach(services) -> None:
    from service.actors.delivery import DeliveryRegistry

    registry = DeliveryRegistry(services)
    services.webhook_delivery = registry
    services.registries.append(registry)
    services.recoveries.append(registry.start_actor)
    services.closers.append(registry.stop_sending)

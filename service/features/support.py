"""Support tickets: a registry of ticket actors, one per organization (`services.tickets`).
After each committed change a ticket actor wakes the webhook delivery actor, if present."""


def attach(services) -> None:
    from service.actors.runtime import Registry
    from service.actors.tickets import TicketsActor

    def wake() -> None:
        delivery = getattr(services, "webhook_delivery", None)
        if delivery is not None:
            delivery.wake()

    services.tickets = Registry("tickets", lambda key: TicketsActor(services.store, services.clock, wake),
                                services.clock)
    services.registries.append(services.tickets)

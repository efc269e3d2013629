"""Generation: the model catalog, the job registry with its per-model slot line and
webhook dispatcher, asset files and signed URLs, and the start-up recovery step.

Attaches `services.catalog` (unless a feature before it did), `services.generation` (the
facade of service.actors.jobs) and `services.jobs` (its registry). Needs `services.sender`
(a_outgoing) and, at use time, `services.balances` (billing).
"""

from __future__ import annotations

from service.actors.jobs import Generation
from service.catalog.catalog import load_catalog


def attach(services) -> None:
    if getattr(services, "catalog", None) is None:
        services.catalog = load_catalog(services.settings.catalog_file)
    gen = Generation(services)
    services.generation = gen
    services.jobs = gen.jobs
    services.registries.append(gen.jobs)
    services.registries.append(gen.uploads)
    services.recoveries.append(gen.recover)

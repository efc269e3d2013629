"""Products: the product-run registry (`services.runs`, one actor per run), the facade the
routes use (`services.products`) and the start-up step that resumes open runs.

Needs `services.generation` (generation feature: the job facade, files, catalog) and, at
use time, `services.balances` (billing). Attaches after both (features attach in name
order), and its recovery runs after the job recovery.
"""

from __future__ import annotations

from service.actors.runs import Products


def attach(services) -> None:
    products = Products(services)
    services.products = products
    services.runs = products.runs
    services.registries.append(products.runs)
    services.recoveries.append(products.recover)

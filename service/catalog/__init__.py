"""Capabilities, models, prices per tier, products: data and rules, no I/O beyond reading the catalog file.

    capabilities.py   the eight capabilities (code: fixed by the API)
    schema.py         the operator's TOML catalog, checked strictly
    catalog.py        Catalog, load_catalog(), the capabilities and models views
    engines.py        the `[models.engine]` table classes (which backends are engines: the
                      engines table, service/engines/table.py, passed to load_catalog)
    assets.py         what counts as one of our assets in a request
    request.py        SubmitRequest (a submit as given) and JobSettings (as checked, stored)
    rules.py          plan_submit() / estimate(): submit rules in the spec's order
    product_types.py  Product, Input, Step and the declarative step params
    product_defs.py   the built-in products and their versions
    product_inputs.py validate_run_inputs()
    products.py       the versioned registry, availability, estimates, views
"""

from .assets import AssetInfo, parse_asset_ref
from .catalog import Catalog, CatalogError, Model, load_catalog, loads_catalog
from .request import JobSettings, SubmitRequest
from .rules import Plan, estimate, plan_submit

__all__ = [
    "AssetInfo", "Catalog", "CatalogError", "JobSettings", "Model", "Plan", "SubmitRequest",
    "estimate", "load_catalog", "loads_catalog", "parse_asset_ref", "plan_submit",
]

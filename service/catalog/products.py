"""Products: the versioned registry, what a product costs, whether it can run, and its view.

A run pins `product_by_version(slug, version)` when it starts and reads only
that definition until it ends; new runs always get the latest version
(`product(slug)`). `REGISTRY` is read at call time, so a test may swap it.

Availability is decided per capability step, with the catalog and the
backends present: the step's model (or, when the step names none, the
capability's first runnable model) must exist, run here, offer the tier the
step asks for and have a price for it. One reason per blocked step.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Formatter
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from service.errors import Unavailable
from service.money import fmt

from .catalog import Catalog, Model, Runnable, tier_label
from .product_defs import BUILTIN
from .product_inputs import validate_run_inputs
from .product_types import FromInput, FromStep, Product, Step, Template, TextOf

if TYPE_CHECKING:  # the shapes read the catalog's names: imported for mypy only
    from service.views import catalog_shapes as shapes

__all__ = [
    "REGISTRY", "ProductRegistry", "Availability", "availability", "list_products", "product",
    "product_by_version", "product_view", "ready_steps", "require_available", "run_outputs",
    "step_body", "default_values", "validate_run_inputs",
]


class ProductRegistry:
    """Every published version of every product; versions only go up."""

    def __init__(self, products: Iterable[Product] = ()) -> None:
        self._versions: dict[str, dict[int, Product]] = {}
        for p in products:
            self.add(p)

    def add(self, p: Product) -> None:
        versions = self._versions.setdefault(p.slug, {})
        if versions and p.version <= max(versions):
            raise ValueError(f"{p.slug}: version {p.version} is not above {max(versions)}")
        if p.base is not None and self.by_version(p.base, p.base_version or 0) is None:
            raise ValueError(f"{p.slug}: base {p.base} v{p.base_version} is not registered")
        versions[p.version] = p

    def latest(self, slug: str) -> Product | None:
        versions = self._versions.get(slug)
        return versions[max(versions)] if versions else None

    def by_version(self, slug: str, version: int) -> Product | None:
        return self._versions.get(slug, {}).get(version)

    def products(self, category: str | None = None) -> list[Product]:
        """Latest version of each product, in the order they were first published."""
        latest = [self.latest(slug) for slug in self._versions]
        return [p for p in latest if p is not None and category in (None, p.category)]


REGISTRY = ProductRegistry(BUILTIN)


def list_products(category: str | None = None) -> list[Product]:
    return REGISTRY.products(category)


def product(slug: str) -> Product | None:
    """The version a new run starts on."""
    return REGISTRY.latest(slug)


def product_by_version(slug: str, version: int) -> Product | None:
    """The exact definition a run pinned when it started."""
    return REGISTRY.by_version(slug, version)


def default_values(p: Product) -> dict[str, Any]:
    """Effective values when every input is left out: defaults (or None) plus fixed values."""
    return {**{name: inp.default for name, inp in p.inputs.items()}, **p.fixed}


@dataclass(frozen=True)
class Availability:
    reasons: tuple[str, ...]
    price_uc: int | None  # total of the capability steps; None when a step is blocked

    @property
    def available(self) -> bool:
        return not self.reasons


def availability(p: Product, catalog: Catalog, runnable: Runnable, values: Mapping[str, Any] | None = None) -> Availability:
    """Whether the product can run with these values (default: its defaults), and its price."""
    values = default_values(p) if values is None else values
    reasons, total = [], 0
    for s in p.steps:
        if s.capability is None:
            continue
        reason, price = _step_price(s, catalog, runnable, values)
        if reason:
            reasons.append(f"step '{s.key}': {reason}")
        else:
            total += price
    return Availability(tuple(reasons), None if reasons else total)


def require_available(p: Product, catalog: Catalog, runnable: Runnable, values: Mapping[str, Any]) -> int:
    """The run's estimate in micro-credits, or 503 with `details.product` and `details.reasons`."""
    a = availability(p, catalog, runnable, values)
    if not a.available:
        raise Unavailable(
            f"Product {p.slug} is not available on this deployment.",
            {"product": p.slug, "reasons": list(a.reasons)},
        )
    return a.price_uc  # type: ignore[return-value]


def product_view(p: Product, catalog: Catalog, runnable: Runnable, values: Mapping[str, Any] | None = None
                 ) -> shapes.Product:
    """The spec's Product object; `available`, `unavailable_reasons` and
    `credits_estimate` are computed for `values` (default: the input defaults).

    Steps: `{key, capability, op, model, needs}`; inputs: `{name: {type,
    label, description, required, default, options, hidden}}` without a
    preset's fixed inputs; outputs: the output names.
    """
    a = availability(p, catalog, runnable, values)
    return {
        "slug": p.slug,
        "name": p.name,
        "category": p.category,
        "kind": p.kind,
        "description": p.description,
        "thumbnail_url": p.thumbnail_url,
        "version": p.version,
        "base": p.base,
        "inputs": {name: inp.view() for name, inp in p.inputs.items()},
        "outputs": list(p.outputs),
        "steps": [s.view() for s in p.steps],
        "available": a.available,
        "unavailable_reasons": list(a.reasons),
        "credits_estimate": fmt(a.price_uc),
    }


def _step_price(s: Step, catalog: Catalog, runnable: Runnable, values: Mapping[str, Any]) -> tuple[str | None, int]:
    cap = s.capability
    m: Model | None
    if s.model is None:
        models = catalog.models_for(cap)  # type: ignore[arg-type]
        if not models:
            return f"no model implements {cap} yet", 0
        m = next((x for x in models if runnable(x)), models[0])
    else:
        m = catalog.model(s.model)
        if m is None or m.capability != cap:
            return f"model {s.model} is not in the catalog", 0
    if not runnable(m):
        return f"model {m.id} is not available on this deployment", 0
    resolution, duration = _tier(s, m, values)
    tier = tier_label(resolution, duration)
    if resolution not in m.resolutions or (duration is not None and duration not in m.durations):
        return f"model {m.id} does not offer {tier}", 0
    price = m.price_uc(resolution, duration)
    if price is None:
        return f"model {m.id} has no price for {tier}", 0
    return None, price


def _tier(s: Step, m: Model, values: Mapping[str, Any]) -> tuple[Any, Any]:
    resolution = _resolve(s.params.get("resolution"), values, None, None)
    duration = _resolve(s.params.get("duration"), values, None, None)
    if resolution is None:
        resolution = m.resolutions[0]
    if duration is None and m.durations:
        duration = m.durations[0]
    return resolution, duration


def step_body(
    s: Step,
    values: Mapping[str, Any],
    outputs: Mapping[str, list[str]],
    texts: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A step's resolved params: a submit body for a capability step (plus `model`
    when the step names one), the op's arguments for an op step.

    `outputs` maps finished step keys to their asset ids; `texts` maps finished
    text steps to their text. Params that resolve to None are left out.
    """
    body = {k: _resolve(v, values, outputs, texts) for k, v in s.params.items()}
    if isinstance(body.get("inputs"), dict):  # a slot fed by one asset input gets a list
        body["inputs"] = {k: [v] if isinstance(v, str) else v for k, v in body["inputs"].items()}
    if s.model is not None:
        body["model"] = s.model
    return {k: v for k, v in body.items() if v is not None}


def _resolve(v: Any, values, outputs, texts) -> Any:
    if isinstance(v, FromInput):
        return values.get(v.name)
    if isinstance(v, FromStep):
        return None if outputs is None else list(outputs[v.key])
    if isinstance(v, TextOf):
        return None if texts is None else texts[v.key]
    if isinstance(v, Template):
        return Formatter().vformat(v.text, (), {n: values.get(n) for n in v.names()})
    if isinstance(v, Mapping):
        return {k: _resolve(x, values, outputs, texts) for k, x in v.items()}
    return v


def ready_steps(p: Product, done: set[str], started: set[str]) -> list[Step]:
    """Steps not yet started whose needs are all done; they may run at the same time."""
    return [s for s in p.steps if s.key not in started and set(s.needs) <= done]


def run_outputs(p: Product, step_outputs: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """The run's named outputs from its steps' outputs."""
    return {name: list(step_outputs.get(key, [])) for name, key in p.outputs.items()}

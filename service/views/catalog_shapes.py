"""Response shapes of the catalog's views: capabilities, models, the generation estimate, the
asset URL and products (spec "Capabilities", "Models", "Product").

Here, below http, because their builders (service/catalog: catalog.py, rules.py,
products.py, product_types.py) return them and mypy holds each builder to its shape; the
catalog imports them for type checking only (this module reads the catalog's names).
service/http/responses re-exports them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from service.catalog.capabilities import ASPECT_RATIOS
from service.catalog.product_types import CATEGORIES, KINDS
from service.views.shapes import AssetKind, CapabilityId, Credits, known

__all__ = ["Estimate", "CapabilitySlot", "ModelSlot", "Price", "Offering", "Capability", "ModelCapability",
           "ModelQueue", "Model", "AssetUrl", "ProductInput", "ProductStep", "Product"]


class Estimate(TypedDict):
    capability: CapabilityId
    model: str
    resolution: str | None
    duration: int | float | None
    credits: Credits
    tier: str


class CapabilitySlot(TypedDict):
    name: str
    kinds: list[AssetKind]
    min: int
    max: int
    required: bool  # min > 0: every model of the capability needs this slot filled


class ModelSlot(TypedDict):
    name: str
    kinds: list[AssetKind]
    count: int
    required: bool  # count > 0: a submit to this model without it is refused (422)


class Price(TypedDict):
    resolution: str
    duration: int | None
    credits: Credits


class Offering(TypedDict):
    id: str
    description: str | None
    available: bool
    resolutions: list[str]
    durations: list[int]
    inputs: list[ModelSlot]
    prices: list[Price]


class Capability(TypedDict):
    id: CapabilityId
    description: str
    output: AssetKind | None
    prompt_required: bool
    prompt_meaning: str
    inputs: list[CapabilitySlot]
    aspect_ratios: list[Annotated[str, known(ASPECT_RATIOS, "aspect ratio")]]
    models: list[Offering]


class ModelCapability(TypedDict):
    id: CapabilityId
    prices: list[Price]


class ModelQueue(TypedDict):
    """How busy an engine model is (additive: only engine-backed models carry it)."""

    queued: Annotated[int, Field(ge=0, description="Jobs waiting to start (for a slot or a live server).")]
    running: Annotated[int, Field(ge=0, description="Jobs running on the model's servers now.")]
    servers_up: Annotated[int | None, Field(
        ge=0, description="Servers answering their health check; null for a hosted API.")]
    servers_down: Annotated[int | None, Field(ge=0, description="Servers known down; null for a hosted API.")]
    time_to_start_p50_s: Annotated[float | None, Field(
        ge=0, description="Median seconds from submit to rendering of recent jobs; null before the first.")]


class Model(TypedDict):
    """`queue` is sent only for engine-backed models (additive): jobs waiting and running,
    servers up and down, median time to start."""

    id: str
    description: str | None
    available: bool
    capabilities: list[ModelCapability]
    queue: NotRequired[ModelQueue]


class AssetUrl(TypedDict):
    url: str
    expires_in: Literal[900]


class ProductInput(TypedDict):
    type: str
    label: str
    description: str | None
    required: bool
    default: Any
    options: list[str]
    hidden: bool


class ProductStep(TypedDict):
    key: str
    capability: CapabilityId | None
    op: str | None
    model: str | None
    needs: Annotated[list[str], Field(description="Keys of the steps this one reads from.")]


class Product(TypedDict):
    slug: str
    name: str
    category: Annotated[str, known(CATEGORIES, "category")]
    kind: Annotated[str, known(KINDS, "kind")]
    description: str
    thumbnail_url: str | None
    version: int
    base: str | None
    inputs: dict[str, ProductInput]
    outputs: list[str]
    steps: list[ProductStep]
    available: bool
    unavailable_reasons: list[str]
    credits_estimate: Credits | None

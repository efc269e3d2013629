"""Response shapes of products (spec "Product"), built by service/catalog/products.py. The
ProductRun and the merged `GET /v1/runs` feed are service/views/shapes.py's, re-exported here."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict

from service.catalog.product_types import CATEGORIES, KINDS
from service.views.shapes import CapabilityId, Credits, FeedItem, FeedJob, FeedRun, ProductRun, RunsPage, RunStep, known

__all__ = ["FeedItem", "FeedJob", "FeedRun", "ProductRun", "RunsPage", "RunStep", "ProductInput", "ProductStep",
           "Product"]


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

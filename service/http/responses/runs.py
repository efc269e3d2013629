"""Response shapes of products, runs and the merged `GET /v1/runs` feed (spec "Product",
"Product run"). Built by service/catalog/products.py and service/views/runs.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field

from service.catalog.product_types import CATEGORIES, KINDS
from service.machines import RUN, STEP

from .generation import AssetOutput, CapabilityId, CreditsPair, JobStatus
from .types import Credits, Shape, Timestamp, Uuid, known, sorted_states


class ProductInput(Shape):
    type: str
    label: str
    description: str | None
    required: bool
    default: Any
    options: list[str]
    hidden: bool


class ProductStep(Shape):
    key: str
    capability: CapabilityId | None
    op: str | None
    model: str | None
    needs: list[str] = Field(description="Keys of the steps this one reads from.")


class Product(Shape):
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


class RunStep(Shape):
    """`started_at` and `finished_at` (beyond the spec) show the steps that ran at once."""

    key: str
    capability: CapabilityId | None
    op: str | None
    model: str | None
    status: Annotated[str, known(sorted_states(STEP), "step status")]
    request_id: Uuid | None
    outputs: list[AssetOutput]
    error: str | None
    started_at: Timestamp | None
    finished_at: Timestamp | None


class ProductRun(Shape):
    id: Uuid
    status: Annotated[str, known(sorted_states(RUN), "run status")]
    product: str
    product_version: int
    project_id: Uuid
    inputs: dict[str, Any]
    steps: list[RunStep]
    outputs: dict[str, list[AssetOutput]]
    credits: CreditsPair
    error: str | None
    status_url: str
    cancel_url: str
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None


class FeedJob(JobStatus):
    """A standalone job in `GET /v1/runs`: the job status object with `type` and `id`."""

    type: Literal["job"]
    id: Uuid


class FeedRun(ProductRun):
    """A product run in `GET /v1/runs`: the ProductRun with `type` and `source`."""

    type: Literal["run"]
    source: Literal["workflow"]


FeedItem = Annotated[Union[FeedJob, FeedRun], Field(discriminator="type")]


class RunsPage(Shape):
    items: list[FeedItem]
    total: int
    next_cursor: str | None

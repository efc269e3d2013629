"""Products: the list, one product, an estimate for given inputs, and run start
(spec "Products and runs").

Decisions where the spec is open:
- Run start checks, in this order: product (404 `request.not_found`), project (404 unknown,
  409 archived), body (400), inputs (422 `request.validation_failed`, the input's name in
  `details.input`), availability for those inputs (503 `request.service_unavailable`,
  details `product`, `reasons`), balance covers the whole estimate (402
  `billing.insufficient_credits`, details `required`, `available`; nothing reserved), the
  key's and project's spend limits (402), fewer than `max_active_jobs_per_org` of the organization's runs queued or
  running (429 `request.rate_limited`, details `open_runs_limit`, Retry-After 5).
- `inputs` is required in both bodies (an empty object is fine for the body check; the
  product's required inputs then give a 422).
- The estimate answers the product view with `available`, `unavailable_reasons` and
  `credits_estimate` for the given inputs; an unavailable product is answered (200,
  `available: false`, `credits_estimate: null`), not refused. It resolves the project like
  a read (an archived project is fine) because asset inputs must be in it.
- `GET /v1/workflows/products?category=` takes `image`, `video` or `audio`; anything else is
  400 `request.bad_request`.
- Beyond the spec: an optional `Idempotency-Key` header on run start, with the rules of the
  job submit routes (same key + same request within 24 h answers the first 202 and starts
  no second run; the same key with another request is 422).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from quart import Blueprint, request
from quart_schema import document_headers

from service.http.auth import principal, requires, resolve_project, node
from service.http.idempotency import IdempotencyHeaders, idempotency_key
from service.catalog.product_types import CATEGORIES
from service.http.schemas import STR, Body, Query, body, documented, nullable, query
from service.idempotency import request_hash
from service.http.responses import Data, Product
from service.views.shapes import ProductRun

bp = Blueprint("products", __name__)




class ProductsQuery(Query):
    category: Literal["image", "video", "audio"] | None = documented({"enum": list(CATEGORIES)}, None)


class RunBody(Body):
    inputs: dict[str, Any] = Field(description="Input name -> value (see the product's `inputs`).")
    project_id: str | None = documented(nullable(STR), None, "Project id or slug.")


def products():
    return node().products



@bp.get("/v1/workflows/products")
@requires("generation:read")
@query(ProductsQuery)
async def list_products(q: ProductsQuery) -> Data[list[Product]]:
    """Every product at its latest version (optionally one category); not paginated."""
    from service.catalog.products import list_products as all_products

    pr = products()
    return {"data": [pr.product_view(p) for p in all_products(q.category)]}


@bp.get("/v1/workflows/products/<slug>")
@requires("generation:read")
async def get_product(slug: str) -> Data[Product]:
    pr = products()
    return {"data": pr.product_view(pr.product_or_404(slug))}


@bp.post("/v1/workflows/products/<slug>/estimate")
@requires("generation:read")
@body(RunBody)
async def estimate_product(slug: str, data: RunBody) -> Data[Product]:
    """The product with `available`, `unavailable_reasons` and `credits_estimate` for these inputs."""
    pr = products()
    pr.product_or_404(slug)
    project = resolve_project(data.project_id)
    return {"data": pr.estimate(slug, principal().org_id, project["id"], data.inputs)}


@bp.post("/v1/workflows/products/<slug>/runs")
@requires("generation:write")
@document_headers(IdempotencyHeaders)
@body(RunBody)
async def start_run(slug: str, data: RunBody) -> tuple[Data[ProductRun], int]:
    """Start a run: 202 `{data: ProductRun}` in status `queued`."""
    pr = products()
    pr.product_or_404(slug)
    p = principal()
    project = resolve_project(data.project_id, write=True)
    key = idempotency_key()
    digest = None
    if key is not None:
        digest = request_hash({"product": slug, "body": data.model_dump(exclude_unset=True),
                               "project": request.headers.get("X-Service-Project")})
    view = await pr.start(p.org_id, p.user_id, slug, data.inputs, project, idempotency_key=key,
                          request_hash=digest, api_key_id=p.key_id)
    return {"data": view}, 202

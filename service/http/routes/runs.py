"""Product runs: one run, the project's runs, cancel, and the merged `GET /v1/runs` feed.

Decisions where the spec is open:
- `GET /v1/workflows/runs/{id}` and its cancel find the run in any project of the
  organization (as job status reads do); another organization's run is 404.
- `GET /v1/workflows/runs`: `limit` default 50, clamped to 1..200; `product` filters by
  slug (an unknown slug gives an empty list); newest first; the resolved project
  (`project_id` query, else X-Service-Project, else the default project).
- `GET /v1/runs`: `limit` default 50, clamped to 1..200; `project` (id or slug; else
  X-Service-Project, else the default project; unknown -> 404); `source` one of `api`,
  `studio`, `workflow` (anything else 400 `request.bad_request`); `cursor` signed, a
  cursor the endpoint did not produce is 422 "Invalid cursor". Row shapes: `{type: "job",
  id, ...job status object}` and `{type: "run", id, source: "workflow", ...ProductRun}`
  (see service/views/runs.py).
"""

from __future__ import annotations


from pydantic import Field
from quart import Blueprint

from service.views import run_feed
from service.views.shapes import SOURCES, ProductRun, RunsPage, SourceName
from service.http.responses import Data
from service.http.auth import principal, requires, resolve_project, node
from service.http.schemas import LIMIT, Query, clamp, documented, query

bp = Blueprint("runs", __name__)

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


class RunsQuery(Query):
    limit: int | None = documented(LIMIT, None, "Default 50; clamped to 1..200.")
    product: str | None = Field(default=None, description="Product slug.")
    project_id: str | None = Field(default=None, description="Project id or slug (else "
                                   "X-Service-Project, else the default project).")


class FeedQuery(Query):
    limit: int | None = documented(LIMIT, None, "Default 50; clamped to 1..200.")
    source: SourceName | None = documented(
        {"enum": list(SOURCES)}, None, "api or studio: standalone jobs submitted that way; workflow: product runs "
                                       "only. Omit for everything.")
    cursor: str | None = Field(default=None, description="The previous page's next_cursor.")
    project: str | None = Field(default=None, description="Project id or slug; default: the default project.")


def products():
    return node().products


@bp.get("/v1/workflows/runs/<run_id>")
@requires("generation:read")
async def get_run(run_id: str) -> Data[ProductRun]:
    return {"data": products().get(principal().org_id, run_id)}


@bp.get("/v1/workflows/runs")
@requires("generation:read")
@query(RunsQuery)
async def list_runs(q: RunsQuery) -> Data[list[ProductRun]]:
    project = resolve_project(q.project_id)
    limit = clamp(q.limit, DEFAULT_LIMIT, 1, MAX_LIMIT)
    return {"data": products().list_runs(project["id"], limit, q.product)}


@bp.post("/v1/workflows/runs/<run_id>/cancel")
@requires("generation:write")
async def cancel_run(run_id: str) -> Data[ProductRun]:
    return {"data": await products().cancel(principal().org_id, run_id)}


@bp.get("/v1/runs")
@requires("generation:read")
@query(FeedQuery)
async def runs_feed(q: FeedQuery) -> Data[RunsPage]:
    """Standalone jobs and product runs of a project, newest first, cursor-paged.

    `{data: {items, total, next_cursor}}`. Each item is one of
    `{type: "job", id, ...the job status object}` (a standalone job; `source` api or studio)
    and `{type: "run", id, source: "workflow", ...the ProductRun}` (a product run; its step
    jobs appear inside its `steps`, never as rows). Both carry `status` and `created_at`.
    `total` counts the rows matching `source` over all pages; `next_cursor` is null when
    the page has fewer than `limit` rows (set when exactly full; the next page may be
    empty). A cursor this endpoint did not produce is 422 "Invalid cursor".
    """
    project = resolve_project(q.project)
    limit = clamp(q.limit, DEFAULT_LIMIT, 1, MAX_LIMIT)
    return {"data": run_feed.page(products(), project["id"], q.source, limit, q.cursor)}

"""Projects: list, get, create, update, archive (spec "Projects"; operations.md), with the
spend-limit fields of operations.md "Spend limits" (`monthly_spend_limit`, `month_spent`)."""

from __future__ import annotations

from pydantic import ConfigDict
from quart import Blueprint

from service.actors.accounts.actor import PROJECT_DESCRIPTION_MAX, PROJECT_ID_SHAPE, PROJECT_NAME_MAX
from service.credits.limits import parse_limit
from service.errors import NotFound, Unprocessable
from service.http.auth import node, principal, requires
from service.http.responses import Data
from service.http.schemas import (
    SLUG,
    SPEND_LIMIT,
    STR,
    Body,
    body,
    documented,
    non_blank,
    nullable,
)
from service.storage import accounts as sql
from service.views import spend
from service.views.shapes import Project

bp = Blueprint("projects", __name__)

DESCRIPTION = {**STR, "maxLength": PROJECT_DESCRIPTION_MAX}
SLUG_LOOKS_LIKE_ID = "slug must not look like a project id."


def refuse_id_shaped_slug(slug: object) -> None:
    """Routes take a project by id or slug (paths, `project_id`, X-Service-Project): a slug
    written like an id could name another project of the organization, so it is refused (422,
    as other bad slugs are)."""
    if isinstance(slug, str) and PROJECT_ID_SHAPE.match(slug):
        raise Unprocessable(SLUG_LOOKS_LIKE_ID, {"slug": slug})


class ProjectCreate(Body):
    # a missing name parses (the route answers 422 'name is required.'); the document says required
    model_config = ConfigDict(json_schema_extra={"required": ["name"]})

    name: str | None = documented(non_blank(PROJECT_NAME_MAX), None, "Required (422 'name is required.' when empty).")
    slug: str | None = documented(nullable(SLUG), None)
    description: str | None = documented(nullable(DESCRIPTION), None)


class ProjectUpdate(Body):
    name: str | None = documented(non_blank(PROJECT_NAME_MAX), None)
    slug: str | None = documented(SLUG, None)
    description: str | None = documented(nullable(DESCRIPTION), None)
    monthly_spend_limit: str | None = documented(SPEND_LIMIT, None, "Credits per UTC month; null: none.")


def _views(rows: list[dict]) -> list[Project]:
    svc = node()
    return spend.projects(svc.store, principal().org_id, rows, svc.clock.now())


@bp.get("/v1/projects")
@requires("projects:read")
async def list_projects() -> Data[list[Project]]:
    return {"data": _views(sql.list_projects(node().store, principal().org_id))}


@bp.get("/v1/projects/<project_id>")
@requires("projects:read")
async def get_project(project_id: str) -> Data[Project]:
    row = sql.get_project(node().store, principal().org_id, project_id)
    if row is None:
        raise NotFound("Project not found.")
    return {"data": _views([row])[0]}


@bp.post("/v1/projects")
@requires("projects:write")
@body(ProjectCreate)
async def create_project(data: ProjectCreate) -> tuple[Data[Project], int]:
    p = principal()
    refuse_id_shaped_slug(data.slug)
    row = await node().accounts.create_project(p.org_id, p.user_id, data.name or "", data.slug, data.description)
    return {"data": _views([row])[0]}, 201


@bp.patch("/v1/projects/<project_id>")
@requires("projects:write")
@body(ProjectUpdate)
async def update_project(project_id: str, data: ProjectUpdate) -> Data[Project]:
    fields = data.model_dump(exclude_unset=True)
    refuse_id_shaped_slug(fields.get("slug"))
    setting = "monthly_spend_limit" in fields
    limit = parse_limit(fields.pop("monthly_spend_limit", None), "monthly_spend_limit")
    org_id = principal().org_id
    row = await node().accounts.update_project(org_id, project_id, fields)
    if setting:
        await node().balances.limit_put(org_id, "project", row["id"], limit)
    return {"data": _views([row])[0]}


@bp.post("/v1/projects/<project_id>/archive")
@requires("projects:write")
async def archive_project(project_id: str) -> Data[Project]:
    row = await node().accounts.archive_project(principal().org_id, project_id)
    return {"data": _views([row])[0]}

"""Projects in the dashboard: the header's switcher (`POST /projects/switch`) and the
Projects page: list (Default first), create and archive where the role allows
(`projects:write`), through the same accounts actor as `POST /v1/projects`; each project's
spend this month against its monthly limit, which owners and admins set there.

The chosen project is kept in a plain cookie (`gs_project`, an id: not a secret, checked
against the organization on every page)."""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.credits.limits import parse_limit
from service.errors import ApiError
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page, safe_next, set_cookie
from service.http.dashboard import PROJECT_COOKIE, show
from service.http.routes.projects import refuse_id_shaped_slug
from service.storage import accounts as sql
from service.views import spend

bp = Blueprint("dash_projects", __name__)

YEAR = 365 * 86400


@bp.post("/projects/switch")
@hide
@page("projects:read")
@csrf_protected
async def switch():
    form = await request.form
    row = sql.get_project(node().store, principal().org_id, form.get("project", ""))
    resp = redirect(safe_next(form.get("next")), 303)
    if row is not None and not row["is_archived"]:
        set_cookie(resp, PROJECT_COOKIE, row["id"], YEAR)
    return resp


@bp.get("/projects")
@hide
@page("projects:read")
async def projects_page():
    return projects_view()


def projects_view(status: int = 200, **ctx):
    """The page with every project's spend-limit fields (`spend[id]`)."""
    svc, org_id = node(), principal().org_id
    figures = spend.project_figures(svc.store, org_id, [r["id"] for r in sql.list_projects(svc.store, org_id)],
                                    svc.clock.now())
    return show("projects.html", status, title="Projects", spend=figures, **ctx)


@bp.post("/projects/<project_id>/limit")
@hide
@page("projects:write")
@csrf_protected
async def set_limit(project_id: str):
    """The monthly spend limit (empty: none), as `PATCH /v1/projects/{id}` sets it."""
    p = principal()
    try:
        limit = parse_limit((await request.form).get("limit", "").strip() or None, "monthly_spend_limit")
        row = await node().accounts.update_project(p.org_id, project_id, {})
        await node().balances.limit_put(p.org_id, "project", row["id"], limit)
    except ApiError as e:
        return projects_view(e.status, error=e.message)
    forms.notify("Spend limit saved.")
    return redirect("/projects", 303)


@bp.post("/projects")
@hide
@page("projects:write")
@csrf_protected
async def create():
    form = await request.form
    return await forms.once(form, lambda: create_project(form), "/projects")


async def create_project(form):
    p = principal()
    slug = form.get("slug", "").strip() or None
    try:
        refuse_id_shaped_slug(slug)
        row = await node().accounts.create_project(p.org_id, p.user_id, form.get("name", "").strip(), slug)
    except ApiError as e:
        return projects_view(e.status, error=e.message)
    forms.notify(f"Project {row['name']} created; new work goes into it.")
    resp = redirect("/projects", 303)
    set_cookie(resp, PROJECT_COOKIE, row["id"], YEAR)
    return resp


@bp.post("/projects/<project_id>/archive")
@hide
@page("projects:write")
@csrf_protected
async def archive(project_id: str):
    try:
        await node().accounts.archive_project(principal().org_id, project_id)
    except ApiError as e:
        return projects_view(e.status, error=e.message)
    forms.notify("Project archived.")
    return redirect("/projects", 303)

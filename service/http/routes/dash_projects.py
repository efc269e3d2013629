"""Projects in the dashboard: the header's switcher (`POST /projects/switch`) and the
Projects page: list (Default first), create and archive where the role allows
(`projects:write`), through the same accounts actor as `POST /v1/projects`.

The chosen project is kept in a plain cookie (`gs_project`, an id: not a secret, checked
against the organization on every page)."""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.errors import ApiError
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page, safe_next, set_cookie
from service.http.dashboard import PROJECT_COOKIE, show
from service.storage import accounts as sql

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
    return show("projects.html", title="Projects")


@bp.post("/projects")
@hide
@page("projects:write")
@csrf_protected
async def create():
    form = await request.form
    return await forms.once(form, lambda: create_project(form), "/projects")


async def create_project(form):
    p = principal()
    try:
        row = await node().accounts.create_project(p.org_id, p.user_id, form.get("name", "").strip(),
                                                   form.get("slug", "").strip() or None)
    except ApiError as e:
        return show("projects.html", e.status, title="Projects", error=e.message)
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
        return show("projects.html", e.status, title="Projects", error=e.message)
    forms.notify("Project archived.")
    return redirect("/projects", 303)

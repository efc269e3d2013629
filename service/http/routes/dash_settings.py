"""Organization settings (`/settings`, `orgs:update`): the name, and the sign-up and
approval state shown (sign-up is a node setting; approval is the operator's)."""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.errors import ApiError
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import show
from service.storage import accounts as accounts_sql

bp = Blueprint("dash_settings", __name__)


def settings_page(status: int = 200, **ctx):
    svc = node()
    org = accounts_sql.get_org(svc.store, principal().org_id)
    return show("settings.html", status, title="Organization settings", org=org,
                signup=svc.settings.signup, **ctx)


@bp.get("/settings")
@hide
@page("orgs:update")
async def settings():
    return settings_page()


@bp.post("/settings")
@hide
@page("orgs:update")
@csrf_protected
async def rename():
    try:
        await node().accounts.rename_org(principal().org_id, (await request.form).get("name", ""))
    except ApiError as e:
        return settings_page(e.status, error=e.message)
    forms.notify("Organization renamed.")
    return redirect("/settings", 303)

"""The organization switcher: `GET /organizations` lists the signed-in person's organizations,
`POST /organizations/switch` (CSRF-checked form: `organization_id`, `next`) moves their
session to another of them. A login of a person with several organizations lands here
(service/http/signin.py); the dashboard header has the same switch."""

from __future__ import annotations

from quart import Blueprint, request
from quart_schema import hide

from service.http.auth import node
from service.http.browser import csrf_protected, current_session, login_redirect, safe_next
from service.http.pages import PageError, render
from service.http.signin import enter
from service.storage import identity as identity_sql

bp = Blueprint("organizations", __name__)

NOT_A_MEMBER = "You are not a member of this organization."


@bp.get("/organizations")
@hide
async def organizations():
    s = current_session()
    if s is None:
        return login_redirect()
    rows = identity_sql.memberships(node().store, s.email)
    return render("organizations.html", title="Choose an organization", orgs=rows,
                  current=s.org_id if s.chosen else None, next_path=safe_next(request.args.get("next")))


@bp.post("/organizations/switch")
@hide
@csrf_protected
async def switch():
    s = current_session()
    if s is None:
        return login_redirect()
    form = await request.form
    row = identity_sql.membership_in(node().store, s.email, form.get("organization_id", ""))
    if row is None:
        raise PageError(404, "Not switched", NOT_A_MEMBER)
    return await enter(row["user_id"], row["organization_id"], safe_next(form.get("next")))

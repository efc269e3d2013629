"""What every dashboard page shares: the header (organization, with a switcher when the
person has several; project switcher, balance, the person's menu), the chosen project,
page-session event streams and signed file links.

The chosen project lives in the `gs_project` cookie (an id, not a secret; checked against
the organization on every read, an unknown or archived one falls back to Default). Pages
call the same facades and storage reads as the API routes, never HTTP to this node.
"""

from __future__ import annotations

from typing import Callable
from urllib.parse import urlsplit

from quart import Response, request

from service.http import forms
from service.http.auth import node, principal
from service.http.browser import SESSION_COOKIE, current_session
from service.http.pages import render
from service.roles import allows
from service.storage import accounts as accounts_sql
from service.storage import billing as billing_sql
from service.storage import identity as identity_sql
from service.storage import sessions as sessions_sql

PROJECT_COOKIE = "gs_project"

NAV = (  # (path, label, permission)
    ("/studio", "Studio", "generation:read"),
    ("/products", "Products", "generation:read"),
    ("/history", "History", "generation:read"),
    ("/assets", "Assets", "generation:read"),
    ("/keys", "API keys", "api_keys:read"),
    ("/billing", "Billing", "billing:read"),
    ("/members", "Members", "users:read"),
    ("/webhooks", "Webhooks", "webhooks:read"),
    ("/support", "Support", None),
    ("/settings", "Settings", "orgs:update"),
)


def projects() -> list[dict]:
    """The organization's projects, Default first, then by name; archived ones last."""
    rows = accounts_sql.list_projects(node().store, principal().org_id)
    return sorted(rows, key=lambda r: (not r["is_default"], bool(r["is_archived"]), r["name"].lower()))


def current_project() -> dict:
    """The project the person picked (cookie), when it is live in their organization; else Default."""
    store, org_id = node().store, principal().org_id
    chosen = request.cookies.get(PROJECT_COOKIE)
    row = accounts_sql.get_project(store, org_id, chosen) if chosen else None
    if row is None or row["is_archived"]:
        row = accounts_sql.default_project(store, org_id)
    assert row is not None  # every organization has its Default project
    return row


def can(permission: str) -> bool:
    return allows(principal().role, permission)


def show(template: str, status: int = 200, **ctx) -> Response:
    """Render a dashboard page with its header."""
    svc = node()
    p = principal()
    ctx.setdefault("project", current_project())
    balance = billing_sql.balance(svc.store, p.org_id, svc.clock.now()) if can("billing:read") else None
    nav = [(path, label) for path, label, perm in NAV if perm is None or can(perm)]
    session = current_session()
    orgs = identity_sql.memberships(svc.store, session.email) if session is not None else []
    for name, value in forms.take().items():  # what the last form post left to say (Post/Redirect/Get)
        ctx.setdefault(name, value)
    return render(template, status, projects=projects(), balance=balance, nav=nav, can=can,
                  here=request.path, orgs=orgs, form_token=forms.new_token, **ctx)


def relative(url: str) -> str:
    """A signed file URL as a path on this site: the page works whatever host it was reached by."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def signed(asset_id: str) -> str:
    return relative(node().generation.signer.url(asset_id))


def session_still_allowed(permission: str) -> Callable[[], bool]:
    """For a page's event stream: later, outside the request, is the browser's session still
    live, and does the person's role still hold `permission`?"""
    svc = node()
    digest = sessions_sql.digest(request.cookies.get(SESSION_COOKIE, ""))
    from service.actors.sessions import IDLE

    def check() -> bool:
        row = sessions_sql.session_for_auth(svc.store, digest)
        now = svc.clock.now()
        return (row is not None and bool(row["user_active"]) and now < row["expires_at"]
                and now < row["last_seen_at"] + IDLE and allows(row["role"], permission))

    return check

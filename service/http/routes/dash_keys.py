"""API keys page (`/keys`): list, create (name, optional role, optional expiry date), pause and
resume, revoke, set a spend limit (shown with what the key has spent), through the same
accounts actor and rules as `/v1/api-keys`.

A new key is shown once, in the answer to the create form (with a copy button), and never
again: the page that lists keys shows only prefixes. The answer is `no-store` like every page.
An expiry date means the key stops working at 00:00 UTC that day."""

from __future__ import annotations

from collections.abc import Awaitable

from datetime import UTC, datetime

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.clock import iso
from service.credits.limits import parse_limit
from service.errors import ApiError, Unprocessable
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import show
from service.http.routes.api_keys import limit_or_revoke
from service.roles import ROLE_BY_ID, ROLE_IDS, ROLE_NAMES, within
from service.storage import accounts as sql
from service.views import spend

bp = Blueprint("dash_keys", __name__)


def keys_page(status: int = 200, **ctx):
    p = principal()
    listed = sql.list_keys(node().store, p.org_id)
    figures = spend.key_figures(node().store, p.org_id, [r["id"] for r in listed])
    rows = [{**r, "role": ROLE_BY_ID.get(r["role_id"]) if r["role_id"] else None, **figures[r["id"]]}
            for r in listed]
    roles = [r for r in ROLE_NAMES if within(r, p.role)]
    return show("keys.html", status, title="API keys", keys=rows, roles=roles, **ctx)


@bp.get("/keys")
@hide
@page("api_keys:read")
async def keys():
    return keys_page()


def expiry(value: str) -> str | None:
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise Unprocessable("The expiry must be a date (YYYY-MM-DD).") from None
    if day <= node().clock.now():
        raise Unprocessable("expires_at must be in the future.")
    return iso(day)


@bp.post("/keys")
@hide
@page("api_keys:create")
@csrf_protected
async def create():
    form = await request.form
    return await forms.once(form, lambda: create_key(form), "/keys")


async def create_key(form):
    p = principal()
    name = form.get("name", "").strip()
    role = form.get("role", "")
    try:
        if not name:
            raise Unprocessable("name is required.")
        role_id = ROLE_IDS.get(role) if role else None
        if role and role_id is None:
            raise Unprocessable("role must be one of " + ", ".join(ROLE_NAMES) + ".")
        limit = parse_limit(form.get("spend_limit", "").strip() or None, "spend_limit")
        row = await node().accounts.create_key(p.org_id, p.user_id, p.role, name, role_id,
                                               expiry(form.get("expires", "").strip()))
        if limit is not None:
            await limit_or_revoke(p.org_id, row["id"], limit)
    except ApiError as e:
        return keys_page(e.status, error=e.message)
    forms.notify(None, created=row)  # the key itself, shown once on the page the redirect opens
    return redirect("/keys", 303)


async def change(call: Awaitable[object], done: str) -> object:
    try:
        await call
    except ApiError as e:
        return keys_page(e.status, error=e.message)
    forms.notify(done)
    return redirect("/keys", 303)


@bp.post("/keys/<key_id>/pause")
@hide
@page("api_keys:create")
@csrf_protected
async def pause(key_id: str):
    return await change(node().accounts.update_key(principal().org_id, key_id, {"is_active": 0}), "Key paused.")


@bp.post("/keys/<key_id>/resume")
@hide
@page("api_keys:create")
@csrf_protected
async def resume(key_id: str):
    return await change(node().accounts.update_key(principal().org_id, key_id, {"is_active": 1}), "Key resumed.")


@bp.post("/keys/<key_id>/limit")
@hide
@page("api_keys:create")
@csrf_protected
async def set_limit(key_id: str):
    """The key's lifetime spend limit (empty: none), as `PATCH /v1/api-keys/{id}` sets it."""
    org_id = principal().org_id

    async def put() -> None:
        limit = parse_limit((await request.form).get("limit", "").strip() or None, "spend_limit")
        row = await node().accounts.update_key(org_id, key_id, {})
        await node().balances.limit_put(org_id, "api_key", row["id"], limit)

    return await change(put(), "Spend limit saved.")


@bp.post("/keys/<key_id>/revoke")
@hide
@page("api_keys:revoke")
@csrf_protected
async def revoke(key_id: str):
    return await change(node().accounts.revoke_key(principal().org_id, key_id), "Key revoked.")

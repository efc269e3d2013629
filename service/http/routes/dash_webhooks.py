"""Webhooks page (`/webhooks`): list, create (the signing secret shown once), edit the
events, pause and resume, delete, send a test and show its result, and each webhook's
delivery log, through the same delivery actor and rules as `/v1/webhooks`."""

from __future__ import annotations

import trio
from quart import Blueprint, redirect, request
from quart_schema import hide

from service.actors import delivery
from service.senders import account_webhooks
from service.errors import ApiError
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import show
from service.http.pages import PageError
from service.http.routes.webhooks import delivery_view, view
from service.storage import webhooks as sql

bp = Blueprint("dash_webhooks", __name__)

LOG = 50


def webhooks_page(status: int = 200, **ctx):
    rows, total = sql.list_webhooks(node().store, principal().org_id, 200, 0)
    return show("webhooks.html", status, title="Webhooks", hooks=[view(r) for r in rows], total=total,
                event_names=delivery.EVENT_NAMES, **ctx)


def one(webhook_id: str) -> dict:
    """The organization's webhook, else the 404 page: an ApiError here would be answered as the
    API's JSON, since `/webhooks/` is also the prefix of the inbound API routes (pages.API_PREFIXES)."""
    row = sql.get_webhook(node().store, principal().org_id, webhook_id)
    if row is None:
        raise PageError(404, "Not found", "Webhook not found.")
    return row


def hook_page(webhook_id: str, status: int = 200, **ctx):
    hook = view(one(webhook_id))
    log = [delivery_view(r) for r in sql.list_deliveries(node().store, hook["id"], LOG)]
    return show("webhook.html", status, title="Webhook", hook=hook, log=log, event_names=delivery.EVENT_NAMES, **ctx)


@bp.get("/webhooks")
@hide
@page("webhooks:read")
async def webhooks():
    return webhooks_page()


@bp.post("/webhooks")
@hide
@page("webhooks:create")
@csrf_protected
async def create():
    form = await request.form
    return await forms.once(form, lambda: create_webhook(form), "/webhooks")


async def create_webhook(form):
    try:
        row = await node().webhook_delivery.create_webhook(
            principal().org_id, form.get("url", "").strip(), form.getlist("events"),
            form.get("description", "").strip() or None)
    except ApiError as e:
        return webhooks_page(e.status, error=e.message)
    forms.notify(None, created={**view(row), "secret": row["secret"]})  # the secret, shown once
    return redirect("/webhooks", 303)


@bp.get("/webhooks/<webhook_id>")
@hide
@page("webhooks:read")
async def webhook(webhook_id: str):
    return hook_page(webhook_id)


async def update(webhook_id: str, fields: dict):
    try:
        await node().webhook_delivery.update_webhook(principal().org_id, webhook_id, fields)
    except ApiError as e:
        return hook_page(webhook_id, e.status, error=e.message)
    forms.notify("Webhook saved.")
    return redirect(f"/webhooks/{webhook_id}", 303)


@bp.post("/webhooks/<webhook_id>/events")
@hide
@page("webhooks:update")
@csrf_protected
async def edit_events(webhook_id: str):
    return await update(webhook_id, {"events": (await request.form).getlist("events")})


@bp.post("/webhooks/<webhook_id>/pause")
@hide
@page("webhooks:update")
@csrf_protected
async def pause(webhook_id: str):
    return await update(webhook_id, {"is_active": False})


@bp.post("/webhooks/<webhook_id>/resume")
@hide
@page("webhooks:update")
@csrf_protected
async def resume(webhook_id: str):
    return await update(webhook_id, {"is_active": True})


@bp.post("/webhooks/<webhook_id>/delete")
@hide
@page("webhooks:delete")
@csrf_protected
async def delete(webhook_id: str):
    try:
        await node().webhook_delivery.delete_webhook(principal().org_id, webhook_id)
    except ApiError as e:
        return webhooks_page(e.status, error=e.message)
    forms.notify("Webhook deleted.")
    return redirect("/webhooks", 303)


@bp.post("/webhooks/<webhook_id>/test")
@hide
@page("webhooks:update")
@csrf_protected
async def send_test(webhook_id: str):
    """Send a signed webhook.test now and show what the receiver answered (waits up to 10 s)."""
    one(webhook_id)
    send, recv = trio.open_memory_channel(1)
    async with recv:
        try:
            await node().webhook_delivery.send_test(principal().org_id, webhook_id, send)
        except ApiError as e:
            return hook_page(webhook_id, e.status, error=e.message)
        outcome = None
        with trio.move_on_after(account_webhooks.TIMEOUT + 5):
            outcome = await recv.receive()
    if outcome is None:
        result = {"is_delivered": False, "status_code": None, "error": f"timed out after {account_webhooks.TIMEOUT:g} s",
                  "duration_ms": None}
    else:
        result = {"is_delivered": outcome.is_delivered, "status_code": outcome.status_code,
                  "error": outcome.error, "duration_ms": outcome.duration_ms}
    forms.notify(None, tested=result)
    return redirect(f"/webhooks/{webhook_id}", 303)

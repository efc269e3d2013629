"""Account webhooks (spec "Account webhooks", "Events"; operations.md for the test answer).

Named wrappers, not `{data}`: `{webhook}`, `{webhooks, total}`, `{events}`, and for the
delivery log (beyond the spec) `{deliveries}`. The signing secret is in the create answer
only (`webhook.secret`). Permissions as the spec's table: webhooks:read (owner, admin,
read_only), webhooks:create, webhooks:update (PATCH and test), webhooks:delete.
"""

from __future__ import annotations

import trio
from pydantic import Field
from quart import Blueprint
from werkzeug.routing import BaseConverter

from service.actors import delivery
from service.senders import account_webhooks
from service.errors import NotFound, Unprocessable
from service.http import responses as R
from service.http.auth import principal, requires, node
from service.http.schemas import LIMIT, OFFSET, Body, Query, body, clamp, documented, nullable, query
from service.storage import webhooks as sql

bp = Blueprint("webhooks", __name__)


class WebhookId(BaseConverter):
    """A webhook id segment; never `events`, so `/v1/webhooks/events` is only the static route
    (PATCH or DELETE there is a 405 with `Allow: GET, HEAD, OPTIONS`, not a webhook lookup)."""

    regex = r"(?!events(?:/|$))[^/]+"


@bp.record_once
def _converter(state) -> None:
    state.app.url_map.converters.setdefault("webhookid", WebhookId)

DEFAULT_PAGE, MAX_PAGE = 50, 200
DESCRIPTION_MAX = 2000  # as a project's: shown on every read, list and page
TEST_ROUTE_LIMIT = 20  # seconds: the test call waits up to 10 s for the receiver


DESCRIPTION = {"type": "string", "maxLength": DESCRIPTION_MAX}
EVENTS = {"type": "array", "items": {"enum": list(delivery.EVENT_NAMES)}, "minItems": 1}


class WebhookCreate(Body):
    url: str = Field(description="Absolute https URL.")
    events: list[str] = documented(EVENTS, description="Event names (GET /v1/webhooks/events).")
    description: str | None = documented(nullable(DESCRIPTION), None)


class WebhookUpdate(Body):
    url: str | None = None
    events: list[str] | None = documented(nullable(EVENTS), None)
    description: str | None = documented(nullable(DESCRIPTION), None)
    is_active: bool | None = None


class Page(Query):
    limit: int | None = documented(LIMIT, None)
    offset: int | None = documented(OFFSET, None)


class Limit(Query):
    limit: int | None = documented(LIMIT, None)


def view(row: dict) -> R.Webhook:
    import json

    events = row["events"]
    return {
        "id": row["id"], "url": row["url"],
        "events": json.loads(events) if isinstance(events, str) else list(events),
        "description": row["description"], "is_active": bool(row["is_active"]),
        "created_at": row["created_at"], "updated_at": row["updated_at"],
    }


def delivery_view(row: dict) -> R.WebhookDelivery:
    return {
        "id": row["id"], "event": row["event"], "status": row["status"],
        "created_at": row["created_at"], "sent_at": row["sent_at"], "completed_at": row["completed_at"],
        "is_delivered": row["status"] == "delivered", "status_code": row["status_code"],
        "error": row["error"], "error_class": row["error_class"], "duration_ms": row["duration_ms"],
    }


def check_description(description: str | None) -> None:
    if description is not None and len(description) > DESCRIPTION_MAX:
        raise Unprocessable(f"description must be at most {DESCRIPTION_MAX} characters.",
                            {"field": "description", "max_length": DESCRIPTION_MAX})


def _get(webhook_id: str) -> dict:
    row = sql.get_webhook(node().store, principal().org_id, webhook_id)
    if row is None:
        raise NotFound("Webhook not found.", code="webhook.not_found")
    return row


@bp.get("/v1/webhooks")
@requires("webhooks:read")
@query(Page)
async def list_webhooks(q: Page) -> R.WebhookList:
    limit = clamp(q.limit, DEFAULT_PAGE, 1, MAX_PAGE)
    offset = max(0, q.offset or 0)
    rows, total = sql.list_webhooks(node().store, principal().org_id, limit, offset)
    return {"webhooks": [view(r) for r in rows], "total": total}


@bp.get("/v1/webhooks/events")
@requires("webhooks:read")
async def list_events() -> R.EventList:
    return {"events": list(delivery.EVENT_NAMES)}


@bp.get("/v1/webhooks/<webhookid:webhook_id>")
@requires("webhooks:read")
async def get_webhook(webhook_id: str) -> R.WebhookOne:
    return {"webhook": view(_get(webhook_id))}


@bp.post("/v1/webhooks")
@requires("webhooks:create")
@body(WebhookCreate)
async def create_webhook(data: WebhookCreate) -> tuple[R.WebhookCreatedOne, int]:
    check_description(data.description)
    row = await node().webhook_delivery.create_webhook(principal().org_id, data.url, data.events, data.description)
    return {"webhook": {**view(row), "secret": row["secret"]}}, 201


@bp.patch("/v1/webhooks/<webhookid:webhook_id>")
@requires("webhooks:update")
@body(WebhookUpdate)
async def update_webhook(webhook_id: str, data: WebhookUpdate) -> R.WebhookOne:
    check_description(data.description)
    fields = data.model_dump(exclude_unset=True)
    for name in ("url", "events", "is_active"):
        if name in fields and fields[name] is None:  # explicit null: nothing to change
            del fields[name]
    row = await node().webhook_delivery.update_webhook(principal().org_id, webhook_id, fields)
    return {"webhook": view(row)}


@bp.delete("/v1/webhooks/<webhookid:webhook_id>")
@requires("webhooks:delete")
async def delete_webhook(webhook_id: str):
    await node().webhook_delivery.delete_webhook(principal().org_id, webhook_id)
    return "", 204


@bp.post("/v1/webhooks/<webhookid:webhook_id>/test")
@requires("webhooks:update", limit=TEST_ROUTE_LIMIT)
async def test_webhook(webhook_id: str) -> tuple[R.WebhookTestResult, int]:
    """Send a signed webhook.test to this webhook now (paused or not, subscribed or not) and
    report what happened within the 10 s wait."""
    send, recv = trio.open_memory_channel(1)
    async with recv:
        sent = await node().webhook_delivery.send_test(principal().org_id, webhook_id, send)
        outcome = None
        with trio.move_on_after(account_webhooks.TIMEOUT + 5):
            outcome = await recv.receive()
    delivery: R.TestDelivery
    if outcome is None:  # the sender always returns within its limit; this is a safety net
        delivery = {"id": sent["delivery_id"], "url": sent["url"], "is_delivered": False, "status_code": None,
                    "error": f"timed out after {account_webhooks.TIMEOUT:g} s", "duration_ms": None}
    else:
        delivery = {"id": sent["delivery_id"], "url": sent["url"], "is_delivered": outcome.is_delivered,
                    "status_code": outcome.status_code, "error": outcome.error, "duration_ms": outcome.duration_ms}
    return {"event": sent["event"], "data": sent["data"], "delivery": delivery}, 201


@bp.get("/v1/webhooks/<webhookid:webhook_id>/deliveries")
@requires("webhooks:read")
@query(Limit)
async def list_deliveries(webhook_id: str, q: Limit) -> R.DeliveryList:
    """Beyond the spec: the webhook's recent deliveries, newest first (default 50, max 200)."""
    hook = _get(webhook_id)
    rows = sql.list_deliveries(node().store, hook["id"], clamp(q.limit, DEFAULT_PAGE, 1, MAX_PAGE))
    return {"deliveries": [delivery_view(r) for r in rows]}

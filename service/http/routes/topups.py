"""Top-ups (spec "Billing": quote, list, create) plus Stripe's webhook, outside /v1 (the
built-in test provider's checkout page is `routes/test_checkout.py`).

Decisions where the spec is open:
- `GET /v1/billing/topups`: `limit` defaults to 50, clamped to 1..200; newest first.
- `GET /v1/billing/topups/{id}`: one top-up of the organization (404 otherwise); additive.
- `success_url` / `cancel_url`: absolute http(s) URLs without whitespace or control
  characters inside (422 otherwise: urlsplit drops tabs and newlines before parsing, and the
  URL is later a redirect's Location and the provider's parameter); they default to
  `{base_url}/billing?topup=<id>&checkout=success|cancel` (the dashboard's Billing page).
- `credits` must be a JSON integer ("500", 500.5 and true are 400s; 500.0 is 500, the
  `Body` rule for integral numbers); out of range is 422.
- The order of checks is body (400), range (422), provider configured (503
  billing.not_configured), checkout start (503 request.service_unavailable, top-up
  recorded `expired`, details.topup_id).
- `POST /webhooks/stripe` (hidden from OpenAPI): 404 unless Stripe is the provider; 503
  billing.not_configured without a webhook secret; 400 for a bad signature, a stale
  timestamp or a body that is not an event (nothing changes); otherwise 200
  `{received: true, result}` once the change is committed (result: the top-up's status,
  `ignored` or `conflict`); 404 when a paid session names a top-up this node does not know
  (Stripe retries).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field
from quart import Blueprint, request
from quart_schema import hide

from service.errors import BadRequest, NotFound, Unavailable, Unprocessable
from service.http import responses as R
from service.http.auth import principal, requires, node
from service.http.schemas import LIMIT, Body, Query, body, clamp, documented, query
from service.money import fmt
from service.payments import InvalidWebhook, facade
from service.storage import topups as sql

bp = Blueprint("topups", __name__)

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_URL = 2048
ROUTE_MISSING = "The requested resource was not found."


class TopupCreate(Body):
    credits: int = Field(description="Whole credits, between min_credits and max_credits of the quote.")
    success_url: str | None = Field(default=None, description="Where the checkout returns after payment.")
    cancel_url: str | None = Field(default=None, description="Where the checkout returns when abandoned.")


class TopupList(Query):
    limit: int | None = documented(LIMIT, None)


def topup_view(row: dict) -> R.Topup:
    return {
        "id": row["id"], "created_at": row["created_at"], "credits": fmt(row["credits_uc"]),
        "amount_cents": row["amount_cents"], "currency": row["currency"], "status": row["status"],
        "paid_at": row["paid_at"],
    }


def check_url(field: str, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:  # e.g. an unclosed IPv6 bracket: "http://["
        parts = None
    bad_char = any(c.isspace() or not c.isprintable() for c in value.strip())
    if parts is None or bad_char or parts.scheme not in ("http", "https") or not parts.netloc or len(value) > MAX_URL:
        raise Unprocessable(f"{field} must be an absolute http or https URL.", {"field": field})
    return value.strip()


@bp.get("/v1/billing/topups/quote")
@requires("billing:read")
async def get_quote() -> R.Data[R.TopupQuote]:
    return {"data": facade.quote(node()).view()}


@bp.get("/v1/billing/topups")
@requires("billing:read")
@query(TopupList)
async def list_topups(q: TopupList) -> R.Data[list[R.Topup]]:
    limit = clamp(q.limit, DEFAULT_LIMIT, 1, MAX_LIMIT)
    rows = sql.list_for_org(node().store, principal().org_id, limit)
    return {"data": [topup_view(r) for r in rows]}


@bp.get("/v1/billing/topups/<topup_id>")
@requires("billing:read")
async def get_topup(topup_id: str) -> R.Data[R.Topup]:
    row = sql.get_in_org(node().store, principal().org_id, topup_id)
    if row is None:
        raise NotFound("Top-up not found.")
    return {"data": topup_view(row)}


@bp.post("/v1/billing/topups")
@requires("billing:write")
@body(TopupCreate)
async def create_topup(data: TopupCreate) -> tuple[R.Data[R.TopupCreated], int]:
    success_url = check_url("success_url", data.success_url)
    cancel_url = check_url("cancel_url", data.cancel_url)
    p = principal()
    created = await facade.create_topup(node(), p.org_id, p.user_id, data.credits, success_url, cancel_url)
    return {"data": {"topup": topup_view(created.topup), "checkout_url": created.checkout_url}}, 201


# -- payment providers (outside /v1) ---------------------------------------------------------
@bp.post("/webhooks/stripe")
@hide
async def stripe_webhook():
    svc = node()
    provider = svc.payments
    if provider is None or provider.name != "stripe":
        raise NotFound(ROUTE_MISSING)
    if not getattr(provider, "webhook_secret", None):
        raise Unavailable("Stripe webhooks are not configured on this node.", code="billing.not_configured")
    raw = await request.get_data(cache=True, as_text=False, parse_form_data=False)
    try:
        event = provider.parse_webhook(raw, request.headers)
    except InvalidWebhook as e:
        raise BadRequest("The webhook could not be verified.", {"reason": str(e)}) from None
    result = await facade.apply_event(svc, event)
    return {"received": True, "result": result}

"""Billing: balance, ledger, holds, usage and low-balance settings (spec "Billing").

Reads go straight to SQLite (the balance actor commits before it replies) and are computed
at read time relative to the service clock; the one write, PUT settings, asks the
organization's balance actor. Credits are shown with two decimal places.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

from quart import Blueprint, request

from service.clock import iso, parse_iso
from service.errors import ActorGone, AskTimeout, BadRequest, Unavailable, Unprocessable
from service.http.auth import principal, requires, node
from service.http.responses import Balance, BillingSettings, Data, Hold, LedgerPage, UsageRow
from service.http.schemas import LIMIT, OFFSET, TS, UUID, Body, Query, body, clamp, documented, query
from service.machines import HOLD
from service.money import MAX_UC, UC, NotCredits, TooPrecise, decimal_uc, to_decimal
from service.storage import billing as sql

bp = Blueprint("billing", __name__)

# the live state first, then the final ones: "held, captured, released" in messages
HOLD_STATUSES = (*sorted(HOLD.states - HOLD.final), *sorted(HOLD.final))
PAGE_DEFAULT, PAGE_MAX = 100, 500


class LedgerQuery(Query):
    project_id: str | None = documented(UUID, None, "Project id (UUID); excludes grants and expiries.")
    since: str | None = documented(TS, None, "ISO 8601 with offset; entries at or after.")
    until: str | None = documented(TS, None, "ISO 8601 with offset; entries before.")
    limit: int | None = documented(LIMIT, None, "Default 100, clamped to 1..500.")
    offset: int | None = documented(OFFSET, None, "Default 0.")


class HoldsQuery(Query):
    status: str | None = documented({"enum": sorted(HOLD.states)}, None, "held, captured or released; omit for all.")
    limit: int | None = documented(LIMIT, None, "Default 100, clamped to 1..500.")


class UsageQuery(Query):
    since: str | None = documented(TS, None, "ISO 8601 with offset; jobs finished at or after.")


class SettingsBody(Body):
    low_balance_threshold: int | float | str | None = documented(
        {"anyOf": [{"type": "number", "minimum": 0, "maximum": MAX_UC // UC}, {"type": "string"}, {"type": "null"}]},
        description="Credits (number or decimal string, zero or more); null turns the warning off.")


def timestamp_param(name: str, value: str | None) -> str | None:
    """A query timestamp as the stored ISO form (UTC, microseconds), or 400."""
    if value is None:
        return None
    try:
        return iso(parse_iso(value))
    except (ValueError, OverflowError, OSError):
        raise BadRequest(f"{name} must be an ISO 8601 timestamp with an offset.", {name: value}) from None


def org_id() -> str:
    return principal().org_id


@bp.get("/v1/billing/balance")
@requires("billing:read")
async def get_balance() -> Data[Balance]:
    svc = node()
    return {"data": sql.balance(svc.store, org_id(), svc.clock.now())}


@bp.get("/v1/billing/ledger")
@requires("billing:read")
@query(LedgerQuery)
async def get_ledger(q: LedgerQuery) -> LedgerPage:
    if q.project_id is not None:
        try:
            uuid.UUID(q.project_id)
        except ValueError:
            raise BadRequest("project_id must be a UUID.", {"project_id": q.project_id}) from None
    since = timestamp_param("since", q.since)
    until = timestamp_param("until", q.until)
    limit = clamp(q.limit, PAGE_DEFAULT, 1, PAGE_MAX)
    offset = max(0, q.offset or 0)
    svc = node()
    try:  # every due lot expiry is in the ledger before we read it
        await svc.balances.sync(org_id(), timeout=2.0)
    except (ActorGone, AskTimeout, Unavailable):
        pass  # read what is committed rather than fail a read
    rows, total = sql.ledger(svc.store, org_id(), project_id=q.project_id, since=since, until=until,
                             limit=limit, offset=offset)
    return {"data": rows, "total": total}


@bp.get("/v1/billing/holds")
@requires("billing:read")
@query(HoldsQuery)
async def get_holds(q: HoldsQuery) -> Data[list[Hold]]:
    if q.status is not None and q.status not in HOLD_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(HOLD_STATUSES)}.", {"status": q.status})
    limit = clamp(q.limit, PAGE_DEFAULT, 1, PAGE_MAX)
    return {"data": sql.list_holds(node().store, org_id(), q.status, limit)}


@bp.get("/v1/billing/usage")
@requires("billing:read")
@query(UsageQuery)
async def get_usage(q: UsageQuery) -> Data[list[UsageRow]]:
    return {"data": sql.usage(node().store, org_id(), timestamp_param("since", q.since))}


@bp.get("/v1/billing/settings")
@requires("billing:read")
async def get_settings() -> Data[BillingSettings]:
    return {"data": sql.settings(node().store, org_id())}


def threshold_uc(raw: bytes | str) -> int | None:
    """The threshold exactly as sent: JSON numbers are re-read as decimals, never floats."""
    value = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw, parse_float=Decimal)["low_balance_threshold"]
    if value is None:
        return None
    message = "low_balance_threshold must be a number of credits."
    try:
        d = to_decimal(value)
    except NotCredits:
        raise Unprocessable(message, {"field": "low_balance_threshold"}) from None
    if d < 0:
        raise Unprocessable("low_balance_threshold cannot be negative.", {"field": "low_balance_threshold"})
    if d > Decimal(MAX_UC) / UC:
        raise Unprocessable("low_balance_threshold is too large.", {"field": "low_balance_threshold"})
    try:
        return decimal_uc(d)
    except TooPrecise:
        raise Unprocessable("low_balance_threshold takes at most two decimal places.",
                            {"field": "low_balance_threshold"}) from None


@bp.put("/v1/billing/settings")
@requires("billing:write")
@body(SettingsBody)
async def put_settings(data: SettingsBody) -> Data[BillingSettings]:
    uc = threshold_uc(await request.get_data(cache=True))
    settings: BillingSettings = await node().balances.settings_put(org_id(), uc)
    return {"data": settings}

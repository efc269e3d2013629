"""Operator routes of credits (operations.md): grants, and the test clock (test mode only)."""

from __future__ import annotations

import math
import re
from functools import wraps

import trio
from pydantic import Field
from quart import Blueprint

from service.clock import parse_iso
from service.errors import NotFound, ServiceError, Unprocessable
from service.http.auth import node
from service.http.routes.operator import operator
from service.http.schemas import Body, Timestamp, body
from service.money import bad_amount, to_uc
from service.storage import billing as sql

bp = Blueprint("operator_billing", __name__)

SOURCE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
LOT_FIELDS = ("id", "source", "amount", "remaining", "expires_at", "reason", "created_at")
REASON_MAX_CHARS = 500  # as the console's grant form: a reason is shown in ledgers and the audit log


def test_only(func):
    """Outside test mode the route answers exactly like an unknown route (404)."""

    @wraps(func)
    async def wrapper(*args, **kwargs):
        if not node().settings.test_mode:
            raise NotFound("The requested resource was not found.")
        return await func(*args, **kwargs)

    return wrapper


class GrantBody(Body):
    credits: str | int = Field(description="Decimal string of credits, more than zero, at most two places.")
    source: str = "promo"
    expires_at: Timestamp | None = Field(default=None, description="Timestamp with an offset, or null for no expiry.")
    reason: str | None = None


MAX_ADVANCE_S = 3_155_760_000  # 100 years of 365.25 days
CLOCK_END = 221_845_392_000.0  # 9000-01-01: past it the clock could leave the years an answer can write
BAD_ADVANCE = f"advance_seconds must be a number from 0 to {MAX_ADVANCE_S} (100 years)."


class ClockBody(Body):
    advance_seconds: int | float = Field(description="Seconds to move the service clock forward, 0 to "
                                         f"{MAX_ADVANCE_S} (100 years).")


def shown(value: int | float) -> int | float | None:
    """The value as the error's details can carry it (JSON has no inf, nan or 400-digit numbers)."""
    if isinstance(value, int) and abs(value) <= 2**63:
        return value
    return value if isinstance(value, float) and math.isfinite(value) else None


@bp.post("/operator/v1/organizations/<org_id>/grants")
@operator
@body(GrantBody)
async def grant(org_id: str, data: GrantBody):
    try:
        uc = to_uc(data.credits)
    except ValueError:
        uc = 0
    if bad_amount(uc, zero_ok=False):
        raise Unprocessable("credits must be a decimal number of credits above zero with at most two places.",
                            {"credits": data.credits})
    if not SOURCE_RE.match(data.source):
        raise Unprocessable("source must be 1 to 64 lowercase letters, digits, '_' or '-'.",
                            {"source": data.source})
    if data.reason is not None and len(data.reason) > REASON_MAX_CHARS:
        raise Unprocessable(f"reason must be at most {REASON_MAX_CHARS} characters; got {len(data.reason)}.",
                            {"field": "reason", "max_length": REASON_MAX_CHARS, "length": len(data.reason)})
    expires = None
    if data.expires_at is not None:
        try:
            expires = parse_iso(data.expires_at)
        except (ValueError, OverflowError):
            raise Unprocessable("expires_at must be an ISO 8601 timestamp with an offset.",
                                {"expires_at": data.expires_at}) from None
    svc = node()
    if not sql.org_exists(svc.store, org_id):
        raise NotFound("Organization not found.")
    lot = await svc.balances.grant(org_id, sql.new_id(), uc, source=data.source, expires_at=expires,
                                   reason=data.reason)
    return {"data": {k: lot[k] for k in LOT_FIELDS}}, 201


@bp.post("/operator/v1/test/clock")
@test_only
@operator
@body(ClockBody)
async def advance_clock(data: ClockBody):
    seconds = data.advance_seconds
    if not 0 <= seconds <= MAX_ADVANCE_S:  # NaN and inf too (1e400 parses as inf)
        raise Unprocessable(BAD_ADVANCE, {"advance_seconds": shown(seconds)})
    svc = node()
    if svc.clock.now() + seconds >= CLOCK_END:
        raise Unprocessable("advance_seconds would move the service clock past the year 9000.",
                            {"advance_seconds": shown(seconds)})
    svc.clock.advance(float(seconds))
    # Every balance actor has written its due lot expiries before we answer.
    balances = svc.balances

    async def sync(key: str) -> None:
        try:
            await balances.sync(key, timeout=5.0)
        except ServiceError:  # an actor that is down catches up when it is back
            pass

    keys = set(balances.keys()) | set(sql.org_ids_due(svc.store, svc.clock.now()))
    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(sync, key)
    return {"data": {"now": svc.clock.iso_now()}}

"""Response shapes of the billing routes: balance, ledger, holds, usage, settings, top-ups."""

from __future__ import annotations

from typing import Annotated
from service.machines import HOLD, TOPUP

from .types import Credits, Day, Shape, Timestamp, Uuid, known, sorted_states


class SourceRemaining(Shape):
    source: str
    remaining: Credits


class Lot(Shape):
    id: Uuid
    source: str
    amount: Credits
    remaining: Credits
    expires_at: Timestamp | None
    reason: str | None
    created_at: Timestamp


class Balance(Shape):
    organization_id: Uuid
    available: Credits
    held: Credits
    by_source: list[SourceRemaining]
    next_expiry: Timestamp | None
    next_expiry_amount: Credits | None
    lots: list[Lot]


class LedgerEntry(Shape):
    id: Uuid
    created_at: Timestamp
    kind: str
    amount: Credits
    source: str | None
    grant_id: Uuid | None
    project_id: Uuid | None
    job_id: Uuid | None
    workflow_run_id: Uuid | None
    description: str | None
    hold_id: Uuid | None


class LedgerPage(Shape):
    data: list[LedgerEntry]
    total: int


class Hold(Shape):
    id: Uuid
    job_id: Uuid | None
    workflow_run_id: Uuid | None
    project_id: Uuid | None
    status: Annotated[str, known(sorted_states(HOLD), "hold status")]
    amount: Credits
    captured: Credits | None
    created_at: Timestamp
    settled_at: Timestamp | None


class UsageRow(Shape):
    project_id: Uuid
    day: Day
    credits: Credits
    jobs: int


class BillingSettings(Shape):
    low_balance_threshold: Credits | None
    low_balance_notified_at: Timestamp | None


class TopupQuote(Shape):
    usd_per_credit: str
    min_credits: int
    max_credits: int
    expiry_days: int
    currency: str


class Topup(Shape):
    id: Uuid
    created_at: Timestamp
    credits: Credits
    amount_cents: int
    currency: str
    status: Annotated[str, known(sorted_states(TOPUP), "top-up status")]
    paid_at: Timestamp | None


class TopupCreated(Shape):
    topup: Topup
    checkout_url: str

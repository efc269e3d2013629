"""Response shapes of the billing routes: balance, ledger, holds, usage, settings, top-ups.

Here, below http, because their builders live in service/storage/billing.py and
service/payments, which return them (mypy holds each builder to its shape);
service/http/responses re-exports them."""

from __future__ import annotations

from typing import Annotated

from typing_extensions import TypedDict

from service.machines import HOLD, TOPUP
from service.views.shapes import Credits, Day, Timestamp, Uuid, known, sorted_states


class SourceRemaining(TypedDict):
    source: str
    remaining: Credits


class Lot(TypedDict):
    id: Uuid
    source: str
    amount: Credits
    remaining: Credits
    expires_at: Timestamp | None
    reason: str | None
    created_at: Timestamp


class Balance(TypedDict):
    organization_id: Uuid
    available: Credits
    held: Credits
    by_source: list[SourceRemaining]
    next_expiry: Timestamp | None
    next_expiry_amount: Credits | None
    lots: list[Lot]


class LedgerEntry(TypedDict):
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


class LedgerPage(TypedDict):
    data: list[LedgerEntry]
    total: int


class Hold(TypedDict):
    id: Uuid
    job_id: Uuid | None
    workflow_run_id: Uuid | None
    project_id: Uuid | None
    status: Annotated[str, known(sorted_states(HOLD), "hold status")]
    amount: Credits
    captured: Credits | None
    created_at: Timestamp
    settled_at: Timestamp | None


class UsageRow(TypedDict):
    project_id: Uuid
    day: Day
    credits: Credits
    jobs: int


class BillingSettings(TypedDict):
    low_balance_threshold: Credits | None
    low_balance_notified_at: Timestamp | None


class TopupQuote(TypedDict):
    usd_per_credit: str
    min_credits: int
    max_credits: int
    expiry_days: int
    currency: str


class Topup(TypedDict):
    id: Uuid
    created_at: Timestamp
    credits: Credits
    amount_cents: int
    currency: str
    status: Annotated[str, known(sorted_states(TOPUP), "top-up status")]
    paid_at: Timestamp | None


class TopupCreated(TypedDict):
    topup: Topup
    checkout_url: str

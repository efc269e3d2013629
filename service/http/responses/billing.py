"""Response shapes of the billing routes: declared in service/views/billing_shapes.py (their
builders in service/storage and service/payments return them), re-exported here."""

from __future__ import annotations

from service.views.billing_shapes import (
    Balance, BillingSettings, Hold, LedgerEntry, LedgerPage, Lot, SourceRemaining, Topup, TopupCreated, TopupQuote,
    UsageRow,
)

__all__ = ["Balance", "BillingSettings", "Hold", "LedgerEntry", "LedgerPage", "Lot", "SourceRemaining", "Topup",
           "TopupCreated", "TopupQuote", "UsageRow"]

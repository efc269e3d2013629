"""Pydantic models of every `/v1` response body: one class per shape.

The same class gives the OpenAPI document's component (service/http/openapi.py) and the
check of real answers (check.py, on in test mode). The views still build plain dicts (the
hot paths pay nothing); the check proves each dict is exactly its class: a field the view
sends and the class lacks, or the reverse, fails the request in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Data:
    """The `{"data": ...}` envelope around a shape."""

    of: Any


from .account import (  # noqa: E402  (after Data: the modules are the package's content)
    ApiKey, ApiKeyCreated, DeliveryList, EventList, Project, Role, RoleUser, Ticket, TicketWithReplies,
    Webhook, WebhookCreatedOne, WebhookDelivery, WebhookList, WebhookOne, WebhookTestResult,
)
from .billing import (  # noqa: E402
    Balance, BillingSettings, Hold, LedgerEntry, LedgerPage, Topup, TopupCreated, TopupQuote, UsageRow,
)
from .generation import (  # noqa: E402
    Asset, AssetOutput, AssetUrl, Capability, Estimate, JobStatus, Model, SubmitAccepted,
)
from .runs import FeedJob, FeedRun, Product, ProductRun, RunsPage  # noqa: E402

__all__ = [
    "Data", "ApiKey", "ApiKeyCreated", "DeliveryList", "EventList", "Project", "Role", "RoleUser", "Ticket",
    "TicketWithReplies", "Webhook", "WebhookCreatedOne", "WebhookDelivery", "WebhookList", "WebhookOne",
    "WebhookTestResult", "Balance", "BillingSettings", "Hold", "LedgerEntry", "LedgerPage", "Topup",
    "TopupCreated", "TopupQuote", "UsageRow", "Asset", "AssetOutput", "AssetUrl", "Capability", "Estimate",
    "JobStatus", "Model", "SubmitAccepted", "FeedJob", "FeedRun", "Product", "ProductRun", "RunsPage",
]

"""Every `/v1` response body: one TypedDict per shape, read by pydantic for the document.

The same class gives the OpenAPI document's component (service/http/openapi.py) and is the
type the builder returns, so mypy holds the builder to it; the answers are plain dicts (the
hot paths pay nothing). The shapes whose builders sit below http are declared there
(service/views/shapes.py, catalog_shapes.py, billing_shapes.py) and re-exported here. Every
route's return annotation names its shape (`-> Data[Project]`, `ROUTE` in
service/http/openapi_table.py), which gives the document that shape: mypy holds route,
builders and document together, with no check at run time.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from typing_extensions import TypedDict

T = TypeVar("T")


class Data(TypedDict, Generic[T]):
    """The `{"data": ...}` envelope around a shape."""

    data: T


from .account import (  # noqa: E402  (after Data: the modules are the package's content)
    ApiKey, ApiKeyCreated, DeliveryList, EventList, Project, Role, RoleUser, Ticket, TicketReply, TicketWithReplies,
    TestDelivery, Webhook, WebhookCreated, WebhookCreatedOne, WebhookDelivery, WebhookList, WebhookOne,
    WebhookTestResult,
)
from .billing import (  # noqa: E402
    Balance, BillingSettings, Hold, LedgerEntry, LedgerPage, Topup, TopupCreated, TopupQuote, UsageRow,
)
from .generation import (  # noqa: E402
    Asset, AssetOutput, AssetUrl, Capability, Estimate, JobStatus, Model, SubmitAccepted,
)
from .runs import FeedJob, FeedRun, Product, ProductRun, RunsPage  # noqa: E402

__all__ = [
    "Data", "ApiKey", "ApiKeyCreated", "DeliveryList", "EventList", "Project", "Role", "RoleUser", "Ticket", "TicketReply",
    "TicketWithReplies", "TestDelivery", "Webhook", "WebhookCreated", "WebhookCreatedOne", "WebhookDelivery", "WebhookList", "WebhookOne",
    "WebhookTestResult", "Balance", "BillingSettings", "Hold", "LedgerEntry", "LedgerPage", "Topup",
    "TopupCreated", "TopupQuote", "UsageRow", "Asset", "AssetOutput", "AssetUrl", "Capability", "Estimate",
    "JobStatus", "Model", "SubmitAccepted", "FeedJob", "FeedRun", "Product", "ProductRun", "RunsPage",
]

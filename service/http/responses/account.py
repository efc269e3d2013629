"""Response shapes of roles, account webhooks and support tickets. Projects, API keys and roles
are service/views/shapes.py's, re-exported here."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import TypedDict

from service.actors.delivery import EVENT_NAMES
from service.actors.tickets import PRIORITIES, TYPES
from service.machines import TICKET
from service.views.shapes import (
    ApiKey, ApiKeyCreated, Project, Role, RoleName, Timestamp, Uuid, known, sorted_states,
)

__all__ = ["ApiKey", "ApiKeyCreated", "Project", "RoleName", "EventName", "Role", "RoleUser", "Webhook",
           "WebhookCreated", "WebhookDelivery", "TestDelivery", "WebhookTestResult", "WebhookList", "WebhookOne",
           "WebhookCreatedOne", "DeliveryList", "EventList", "Ticket", "TicketReply", "TicketWithReplies"]

EventName = Annotated[str, known(EVENT_NAMES, "event name")]


class RoleUser(TypedDict):
    id: Uuid
    email: str
    role: RoleName
    created_at: Timestamp


class Webhook(TypedDict):
    id: Uuid
    url: str
    events: list[EventName]
    description: str | None
    is_active: bool
    created_at: Timestamp
    updated_at: Timestamp | None


class WebhookCreated(Webhook):
    secret: Annotated[str, Field(description="The signing secret; shown only here.")]


class WebhookDelivery(TypedDict):
    id: Uuid
    event: EventName
    status: str
    created_at: Timestamp
    sent_at: Timestamp | None
    completed_at: Timestamp | None
    is_delivered: bool
    status_code: int | None
    error: str | None
    error_class: str | None
    duration_ms: float | None


class TestDelivery(TypedDict):
    id: Uuid
    url: str
    is_delivered: bool
    status_code: int | None
    error: str | None
    duration_ms: float | None


class WebhookTestResult(TypedDict):
    event: Literal["webhook.test"]
    data: dict[str, Any]
    delivery: TestDelivery


class WebhookList(TypedDict):
    webhooks: list[Webhook]
    total: int


class WebhookOne(TypedDict):
    webhook: Webhook


class WebhookCreatedOne(TypedDict):
    webhook: WebhookCreated


class DeliveryList(TypedDict):
    deliveries: list[WebhookDelivery]


class EventList(TypedDict):
    events: list[EventName]


class Ticket(TypedDict):
    id: Uuid
    organization_id: Uuid
    number: int
    subject_line: str
    type: Annotated[str, known(TYPES, "ticket type")]
    priority: Annotated[str, known(PRIORITIES, "priority")]
    state: Annotated[str, known(sorted_states(TICKET), "ticket state")]
    body: str
    opened_by: Uuid | None
    opened_by_email: str | None
    created_at: Timestamp
    updated_at: Timestamp | None


class TicketReply(TypedDict):
    id: Uuid
    author_kind: str
    author: str | None
    user_id: Uuid | None
    body: str
    created_at: Timestamp


class TicketWithReplies(Ticket):
    replies: list[TicketReply]

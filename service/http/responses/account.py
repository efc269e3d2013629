"""Response shapes of projects, API keys, roles, account webhooks and support tickets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from service.actors.delivery import EVENT_NAMES
from service.actors.tickets import PRIORITIES, TYPES
from service.machines import TICKET
from service.roles import ROLE_IDS, ROLE_NAMES

from .types import Credits, Shape, Timestamp, Uuid, known, sorted_states

RoleName = Annotated[str, known(ROLE_NAMES, "role")]
EventName = Annotated[str, known(EVENT_NAMES, "event name")]


class Project(Shape):
    id: Uuid
    organization_id: Uuid
    name: str
    slug: str
    description: str | None
    is_default: bool
    is_archived: bool
    created_by: Uuid | None
    created_at: Timestamp
    updated_at: Timestamp | None
    archived_at: Timestamp | None
    monthly_spend_limit: Credits | None = Field(
        description="Credits the project may spend per UTC calendar month; null: no limit.")
    month_spent: Credits = Field(description="Credits held or captured for the project's work "
                                 "since the start of the current UTC month.")


class ApiKey(Shape):
    id: Uuid
    name: str
    key_prefix: Annotated[str, WithJsonSchema({"type": "string", "pattern": "^aak_[0-9a-f]{8}$"})]
    user_id: Uuid
    role_id: Uuid | None
    expires_at: Timestamp | None
    is_active: bool
    created_at: Timestamp
    last_used_at: Timestamp | None
    spend_limit: Credits | None = Field(description="Credits work submitted with this key may "
                                        "ever spend; null: no limit.")
    spent: Credits = Field(description="Credits held or captured for work submitted with "
                           "this key, ever.")


class ApiKeyCreated(ApiKey):
    key: Annotated[str, WithJsonSchema({"type": "string", "pattern": "^aak_[0-9a-f]{48}$",
                                        "description": "The full key; shown only here."})]


class Role(Shape):
    id: Annotated[str, known(ROLE_IDS.values(), "role id")]
    name: RoleName
    permissions: list[str]


class RoleUser(Shape):
    id: Uuid
    email: str
    role: RoleName
    created_at: Timestamp


class Webhook(Shape):
    id: Uuid
    url: str
    events: list[EventName]
    description: str | None
    is_active: bool
    created_at: Timestamp
    updated_at: Timestamp | None


class WebhookCreated(Webhook):
    secret: str = Field(description="The signing secret; shown only here.")


class WebhookDelivery(Shape):
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


class TestDelivery(Shape):
    id: Uuid
    url: str
    is_delivered: bool
    status_code: int | None
    error: str | None
    duration_ms: float | None


class WebhookTestResult(Shape):
    event: Literal["webhook.test"]
    data: dict[str, Any]
    delivery: TestDelivery


class WebhookList(Shape):
    webhooks: list[Webhook]
    total: int


class WebhookOne(Shape):
    webhook: Webhook


class WebhookCreatedOne(Shape):
    webhook: WebhookCreated


class DeliveryList(Shape):
    deliveries: list[WebhookDelivery]


class EventList(Shape):
    events: list[EventName]


class Ticket(Shape):
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


class TicketReply(Shape):
    id: Uuid
    author_kind: str
    author: str | None
    user_id: Uuid | None
    body: str
    created_at: Timestamp


class TicketWithReplies(Ticket):
    replies: list[TicketReply]

"""The delivery actor: owner of account webhooks (spec "Events"): their settings, test sends
and the sealing of their secrets. One actor per node (key `KEY`).

Deliveries themselves are sent by the shared outbox dispatcher
(service/senders/account_webhooks.py): it reads the `events` outbox that other actors write
in their own transactions. A test send (`SendTest`) bypasses its fair queue: the row is
written `sending`, the dispatcher starts the POST at once, and the outcome goes to the
caller's reply channel after it is committed.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import trio

from service.actors.runtime import Actor, Registry, on
from service.errors import NotFound, Unprocessable
from service.storage import webhooks as sql

log = logging.getLogger(__name__)

KEY = "delivery"
MAX_URL = 2048
TEST_MESSAGE = "This is a test event from genservice."

EVENT_NAMES = (
    "member.invited",
    "member.joined",
    "member.role_changed",
    "member.removed",
    "api_key.created",
    "api_key.revoked",
    "support.ticket.opened",
    "support.ticket.replied",
    "support.ticket.state_changed",
    "billing.credits_low",
    "billing.spend_limit_reached",
    "webhook.test",
)


# -- rules (pure) --------------------------------------------------------------------------------
def check_url(url: str) -> str:
    """422 webhook.invalid_url unless an absolute http(s) URL with a host and no user name or
    password; 422 webhook.insecure_url for http://. Returns the URL unchanged."""
    import httpx

    from service.net.urls import parse_url

    target = parse_url(url) if isinstance(url, str) and len(url) <= MAX_URL else None
    if target is None or url != url.strip():
        raise Unprocessable("url must be an absolute https URL with a host.", {"url": url},
                            code="webhook.invalid_url")
    parsed = httpx.URL(url)
    if parsed.userinfo:
        # never sent (the sender drops them): kept, they would only be a secret in clear text
        # shown to every reader of the webhook, so the answer names the URL without them
        raise Unprocessable("url must not contain a user name or password.",
                            {"url": str(parsed.copy_with(userinfo=b""))}, code="webhook.invalid_url")
    if target.scheme.lower() != b"https":
        raise Unprocessable("url must use https.", {"url": url}, code="webhook.insecure_url")
    return url


def check_events(events: list[str]) -> list[str]:
    """422 webhook.unknown_events (details unknown_events, allowed_events); an empty list is a
    422 request.validation_failed. Returns the names without duplicates, in the given order."""
    unknown = [e for e in dict.fromkeys(events) if e not in EVENT_NAMES]
    if unknown:
        raise Unprocessable(f"Unknown event names: {', '.join(unknown)}.",
                            {"unknown_events": unknown, "allowed_events": list(EVENT_NAMES)},
                            code="webhook.unknown_events")
    if not events:
        raise Unprocessable("events must name at least one event.",
                            {"field": "events", "allowed_events": list(EVENT_NAMES)})
    return list(dict.fromkeys(events))


def new_secret() -> str:
    return "whsec_" + secrets.token_hex(32)


# -- messages ----------------------------------------------------------------------------------------
@dataclass
class CreateWebhook:
    org_id: str
    url: str
    events: list[str]
    description: str | None = None


@dataclass
class UpdateWebhook:
    org_id: str
    webhook_id: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class DeleteWebhook:
    org_id: str
    webhook_id: str


@dataclass
class SendTest:
    """Reply: {event, data, delivery_id, url}; the Outcome later goes to `reply`."""
    org_id: str
    webhook_id: str
    reply: Any  # trio.MemorySendChannel with room for one Outcome


@dataclass
class RotateNodeKey:
    """Re-seal every stored webhook secret with a new node key (service.sealing). Reply:
    `{key_id, resealed}`."""


# -- the actor -----------------------------------------------------------------------------------------
class DeliveryActor(Actor):
    def __init__(self, registry: "DeliveryRegistry") -> None:
        self.registry = registry
        self.node = registry.node
        self.store = registry.node.store
        self.clock = registry.node.clock

    # -- webhooks -----------------------------------------------------------------------------------
    @on(CreateWebhook)
    async def on_CreateWebhook(self, m: CreateWebhook) -> dict[str, Any]:
        events = check_events(m.events)
        check_url(m.url)
        now = self.clock.iso_now()
        secret = new_secret()  # answered once; kept sealed with the node key
        row = dict(id=sql.new_id(), organization_id=m.org_id, url=m.url, events=events,
                   description=m.description, secret=self.node.node_key.seal(secret), is_active=1,
                   created_at=now, updated_at=now)

        def tx(conn: Any) -> dict[str, Any]:
            sql.insert_webhook(conn, row)
            got = sql.get_webhook(conn, m.org_id, row["id"])
            assert got is not None  # written in this transaction
            return got

        out: dict[str, Any] = await self.store.write(tx)
        return out | {"secret": secret}

    @on(RotateNodeKey)
    async def on_RotateNodeKey(self, m: RotateNodeKey) -> dict[str, Any]:
        key = self.node.node_key
        new = key.begin_rotation()
        resealed = await self.store.write(lambda conn: sql.reseal_secrets(conn, key.resealer(new)))
        key.finish_rotation(new)
        return {"key_id": key.current_id, "resealed": resealed}

    @on(UpdateWebhook)
    async def on_UpdateWebhook(self, m: UpdateWebhook) -> dict[str, Any]:
        fields = dict(m.fields)
        if "events" in fields:
            fields["events"] = check_events(fields["events"])
        if "url" in fields:
            check_url(fields["url"])
        if "is_active" in fields:
            fields["is_active"] = int(bool(fields["is_active"]))
        now = self.clock.iso_now()

        def tx(conn: Any) -> dict[str, Any]:
            if sql.get_webhook(conn, m.org_id, m.webhook_id) is None:
                raise _not_found()
            if fields:
                sql.update_webhook(conn, m.webhook_id, fields | {"updated_at": now})
            got = sql.get_webhook(conn, m.org_id, m.webhook_id)
            assert got is not None  # read in this transaction
            return got

        updated: dict[str, Any] = await self.store.write(tx)
        return updated

    @on(DeleteWebhook)
    async def on_DeleteWebhook(self, m: DeleteWebhook) -> None:
        """Deleting twice answers 204 again; an id never seen in the organization is 404."""
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            if sql.webhook_ever_existed(conn, m.org_id, m.webhook_id) is None:
                raise _not_found()
            sql.delete_webhook(conn, m.webhook_id, now)

        await self.store.write(tx)

    @on(SendTest)
    async def on_SendTest(self, m: SendTest) -> dict[str, Any]:
        now = self.clock.iso_now()
        data = {"webhook_id": m.webhook_id, "message": TEST_MESSAGE, "sent_at": now,
                "organization_id": m.org_id}
        body = sql.body_text("webhook.test", json.dumps(data, separators=(",", ":")))
        delivery_id = sql.new_id()

        def tx(conn: Any) -> Any:
            hook = sql.webhook_secret(conn, m.webhook_id)
            if hook is None or hook["organization_id"] != m.org_id or hook["deleted_at"] is not None:
                raise _not_found()
            sql.insert_test_delivery(conn, dict(id=delivery_id, webhook_id=m.webhook_id,
                                                organization_id=m.org_id, event="webhook.test",
                                                body=body, created_at=now))
            return hook

        hook = await self.store.write(tx)
        row = {"id": delivery_id, "organization_id": m.org_id, "webhook_id": m.webhook_id,
               "event": "webhook.test", "body": body, "url": hook["url"], "secret": hook["secret"]}
        self.node.account_webhooks.start(row, lambda outcome: _answer(m.reply, outcome))
        return {"event": "webhook.test", "data": data, "delivery_id": delivery_id, "url": hook["url"]}


def _not_found() -> NotFound:
    return NotFound("Webhook not found.", code="webhook.not_found")


def _answer(reply: Any, outcome: Any) -> None:
    """The test send's outcome to the waiting request, if it still waits (a POST refused at
    shutdown has no outcome: the request's own time limit answers)."""
    if isinstance(outcome, str):
        return
    try:
        reply.send_nowait(outcome)
    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        pass


class DeliveryRegistry(Registry[DeliveryActor]):
    """The registry of the one delivery actor."""

    def __init__(self, node: Any) -> None:
        self.node = node
        super().__init__("delivery", lambda key: DeliveryActor(self), node.clock)

    async def ask_actor(self, msg: Any, timeout: float = 10.0) -> Any:
        return await self.ask(KEY, msg, timeout)

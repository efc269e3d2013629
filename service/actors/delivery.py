"""The delivery actor: owner of account webhooks and their deliveries (spec "Events").

One actor per node (key `KEY`). It owns the `webhooks` and `webhook_deliveries` tables and
reads the `events` outbox that other actors write in their own transactions.

Fan-out. Every `POLL` seconds of trio time the actor compares the store's commit counter
with the last one it saw (an integer read, no query); when it moved, one indexed read asks
whether undispatched events exist, and if so one transaction turns them into `pending`
deliveries (one per active webhook of the organization subscribed to the event) and marks
them dispatched. A `Wake` tell (sent by features that emit events through this module's
helpers) skips the wait.

Sending. Deliveries wait in a `FairQueue`: round-robin over organizations, then over the
organization's webhooks, with at most `PER_WEBHOOK` sends in flight per webhook,
`PER_ORG` per organization and `MAX_IN_FLIGHT` in all, so a slow receiver only ever holds
its own organization's slots. Before a POST the delivery is committed `sending`; the POST
runs in a child task (the actor keeps handling messages) with a `TIMEOUT` second limit and
reports back with `Sent`; the outcome is committed in the next batch. No retries.

Restart (`load`, also after a crash): `sending` rows become `unknown` and are never
re-sent (they may have arrived); `pending` rows are queued again. So a restart neither
loses a pending delivery nor sends one twice. A send still running when the actor crashed
reports to the new actor, which then records its real outcome over `unknown`.

Test sends (`SendTest`) bypass the queue: the row is written `sending`, the POST starts at
once, and the outcome goes to the caller's reply channel after it is committed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import secrets
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing

from service.actors.delivery_queue import FairQueue
from service.actors.runtime import Actor, Registry, fail
from service.crash import crashpoint
from service.errors import ActorGone, NotFound, ServiceError, Unprocessable
from service.storage import webhooks as sql

log = logging.getLogger(__name__)

KEY = "delivery"
TIMEOUT = 10.0          # seconds a receiver gets to answer (spec); tests may patch it
POLL = 0.1              # seconds between checks of the outbox
AUTOJUMP_POLL = 60.0    # the same under trio's autojump test clock (see `poll_interval`)
MAX_IN_FLIGHT = 256     # sends at once, node-wide
PER_ORG = 16            # sends at once per organization
PER_WEBHOOK = 2         # sends at once per webhook
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
    "webhook.test",
)


# -- rules (pure) --------------------------------------------------------------------------------
def check_url(url: str) -> str:
    """422 webhook.invalid_url unless an absolute http(s) URL with a host; 422
    webhook.insecure_url for http://. Returns the URL unchanged."""
    from service.net.urls import parse_url

    target = parse_url(url) if isinstance(url, str) and len(url) <= MAX_URL else None
    if target is None or url != url.strip():
        raise Unprocessable("url must be an absolute https URL with a host.", {"url": url},
                            code="webhook.invalid_url")
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


def poll_interval() -> float:
    """POLL, except under trio's autojump test clock: there every deadline is a point the
    clock jumps to, so a 0.1 s poll would turn a long virtual sleep in another feature's test
    into millions of steps. Deliveries need real sockets, which never run on that clock."""
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold != math.inf:
        return AUTOJUMP_POLL
    return POLL


def sign(secret: str, body: bytes) -> str:
    """The X-Service-Signature value: sha256=<hex HMAC-SHA256 of the raw body, keyed with the
    secret's UTF-8 bytes>."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


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
    fields: dict = field(default_factory=dict)


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


@dataclass
class Wake:
    """New events were committed: fan out now instead of at the next poll."""


@dataclass
class Unsent:
    """The node's sender was closed (shutdown) before this delivery could go: back to pending."""
    delivery_id: str


@dataclass
class Sent:
    delivery_id: str
    outcome: Any  # service.net.client.Outcome
    reply: Any = None


# -- the actor -----------------------------------------------------------------------------------------
class DeliveryActor(Actor):
    def __init__(self, registry: "DeliveryRegistry") -> None:
        self.registry = registry
        self.node = registry.node
        self.store = registry.node.store
        self.clock = registry.node.clock
        self.queue = FairQueue(MAX_IN_FLIGHT, PER_ORG, PER_WEBHOOK)
        self.seen_writes = -1
        self.next_poll = 0.0

    async def load(self) -> None:
        now = self.clock.iso_now()
        pending = await self.store.write(lambda conn: sql.recover(conn, now))
        for d in pending:
            self.queue.push(d["organization_id"], d["webhook_id"], d["id"])
        await self._fan_out()
        await self._pump()
        self.next_poll = self.clock.now() + poll_interval()

    def next_deadline(self) -> float | None:
        return self.next_poll

    async def on_deadline(self) -> None:
        self.next_poll = self.clock.now() + poll_interval()
        writes = self.store.writes
        if writes != self.seen_writes:
            self.seen_writes = writes
            if sql.has_undispatched(self.store):
                await self._fan_out()
                await self._pump()

    async def handle_batch(self, msgs: list[Any]) -> list[Any]:
        replies: list[Any] = [None] * len(msgs)
        sent = [m for m in msgs if isinstance(m, Sent)]
        if sent:
            await self._record(sent)
        wake = False
        for i, m in enumerate(msgs):
            if isinstance(m, Sent):
                continue
            if isinstance(m, Wake):
                wake = True
                continue
            if isinstance(m, Unsent):
                await self.store.write(lambda conn, i=m.delivery_id: sql.unsend(conn, i))
                continue
            try:
                replies[i] = await getattr(self, "on_" + type(m).__name__)(m)
            except ServiceError as e:
                replies[i] = fail(e)
        if wake:
            await self._fan_out()
        await self._pump()
        return replies

    # -- fan-out and sending ----------------------------------------------------------------------
    async def _fan_out(self) -> None:
        while True:
            now = self.clock.iso_now()
            self.seen_writes = self.store.writes
            n_events, new = await self.store.write(lambda conn: sql.fan_out(conn, now))
            for d in new:
                self.queue.push(d["organization_id"], d["webhook_id"], d["id"])
            if n_events < sql.FAN_OUT_BATCH:
                return

    async def _pump(self) -> None:
        while not self.registry.stopping:
            ids = self.queue.take()
            if not ids:
                return
            now = self.clock.iso_now()
            send, dropped = await self.store.write(lambda conn: sql.start_sending(conn, ids, now))
            for delivery_id in dropped:
                self.queue.done(delivery_id)
            if send:
                crashpoint("delivery_sending")  # rows committed `sending`, POSTs not yet sent
            for row in send:
                self.registry.spawn(self.registry.send, row, None)

    async def _record(self, sent: list[Sent]) -> None:
        now = self.clock.iso_now()
        outcomes = [(m.delivery_id, now, m.outcome) for m in sent]
        await self.store.write(lambda conn: sql.record_outcomes(conn, outcomes))
        for m in sent:
            self.queue.done(m.delivery_id)
            if m.reply is not None:
                try:
                    m.reply.send_nowait(m.outcome)
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

    # -- webhooks -----------------------------------------------------------------------------------
    async def on_CreateWebhook(self, m: CreateWebhook) -> dict:
        events = check_events(m.events)
        check_url(m.url)
        now = self.clock.iso_now()
        secret = new_secret()  # answered once; kept sealed with the node key
        row = dict(id=sql.new_id(), organization_id=m.org_id, url=m.url, events=events,
                   description=m.description, secret=self.node.node_key.seal(secret), is_active=1,
                   created_at=now, updated_at=now)

        def tx(conn):
            sql.insert_webhook(conn, row)
            return sql.get_webhook(conn, m.org_id, row["id"])

        out = await self.store.write(tx)
        return out | {"secret": secret}

    async def on_RotateNodeKey(self, m: RotateNodeKey) -> dict:
        key = self.node.node_key
        new = key.begin_rotation()
        resealed = await self.store.write(lambda conn: sql.reseal_secrets(conn, key.resealer(new)))
        key.finish_rotation(new)
        return {"key_id": key.current_id, "resealed": resealed}

    async def on_UpdateWebhook(self, m: UpdateWebhook) -> dict:
        fields = dict(m.fields)
        if "events" in fields:
            fields["events"] = check_events(fields["events"])
        if "url" in fields:
            check_url(fields["url"])
        if "is_active" in fields:
            fields["is_active"] = int(bool(fields["is_active"]))
        now = self.clock.iso_now()

        def tx(conn):
            if sql.get_webhook(conn, m.org_id, m.webhook_id) is None:
                raise _not_found()
            if fields:
                sql.update_webhook(conn, m.webhook_id, fields | {"updated_at": now})
            return sql.get_webhook(conn, m.org_id, m.webhook_id)

        return await self.store.write(tx)

    async def on_DeleteWebhook(self, m: DeleteWebhook) -> None:
        """Deleting twice answers 204 again; an id never seen in the organization is 404."""
        now = self.clock.iso_now()

        def tx(conn):
            if sql.webhook_ever_existed(conn, m.org_id, m.webhook_id) is None:
                raise _not_found()
            sql.delete_webhook(conn, m.webhook_id, now)

        await self.store.write(tx)

    async def on_SendTest(self, m: SendTest) -> dict:
        now = self.clock.iso_now()
        data = {"webhook_id": m.webhook_id, "message": TEST_MESSAGE, "sent_at": now,
                "organization_id": m.org_id}
        body = sql.body_text("webhook.test", json.dumps(data, separators=(",", ":")))
        delivery_id = sql.new_id()

        def tx(conn):
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
        self.registry.spawn(self.registry.send, row, m.reply)
        return {"event": "webhook.test", "data": data, "delivery_id": delivery_id, "url": hook["url"]}


def _not_found() -> NotFound:
    return NotFound("Webhook not found.", code="webhook.not_found")


class DeliveryRegistry(Registry):
    """The registry of the one delivery actor; its nursery also hosts the send tasks."""

    def __init__(self, node) -> None:
        self.node = node
        self.stopping = False
        super().__init__("delivery", lambda key: DeliveryActor(self), node.clock)

    def spawn(self, fn, *args) -> None:
        if self._nursery is None:
            raise RuntimeError("delivery registry is not running")
        self._nursery.start_soon(fn, *args)

    def wake(self) -> None:
        """Tell the actor that events were committed (cheap; safe from any actor, never raises:
        the next poll of the outbox finds the events anyway)."""
        try:
            self.tell(KEY, Wake())
        except (ActorGone, RuntimeError):  # not running yet, or shutting down
            pass

    async def start_actor(self) -> None:
        """Recovery step: start the actor now (its `load` re-queues pending deliveries)."""
        self.wake()

    async def stop_sending(self) -> None:
        """Closer: the node is shutting down; start no more sends (pending ones stay pending)."""
        self.stopping = True

    async def ask_actor(self, msg: Any, timeout: float = 10.0) -> Any:
        return await self.ask(KEY, msg, timeout)

    async def send(self, row: dict, reply) -> None:
        """One POST of the exact stored body bytes, signed; reports `Sent` to the actor."""
        from service.net.client import Outcome

        body = row["body"].encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "X-Service-Signature": sign(self.node.node_key.open(row["secret"]), body),
            "X-Service-Delivery": row["id"],
            "X-Service-Event": row["event"],
        }
        sender = self.node.sender
        try:
            outcome = await sender.post(row["url"], body, headers, timeout=TIMEOUT)
        except Exception:  # noqa: BLE001 - a bug in one send must not stop the others
            if self.stopping or getattr(sender, "_closed", False):
                self.tell(KEY, Unsent(row["id"]))  # shutting down: it goes out after the restart
                return
            log.exception("webhook delivery %s failed unexpectedly", row["id"])
            outcome = Outcome(False, None, "internal error while sending", "connection", 0)
        self.tell(KEY, Sent(row["id"], outcome, reply))

"""Account webhooks: the `events` outbox fanned out to subscribed webhooks and POSTed, signed,
by the shared outbox dispatcher (service/outbox.py). The delivery actor
(service/actors/delivery.py) owns the webhooks themselves.

Fan-out. The store wakes the dispatcher after a commit that wrote an event (any actor's
transaction: `service.storage.events.emit`). A claim then turns undispatched events into
`pending` deliveries (one per active webhook of the organization subscribed to the event)
and marks them dispatched, in one transaction.

Sending. Deliveries wait in a `FairQueue`: round-robin over organizations, then over the
organization's webhooks, with at most `PER_WEBHOOK` sends in flight per webhook, `PER_ORG`
per organization and `MAX_IN_FLIGHT` in all, so a slow receiver only ever holds its own
organization's slots. A delivery is committed `sending` before its POST (`TIMEOUT` second
limit); its outcome is committed after. No retries. A POST the closed sender refused
(shutdown) is `pending` again and goes after the restart.

Backlog. A webhook has at most `MAX_PENDING` deliveries waiting (pending or sending): past
that, fan-out writes its new deliveries `skipped` with the error "not sent: N deliveries of
this webhook were already waiting", so a receiver that is down while events keep coming
grows neither this queue nor its pending rows without bound, and the log still shows them.
The new ones are refused rather than the oldest dropped: what waits keeps its place.

Restart (`recover`): `sending` rows become `unknown` and are never re-sent (they may have
arrived); `pending` rows are queued again. So a restart neither loses a pending delivery nor
sends one twice.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from functools import partial
from typing import Any, Callable

from service.clock import Clock
from service.net.client import Outcome
from service.outbox import Dispatcher
from service.senders.fair_queue import FairQueue
from service.storage import webhooks as sql
from service.storage.db import Store

log = logging.getLogger(__name__)

TIMEOUT = 10.0          # seconds a receiver gets to answer (spec); tests may patch it
MAX_IN_FLIGHT = 256     # sends at once, node-wide
PER_ORG = 16            # sends at once per organization
PER_WEBHOOK = 2         # sends at once per webhook
MAX_PENDING = 10_000    # deliveries waiting (pending or sending) per webhook; more are skipped
UNSENT = "unsent"       # the outcome of a POST the closed sender refused (shutdown)


def sign(secret: str, body: bytes) -> str:
    """The X-Service-Signature value: sha256=<hex HMAC-SHA256 of the raw body, keyed with the
    secret's UTF-8 bytes>."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


class AccountWebhookSource:
    """The `events` outbox and `webhook_deliveries`, signed with each webhook's secret."""

    name = "account webhooks"
    crashpoint = "delivery_sending"
    concurrency = MAX_IN_FLIGHT
    watch: tuple[str, str, str | int] = ("events", "dispatched", 0)

    def __init__(self, sender: Callable[[], Any], open_secret: Callable[[str], str]) -> None:
        self._sender = sender            # returns the node's net.client.Sender (node.sender)
        self._open_secret = open_secret  # sealed secret -> secret (the node key)
        self.queue = FairQueue(MAX_IN_FLIGHT, PER_ORG, PER_WEBHOOK)

    def paused(self) -> bool:
        return bool(getattr(self._sender(), "_closed", False))

    async def recover(self, store: Store, now_iso: str) -> str | None:
        pending = await store.write(lambda conn: sql.recover(conn, now_iso))
        self.queue = FairQueue(MAX_IN_FLIGHT, PER_ORG, PER_WEBHOOK)
        for d in pending:
            self.queue.push(d["organization_id"], d["webhook_id"], d["id"])
        return f"{len(pending)} pending deliveries queued" if pending else None

    async def claim(self, store: Store, now: float, now_iso: str, limit: int) -> list[dict]:
        while sql.has_undispatched(store):
            over_cap: dict[str, int] = {}
            n_events, new = await store.write(partial(sql.fan_out, now=now_iso, waiting=self.queue.waiting(),
                                                      cap=MAX_PENDING, over_cap=over_cap))
            for d in new:
                self.queue.push(d["organization_id"], d["webhook_id"], d["id"])
            for webhook_id, n in over_cap.items():
                log.warning("webhook %s: %d deliveries skipped, %d already waiting", webhook_id, n, MAX_PENDING)
            if n_events < sql.FAN_OUT_BATCH:
                break
        while ids := self.queue.take(limit):
            send, dropped = await store.write(lambda conn: sql.start_sending(conn, ids, now_iso))
            for delivery_id in dropped:  # skipped (webhook paused or deleted): their slots are free
                self.queue.done(delivery_id)
            if send:
                return send
        return []

    def next_due(self) -> float | None:
        return None  # no retries: a delivery is due when fanned out, and the store wakes us

    async def deliver(self, row: dict) -> Outcome:
        """One POST of the exact stored body bytes, signed."""
        body = row["body"].encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "X-Service-Signature": sign(self._open_secret(row["secret"]), body),
            "X-Service-Delivery": row["id"],
            "X-Service-Event": row["event"],
        }
        return await self._sender().post(row["url"], body, headers, timeout=TIMEOUT)

    def crashed(self, row: dict, error: Exception) -> Any:
        if self.paused():  # closed for shutdown before it went: send it after the restart
            return UNSENT
        log.error("webhook delivery %s failed unexpectedly", row["id"], exc_info=error)
        return Outcome(False, None, "internal error while sending", "connection", 0)

    async def record(self, store: Store, row: dict, outcome: Any, now: float, now_iso: str) -> None:
        try:
            if outcome == UNSENT:
                await store.write(lambda conn: sql.unsend(conn, row["id"]))
            else:
                await store.write(lambda conn: sql.record_outcomes(conn, [(row["id"], now_iso, outcome)]))
        finally:
            self.queue.done(row["id"])


class AccountWebhooks(Dispatcher):
    """`recover()` once at start; `run` as a task (the store wakes it); `start(row, then)` for
    a test send the delivery actor has committed `sending`."""

    def __init__(self, store: Store, clock: Clock, sender: Callable[[], Any],
                 open_secret: Callable[[str], str]) -> None:
        super().__init__(store, clock, AccountWebhookSource(sender, open_secret))

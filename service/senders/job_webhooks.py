"""Job webhooks: one POST of the final status object per job, from the outbox table.

A job actor writes the `job_webhooks` row in the same transaction as the job's final
status, in state `waiting` (or `skipped` when the URL is not https: an `http://` URL is
accepted at submit and never called). It makes the row `pending` once the job's hold is
settled, or for a job canceled while rendering once its render has ended. The store wakes
the dispatcher after the commit that made a row `pending`.

The shared outbox dispatcher (service/outbox.py) drives it: it marks a row `sending`
(committed) before the POST, then records the outcome:
`delivered` (2xx) or `failed` (timeout, connection error, non-2xx), with status code,
error text and class, duration. One attempt, 10 s timeout, no retry, no signature header;
body `application/json`, the bytes stored in the row. A row whose POST the closed sender
refused (shutdown) goes back to `pending`. At start, `recover()` turns `sending`
rows into `unknown` (the POST may have gone out: never re-sent) and `waiting` rows into
`pending`; the dispatcher only begins after that.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from service.clock import Clock
from service.outbox import Dispatcher
from service.storage import generation as sql
from service.storage.db import Store

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
# POSTs in flight at once, node-wide (as many as account-webhook deliveries). Rows are sent in
# the order they became due, so a due row waits while this many receivers are slow: at 32,
# 100 hanging receivers (each 10 s) held a healthy job's webhook for about 22 s, past the
# 15 s of reliability goal R7 (tests/test_webhook_faults.py). With 256, a healthy receiver
# waits for a slow one only when more than 256 are slow at once (there is no per-organization
# cap here, unlike account webhooks).
CONCURRENCY = 256


UNSENT = "unsent"  # the outcome of a POST the closed sender refused (shutdown): pending again


class JobWebhookSource:
    """The `job_webhooks` table and the node's HTTP sender, for the shared dispatcher."""

    name = "job webhooks"
    crashpoint = "job_webhook_sending"
    concurrency = CONCURRENCY
    watch: tuple[str, str, str | int] = ("job_webhooks", "state", "pending")

    def __init__(self, sender: Callable[[], Any]) -> None:
        self._sender = sender  # returns the node's net.client.Sender (node.sender)

    def paused(self) -> bool:
        return bool(getattr(self._sender(), "_closed", False))

    async def recover(self, store: Store, now_iso: str) -> str | None:
        unknown, released = await store.write(lambda conn: sql.recover_webhooks(conn, now_iso))
        if unknown or released:
            return f"{unknown} in flight at stop recorded unknown, {released} released"
        return None

    async def claim(self, store: Store, now: float, now_iso: str, limit: int) -> list[dict]:
        return await store.write(lambda conn: sql.claim_webhooks(conn, now_iso, limit))

    def next_due(self) -> float | None:
        return None  # no retries: every row is due when written, and the store wakes us

    async def deliver(self, row: dict) -> Any:
        outcome = await self._sender().post(
            row["url"], row["body"].encode(), {"Content-Type": "application/json"}, timeout=TIMEOUT_S)
        return {"state": "delivered" if outcome.is_delivered else "failed", "status_code": outcome.status_code,
                "error": outcome.error, "error_class": outcome.error_class, "duration_ms": outcome.duration_ms}

    def crashed(self, row: dict, error: Exception) -> Any:
        if self.paused():  # closed for shutdown before it went: send it after the restart
            return UNSENT
        log.error("job webhook %s: sender failed", row["id"], exc_info=error)
        return {"state": "failed", "error": f"internal error: {type(error).__name__}", "error_class": "internal"}

    async def record(self, store: Store, row: dict, outcome: Any, now: float, now_iso: str) -> None:
        fields = {"state": "pending", "sent_at": None} if outcome == UNSENT else outcome
        await store.write(lambda conn: sql.update_webhook(conn, row["id"], fields))


class JobWebhooks(Dispatcher):
    """`recover()` once at start; `run` as a task (the store wakes it)."""

    def __init__(self, store: Store, clock: Clock, sender: Callable[[], Any]) -> None:
        super().__init__(store, clock, JobWebhookSource(sender))

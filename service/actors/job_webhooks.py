"""Job webhooks: one POST of the final status object per job, from the outbox table.

A job actor writes the `job_webhooks` row in the same transaction as the job's final
status (state `pending`, or `waiting` for a job canceled while rendering until its render
has ended, or `skipped` when the URL is not https: an `http://` URL is accepted at submit
and never called) and then calls `wake()`.

The dispatcher marks a row `sending` (committed) before the POST, then records the outcome:
`delivered` (2xx) or `failed` (timeout, connection error, non-2xx), with status code,
error text and class, duration. One attempt, 10 s timeout, no retry, no signature header;
body `application/json`, the bytes stored in the row. A row whose POST the closed sender
refused (shutdown) goes back to `pending`. At start, `recover()` turns `sending`
rows into `unknown` (the POST may have gone out: never re-sent) and `waiting` rows into
`pending`; the dispatcher only begins after that.
"""

from __future__ import annotations

import logging
from typing import Callable

import trio

from service.clock import Clock
from service.crash import crashpoint
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


class JobWebhooks:
    def __init__(self, store: Store, clock: Clock, sender: Callable[[], object]) -> None:
        self.store = store
        self.clock = clock
        self._sender = sender  # returns the node's net.client.Sender (node.sender)
        self._wake = trio.Event()
        self._ready = trio.Event()
        self._limiter = trio.CapacityLimiter(CONCURRENCY)
        self._inflight: set[str] = set()
        self.sent = 0

    def _closed(self) -> bool:
        return bool(getattr(self._sender(), "_closed", False))

    def wake(self) -> None:
        self._wake.set()

    async def recover(self) -> None:
        now = self.clock.iso_now()  # write functions may run in the writer thread: no clock there
        unknown, released = await self.store.write(lambda c: sql.recover_webhooks(c, now))
        if unknown or released:
            log.info("job webhooks: %d in flight at stop recorded unknown, %d released", unknown, released)
        self._ready.set()
        self.wake()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self._ready.wait()
        async with trio.open_nursery() as nursery:
            while True:
                self._wake = trio.Event()
                rows = [r for r in sql.pending_webhooks(self.store, 200) if r["id"] not in self._inflight]
                for row in rows:
                    if self._closed():
                        break  # shutting down: the rest stay pending and go after the restart
                    await self._limiter.acquire_on_behalf_of(row["id"])
                    fields = {"state": "sending", "sent_at": self.clock.iso_now()}
                    try:
                        await self.store.write(lambda c, i=row["id"], f=fields: sql.update_webhook(c, i, f))
                    except BaseException:
                        self._limiter.release_on_behalf_of(row["id"])
                        raise
                    crashpoint("job_webhook_sending")  # row committed `sending`, POST not yet sent
                    self._inflight.add(row["id"])
                    nursery.start_soon(self._send, row)
                if len(rows) < 200:
                    await self._wake.wait()  # every new pending row comes with a wake()

    async def _send(self, row: dict) -> None:
        try:
            outcome = await self._sender().post(
                row["url"], row["body"].encode(), {"Content-Type": "application/json"}, timeout=TIMEOUT_S)
            fields = {
                "state": "delivered" if outcome.is_delivered else "failed",
                "status_code": outcome.status_code, "error": outcome.error,
                "error_class": outcome.error_class, "duration_ms": outcome.duration_ms,
            }
        except Exception as e:  # noqa: BLE001 - a sender bug must not stop the dispatcher
            if self._closed():  # closed for shutdown before it went: send it after the restart
                fields = {"state": "pending", "sent_at": None}
                try:
                    await self.store.write(lambda c: sql.update_webhook(c, row["id"], fields))
                finally:
                    self._inflight.discard(row["id"])
                    self._limiter.release_on_behalf_of(row["id"])
                return
            log.exception("job webhook %s: sender failed", row["id"])
            fields = {"state": "failed", "error": f"internal error: {type(e).__name__}",
                      "error_class": "internal"}
        try:
            await self.store.write(lambda c: sql.update_webhook(c, row["id"], fields))
            self.sent += 1
        finally:
            self._inflight.discard(row["id"])
            self._limiter.release_on_behalf_of(row["id"])

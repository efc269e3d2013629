"""One dispatcher for an outbox table, parametrised by its `Source` (the table's SQL and the
sender): job webhooks (service/senders/job_webhooks.py) and mails (service/mail/outbox.py).
Account webhooks keep their own actor (service/actors/delivery.py): they fan events out to
subscriptions and share slots fairly between organizations.

The rules every outbox follows:
- A row is written by the change that causes it, in its transaction; the writer then wakes
  the dispatcher (`wake`, safe from any thread). Between wakes the dispatcher sleeps until
  the source's next due row (a retry), or for ever: no polling.
- `recover()` runs once at start, before any row is claimed: rows left in flight by the last
  run are settled by the source (recorded `unknown`, never sent again: at most once).
- `claim` marks rows in flight and commits that before anything is sent; each row is then
  delivered in its own child task (at most `source.concurrency` at once) and its outcome
  recorded in a write of its own.
- While the source is `paused()` (its sender closed for shutdown) nothing is claimed; the
  rows stay due for the next start.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import trio

from service.clock import Clock
from service.crash import crashpoint
from service.storage.db import Store

log = logging.getLogger(__name__)


class Source(Protocol):
    name: str          # for log lines
    crashpoint: str    # service.crash point passed after a claim is committed
    concurrency: int   # deliveries at once

    def recover(self, conn, now_iso: str) -> str | None:
        """Settle rows left in flight at the last stop; a log line, or None."""

    def claim(self, conn, now: float, now_iso: str, limit: int) -> list[dict]:
        """Up to `limit` due rows, marked in flight in this transaction."""

    def next_due(self) -> float | None:
        """Service time of the earliest row waiting to be due (a retry), or None."""

    def paused(self) -> bool:
        """True while nothing may be sent (shutdown)."""

    async def deliver(self, row: dict) -> Any:
        """Send one row; an outcome for `record` (expected failures are outcomes, not raises)."""

    def record(self, conn, row: dict, outcome: Any, now: float, now_iso: str) -> None:
        """Store the outcome of one delivery."""

    def crashed(self, row: dict, error: Exception) -> Any:
        """The outcome of a delivery that raised (a bug or a sender closed meanwhile)."""


class Dispatcher:
    def __init__(self, store: Store, clock: Clock, source: Source) -> None:
        self.store = store
        self.clock = clock
        self.source = source
        self._wake = trio.Event()
        self._ready = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._inflight: set[str] = set()
        self.sent = 0  # outcomes recorded

    def wake(self) -> None:
        """A row may be due: look now. Safe from any thread (the writer may commit in one)."""
        if self._token is None:
            return  # not running yet: `run` looks at start anyway
        try:
            self._token.run_sync_soon(self._set)
        except trio.RunFinishedError:
            pass

    def _set(self) -> None:
        self._wake.set()

    async def recover(self) -> None:
        now_iso = self.clock.iso_now()  # write functions may run in the writer thread: no clock there
        line = await self.store.write(lambda c: self.source.recover(c, now_iso))
        if line:
            log.info("%s: %s", self.source.name, line)
        self._ready.set()
        self.wake()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        unwatch = self.clock.watch(self.wake)  # the test clock moved: a retry may be due
        try:
            task_status.started()
            await self._ready.wait()
            async with trio.open_nursery() as nursery:
                await self._loop(nursery)
        finally:
            unwatch()

    async def _loop(self, nursery: trio.Nursery) -> None:
        src = self.source
        while True:
            self._wake = trio.Event()
            free = src.concurrency - len(self._inflight)
            rows: list[dict] = []
            if free > 0 and not src.paused():
                now, now_iso = self.clock.now(), self.clock.iso_now()
                rows = await self.store.write(lambda c: src.claim(c, now, now_iso, free))
            if rows:
                crashpoint(src.crashpoint)  # rows committed in flight, nothing sent yet
            for row in rows:
                self._inflight.add(row["id"])
                nursery.start_soon(self._deliver, row)
            if rows and len(rows) == free:
                continue  # maybe more due: take them as slots free up (each delivery wakes us)
            # with every slot busy, only the end of a delivery (which wakes us) can start another
            due = src.next_due() if len(self._inflight) < src.concurrency else None
            with trio.move_on_at(math.inf if due is None else self.clock.trio_time(due)):
                await self._wake.wait()

    async def _deliver(self, row: dict) -> None:
        try:
            try:
                outcome = await self.source.deliver(row)
            except Exception as e:  # noqa: BLE001 - one bad row must not stop the dispatcher
                outcome = self.source.crashed(row, e)
            now, now_iso = self.clock.now(), self.clock.iso_now()
            await self.store.write(lambda c: self.source.record(c, row, outcome, now, now_iso))
            self.sent += 1
        finally:
            self._inflight.discard(row["id"])
            self._wake.set()

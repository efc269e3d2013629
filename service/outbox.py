"""One dispatcher for an outbox table, parametrised by its `Source` (the table's SQL and the
sender): job webhooks (service/senders/job_webhooks.py), account webhooks
(service/senders/account_webhooks.py, which adds the fan-out of events and fair shares) and
mails (service/mail/outbox.py).

The rules every outbox follows:
- A row is written by the change that causes it, in its transaction. The store calls `wake`
  after the COMMIT that put a row of the source's table into its due state
  (`Store.watch(source.watch)`), so no writer wakes a dispatcher and nothing polls. Between
  wakes the dispatcher sleeps until the source's next due row (a retry), or for ever.
- `recover()` runs once at start, before any row is claimed: rows left in flight by the last
  run are settled by the source (recorded `unknown`, never sent again: at most once).
- `claim` marks rows in flight and commits that before anything is sent; each row is then
  delivered in its own child task (at most `source.concurrency` at once) and its outcome
  recorded in a write of its own.
- While the source is `paused()` (its sender closed for shutdown) nothing is claimed; the
  rows stay due for the next start.
- A claim that raises (a disk error) restarts the dispatcher in place: it is logged, counted
  in `restarts`, the source recovers again after a pause (longer while failures repeat, up
  to 5 s; a recovery that fails too is retried the same way), and sending goes on. Sends
  still running meanwhile record their real outcome over the `unknown` of that recovery.
- An outcome whose write raises is logged and its row left in flight (`unknown` at the next
  recovery); the dispatcher goes on.
- Rows started by `start` (webhook test sends) do not count against `concurrency`: they
  never hold the slots of claimed rows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
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
    watch: tuple[str, str, str | int]  # (table, column, due value): the store wakes us on it

    async def recover(self, store: Store, now_iso: str) -> str | None:
        """Settle rows left in flight at the last stop; a log line, or None."""

    async def claim(self, store: Store, now: float, now_iso: str, limit: int) -> list[dict]:
        """Up to `limit` due rows, committed in flight."""

    def next_due(self) -> float | None:
        """Service time of the earliest row waiting to be due (a retry), or None."""

    def paused(self) -> bool:
        """True while nothing may be sent (shutdown)."""

    async def deliver(self, row: dict) -> Any:
        """Send one row; an outcome for `record` (expected failures are outcomes, not raises)."""

    async def record(self, store: Store, row: dict, outcome: Any, now: float, now_iso: str) -> None:
        """Store the outcome of one delivery."""

    def crashed(self, row: dict, error: Exception) -> Any:
        """The outcome of a delivery that raised (a bug or a sender closed meanwhile)."""


RESTART_PAUSE = (0.05, 0.5, 5.0)  # seconds before restart 1, 2, 3 and later, after a failed claim


class Dispatcher:
    def __init__(self, store: Store, clock: Clock, source: Source) -> None:
        self.store = store
        self.clock = clock
        self.source = source
        self._wake = trio.Event()
        self._ready = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._inflight: set[str] = set()  # every row being delivered
        self._claimed: set[str] = set()   # those of them claimed here: what `concurrency` caps
        self.sent = 0      # outcomes recorded
        self.restarts = 0  # in-place restarts after a failed claim
        self._failures = 0  # failed claims (or recoveries) in a row
        self.looks = 0     # times the dispatcher looked for due rows (each wake-up, each free slot)

    def wake(self) -> None:
        """A row may be due: look now. Safe from any thread (the store calls it after a
        commit, maybe in its worker thread)."""
        if self._token is None:
            return  # not running yet: `run` looks at start anyway
        try:
            self._token.run_sync_soon(self._set)
        except trio.RunFinishedError:
            pass

    def _set(self) -> None:
        self._wake.set()

    async def recover(self) -> None:
        now_iso = self.clock.iso_now()
        line = await self.source.recover(self.store, now_iso)
        if line:
            log.info("%s: %s", self.source.name, line)
        self._ready.set()
        self.wake()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def start(self, row: dict, then: Callable[[Any], None] | None = None) -> None:
        """Deliver a row its writer has already committed in flight (a webhook test send),
        beside the claimed ones and outside `concurrency` (one organization's tests must not
        hold every organization's slots); `then(outcome)` once its outcome is recorded."""
        if self._nursery is None:
            raise RuntimeError(f"{self.source.name}: the dispatcher is not running")
        self._inflight.add(row["id"])
        self._nursery.start_soon(self._deliver, row, then)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        unwatch = await self.store.watch(*self.source.watch, self.wake)
        unclock = self.clock.watch(self.wake)  # the test clock moved: a retry may be due
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await self._ready.wait()
                await self._supervise()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            unclock()
            unwatch()

    async def _supervise(self) -> None:
        while True:
            try:
                if self._failures:
                    await self.recover()
                await self._loop()
            except Exception:  # noqa: BLE001 - a failed claim must not stop the node's sending
                self.restarts += 1
                log.exception("%s: claim failed; restarting (restart %d)", self.source.name, self.restarts)
                await trio.sleep(RESTART_PAUSE[min(self._failures, len(RESTART_PAUSE) - 1)])
                self._failures += 1

    async def _loop(self) -> None:
        src = self.source
        assert self._nursery is not None
        while True:
            self._wake = trio.Event()
            self.looks += 1
            free = src.concurrency - len(self._claimed)
            rows: list[dict] = []
            if free > 0 and not src.paused():
                rows = await src.claim(self.store, self.clock.now(), self.clock.iso_now(), free)
                self._failures = 0  # a claim went through: the next failure pauses briefly again
            if rows:
                crashpoint(src.crashpoint)  # rows committed in flight, nothing sent yet
            for row in rows:
                self._inflight.add(row["id"])
                self._claimed.add(row["id"])
                self._nursery.start_soon(self._deliver, row, None)
            if rows and len(rows) == free:
                continue  # maybe more due: take them as slots free up (each delivery wakes us)
            # with every slot busy, only the end of a delivery (which wakes us) can start another
            due = src.next_due() if len(self._claimed) < src.concurrency else None
            with trio.move_on_at(math.inf if due is None else self.clock.trio_time(due)):
                await self._wake.wait()

    async def _deliver(self, row: dict, then: Callable[[Any], None] | None) -> None:
        try:
            try:
                outcome = await self.source.deliver(row)
            except Exception as e:  # noqa: BLE001 - one bad row must not stop the dispatcher
                outcome = self.source.crashed(row, e)
            try:
                await self.source.record(self.store, row, outcome, self.clock.now(), self.clock.iso_now())
            except Exception:  # noqa: BLE001 - a failed write (disk error) must not stop the sending
                # the row stays in flight: the next recovery records it unknown, never sent twice
                log.exception("%s: recording the outcome of %s failed", self.source.name, row["id"])
                return
            self.sent += 1
            if then is not None:
                then(outcome)
        finally:
            self._inflight.discard(row["id"])
            self._claimed.discard(row["id"])
            self._wake.set()

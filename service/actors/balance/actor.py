"""The balance actor: one per organization, the only owner of its credits.

The rules below live in `service.credits.book.CreditBook` (pure, tested without trio); this
actor holds the book and does the plumbing: batching, prefetching hold ids, one store write
per batch, replies after the commit, and reloading after a failure.

State (loaded from SQLite by `load`, kept in memory, integer micro-credits throughout):
lots (every lot of the organization; the unexpired ones with credits left in spend order:
soonest `expires_at` first, no expiry last, ties by `created_at` then `id`), the
outstanding holds with their lot slices, `available` (Σ free part of the unexpired lots)
and `held` (Σ outstanding holds), and the low-balance warning settings.

Rules (api-spec "Credit hold", DESIGN "Credits"):
- PlaceHold reserves specific amounts from specific lots in spend order (the slices are
  stored with the hold). More than `available` -> 402 InsufficientCredits, nothing created.
- Capture charges exactly those slices in order up to the captured amount, even from a lot
  that expired meanwhile, and returns the rest; more than held is refused (422).
- Release returns every slice; the returned part of an expired lot expires at once (with an
  expiry ledger entry).
- A lot expires at exactly its `expires_at` (service time): `next_deadline` is the soonest
  expiry, so a test-clock advance expires lots at once. Its free part leaves `available`;
  its reserved part stays with the holds.
- Every message that moves money carries an id and is idempotent on it; repeats return the
  original result. HOLD and LOW_BALANCE (service.machines) decide the transitions.
- The ledger rule is in `service.storage.billing`: Σ ledger amounts = `available`.

Batching: `handle_batch` decides a whole mailbox burst in memory, stages the row changes
(one UPDATE per touched lot and hold, one INSERT per new hold and per ledger slice) and
submits them as ONE store write, which the store group-commits with other organizations'
writes. Replies go out only after that commit (the batch is returned as a `Deferred`), and
the next burst is decided while it is in flight (at most IN_FLIGHT batches), so the writer
is never idle waiting for this actor. Batches are answered in order; each batch's write
applies only if the previous one of the same epoch did. If a commit fails (or a bug strikes
mid-batch), that batch and every batch decided on top of it fail with 503, and memory is
reloaded from SQLite once (a new epoch): the actor never continues from mutated memory.

Hold ids the batch names that memory does not know are read from the DB before deciding
(a repeat after a restart must return the original hold), except when nothing is in
flight and the store commits at once on this thread (one requester, low load): then a new
hold id is inserted unread, and a repeat, refused by the primary key, rolls back alone and
the batch is decided again from a reload (`_decide`). Measured in `bench/README.md`.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any, Callable

import trio

from service.actors.balance.messages import (Capture, Grant, LimitPut, PlaceHold, Release, SettingsPut, Snapshot,
                                            SpendCheck, Stop, Sync)
from service.actors.runtime import Actor, Deferred, fail, on, refused
from service.clock import iso, parse_iso
from service.credits.book import CreditBook, Unread
from service.credits.limits import month_of
from service.errors import ApiError, Unavailable
from service.mail import notices
from service.money import MAX_UC
from service.storage import billing as sql

log = logging.getLogger(__name__)

__all__ = ["MAX_UC", "SIGNUP_DAYS", "SIGNUP_UC", "BalanceActor", "signup_grant"]

RECENT = 4096      # committed settled holds kept in memory for idempotent repeats; older ones come
                   # from the DB (holds settled by a batch still in flight are kept apart until it commits)
SIGNUP_UC = 200 * 1_000_000
SIGNUP_DAYS = 30


def signup_grant(org_id: str, now: float) -> Grant:
    """The signup lot of an approved organization: once per organization (its grant id)."""
    return Grant(grant_id=f"signup:{org_id}", amount_uc=SIGNUP_UC, source="signup",
                 expires_at=now + SIGNUP_DAYS * 86400, reason="Signup credit")

UNAVAILABLE = "The balance could not be updated; try again."
IN_FLIGHT = 2      # batches decided but not yet committed: one committing, the next queued behind it
SPLIT_FROM = 128   # a burst of at least this many messages is decided in two halves (smaller commits;
                   # measured: helps p99 at 256 requesters, costs CPU at 64)


class ChainBroken(Exception):
    """A batch's write refuses to apply because the batch before it did not commit."""


class _Batch:
    __slots__ = ("replies", "epoch", "prev", "trace", "settled", "item", "done", "ok")

    def __init__(self, replies: list[Any], epoch: int, prev: Any, trace: Any, settled: Any) -> None:
        self.replies = replies
        self.settled = settled
        self.epoch = epoch
        self.prev = prev
        self.trace = trace
        self.item = None
        self.done = trio.Event()
        self.ok = False


def _new_id() -> str:
    return sql.new_id()  # looked up per call: tests replace it with a seeded generator


def _expiry(expires_at: float) -> tuple[float, str]:
    """A grant's expiry as stored: to the microsecond, rounded down (so advancing the clock by
    exactly the lifetime expires it); the deadline is exactly the stored value."""
    exp_iso = iso(math.floor(expires_at * 1_000_000) / 1_000_000)
    return parse_iso(exp_iso), exp_iso


class BalanceActor(Actor):
    def __init__(self, node: Any, org_id: str, *, trace: list[Any] | None = None) -> None:
        self.store = node.store
        self.clock = node.clock
        self.org_id = org_id
        self.trace = trace        # a list: committed decisions are appended (benchmark, tests)
        self.book = CreditBook(org_id, _new_id, _expiry)
        self._slots = trio.Semaphore(IN_FLIGHT)
        self._epoch = 0
        self._last_write = None   # the store item of the last submitted write of this epoch
        self._tail: _Batch | None = None
        self._serial = 0          # batch counter (marks rows a batch inserts)
        self._iso_sec: int | None = None
        self._iso_prefix = ""

    @property
    def lots(self) -> dict[str, Any]:
        """The book's lots by id (read-only use: tests look up a granted lot's deadline)."""
        return self.book.lots

    # -- loading -----------------------------------------------------------------------------
    async def load(self) -> None:
        self._load()

    def _load(self) -> None:
        lots, holds, settings, spend = sql.load_org(self.store, self.org_id, month_of(self.clock.now()))
        self.book.load(lots, [(r, sql.load_slices(r["slices"])) for r in holds], settings, spend)

    # -- the loop's hooks ----------------------------------------------------------------------
    def batch_limit(self, waiting: int) -> int:
        """A big burst is decided in two halves: the second is decided (and queued behind)
        while the first commits, so deciding and committing overlap instead of alternating."""
        return waiting if waiting < SPLIT_FROM else (waiting + 1) // 2

    def next_deadline(self) -> float | None:
        return self.book.next_deadline()

    async def on_deadline(self) -> None:
        await self._slots.acquire()
        batch = self._decide_or_none([])
        if batch is None:
            await self._recover()
            ok = False
        else:
            await self._complete(batch)
            ok = batch.ok
        if not ok:
            await trio.sleep(0.1)  # state was reloaded after a failure: do not spin on a broken DB

    async def handle_batch(self, msgs: list[Any]) -> Any:
        """Decide at once and submit the write; answer when it has committed (`Deferred`), so
        the next batch is decided while this one's commit is in flight. A batch whose write
        (and every one before it) is already committed is answered at once."""
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        batch = self._decide_or_none(msgs)
        if batch is None:
            await self._recover()
            return [fail(Unavailable(UNAVAILABLE)) for _ in msgs]
        if batch.prev is None and (batch.item is None or batch.item.done.is_set()):
            return self._conclude(batch, batch.item is not None and batch.item.error is not None)
        return Deferred(partial(self._complete, batch))

    # -- one batch -----------------------------------------------------------------------------
    def _iso(self, now: float) -> str:
        """`clock.iso(now)` (same rounding to the microsecond), formatting the date once a second."""
        sec = math.floor(now)
        us = round((now - sec) * 1_000_000)
        if us >= 1_000_000:
            sec, us = sec + 1, us - 1_000_000
        if sec != self._iso_sec:
            self._iso_sec, self._iso_prefix = sec, iso(sec)[:19]
        return f"{self._iso_prefix}.{us:06d}Z"

    def _decide_or_none(self, msgs: list[Any]) -> "_Batch | None":
        try:
            return self._decide(msgs)
        except Exception:
            log.exception("balance %s: deciding a batch of %d failed; reloading from the database",
                          self.org_id, len(msgs))
            return None

    async def _recover(self) -> None:
        """After a failure while deciding: let the batches in flight settle, then reload."""
        try:
            tail = self._tail
            if tail is not None:
                await tail.done.wait()
            self._reload()
        finally:
            self._slots.release()

    def _reload(self) -> None:
        self._load()
        self._epoch += 1
        self._last_write = None
        self._tail = None

    def _decide(self, msgs: list[Any], *, read_new: bool = False) -> "_Batch":
        """Decide `msgs` in memory (no await) and submit the batch's write, chained to the
        previous one: it refuses to apply if the previous write of this epoch did not.
        Optimistic about new hold ids when nothing is in flight (module docstring); a
        refusal of an id not yet read reads it first (`Unread`, `_apply`)."""
        optimistic = bool(msgs) and not read_new and self._tail is None and self.store.fast_path_open()
        now = self.clock.now()
        self._serial += 1
        book = self.book
        book.begin(now, self._iso(now), self._serial, self.trace is not None)
        if msgs:
            self._prefetch(msgs, optimistic)
        book.expire_due()
        replies = [self._apply(m) for m in msgs]
        w = self._flush()
        # the callers' writes that go with a settlement that was not refused (Capture.also)
        also = [m.also for m, r in zip(msgs, replies)
                if (type(m) is Capture or type(m) is Release) and m.also is not None and not refused(r)]
        batch = _Batch(replies, self._epoch, self._tail, book.trace, book.settled)
        if not w.empty() or also:
            org_id, link = self.org_id, [self._last_write]

            def write(conn: Any) -> Any:
                prev, link[0] = link[0], None  # drop the link: history must not stay reachable
                if prev is not None and (prev.error is not None or not prev.result):
                    raise ChainBroken(f"balance {org_id}: the previous batch did not commit")
                sql.persist(conn, org_id, w)
                notices.queue_warnings(conn, org_id, w)
                for extra in also:
                    extra(conn)
                return True

            if optimistic:
                item = self.store.commit_now(write)
                if item is None or isinstance(item.error, sql.HoldIdTaken):
                    self._reload()  # nothing of this batch was applied and nothing is in flight
                    return self._decide(msgs, read_new=True)
            else:
                item = self.store.submit(write)
            batch.item = self._last_write = item
        self._tail = batch
        return batch

    async def _complete(self, batch: "_Batch") -> list[Any]:
        """Replies of `batch` once it and every batch before it are settled."""
        failed = False
        try:
            prev = batch.prev
            batch.prev = None
            if prev is not None:
                await prev.done.wait()
                failed = not prev.ok and prev.epoch == batch.epoch
            if not failed and batch.item is not None:
                try:
                    await self.store.wait(batch.item)
                except Exception:
                    failed = True
        except BaseException:
            self._release_batch(batch)
            raise
        return self._conclude(batch, failed)

    def _conclude(self, batch: "_Batch", failed: bool) -> list[Any]:
        """A failure fails this batch and the ones decided on top of it and reloads memory
        once; success remembers what the batch settled and publishes its trace."""
        try:
            if failed:
                if batch.epoch == self._epoch:
                    if batch.item is not None and batch.item.error is not None:
                        log.error("balance %s: commit failed (%r); reloading from the database", self.org_id,
                                  batch.item.error)
                    self._reload()
                return [fail(Unavailable(UNAVAILABLE)) for _ in batch.replies]
            batch.ok = True
            self.book.committed(batch.settled, RECENT)  # remembered compactly for repeats
            if batch.trace and self.trace is not None:
                self.trace.extend(batch.trace)
            return batch.replies
        finally:
            self._release_batch(batch)

    def _release_batch(self, batch: "_Batch") -> None:
        if not batch.done.is_set():
            batch.done.set()
            if self._tail is batch:
                self._tail = None
            self._slots.release()

    def _apply(self, m: Any) -> Any:
        try:
            handler = self.handler_for(m)
        except TypeError as e:
            return fail(e)
        try:
            try:
                return handler(m)
            except Unread as e:  # a hold id left unread is about to be refused: read it, decide again
                self._lookup([e.hold_id])
                return handler(m)
        except ApiError as e:  # validation happens before any mutation
            return fail(e)

    def _prefetch(self, msgs: list[Any], optimistic: bool) -> None:
        """Holds named by the batch that memory does not know: new, settled long ago (or
        before a restart), another organization's, or unknown. One query for the batch;
        an optimistic batch leaves new hold ids unread (`_unread`, see `_decide`)."""
        book = self.book
        active, settling, recent = book.active, book.settling, book.recent
        unknown: dict[str, bool] = {}  # id -> named by a capture or release
        for m in msgs:
            t = type(m)
            if t is PlaceHold or t is Capture or t is Release:
                hid = m.hold_id
                if type(hid) is str and hid not in active and hid not in settling and hid not in recent:
                    unknown[hid] = unknown.get(hid, False) or t is not PlaceHold
        if not unknown:
            return
        if optimistic:
            book.unread = {hid for hid, settles in unknown.items() if not settles}
            if len(book.unread) == len(unknown):
                return
            self._lookup([hid for hid, settles in unknown.items() if settles])
        else:
            self._lookup(list(unknown))

    def _lookup(self, ids: list[str]) -> None:
        """Read holds by id into what memory knows: settled ones as recent, another
        organization's as foreign."""
        for r in sql.holds_by_ids(self.store, ids):
            if r["organization_id"] != self.org_id:
                self.book.add_foreign(r["id"])
            elif r["status"] == "held":
                raise RuntimeError(f"hold {r['id']} is held in the DB but not in memory")
            else:
                self.book.remember((r["id"], r["job_id"], r["workflow_run_id"], r["project_id"], r["description"],
                                r["status"], r["amount_uc"], r["captured_uc"], r["created_at"], r["settled_at"]), RECENT)

    def _flush(self) -> sql.Writes:
        """The book's staged changes of this batch as one store write."""
        book, org = self.book, self.org_id
        serial = book.serial
        w = sql.Writes()
        for lot in book.dirty_lots.values():
            if lot.new_in == serial:
                w.lot_inserts.append((lot.id, org, lot.grant_id, lot.source, lot.amount, lot.remaining,
                                      lot.reserved, lot.expired_uc, lot.expires_iso, lot.expires_at, lot.expired_at,
                                      lot.reason, lot.created_at))
            else:
                w.lot_updates.append((lot.remaining, lot.reserved, lot.expired_uc, lot.expired_at, lot.id))
        for h in book.dirty_holds.values():
            if h.new_in == serial:
                placed = [(lot.id, uc) for lot, uc in h.slices] if h.status == "held" else h.placed_slices
                w.hold_inserts.append((h.id, org, h.job_id, h.workflow_run_id, h.project_id, h.description,
                                       h.status, h.amount, h.captured, sql.dump_slices(placed or []),
                                       h.created_at, h.settled_at, h.api_key_id))
            else:
                w.hold_updates.append((h.status, h.captured, h.settled_at, h.id))
        if book.settings_dirty:
            w.settings = (org, book.threshold, book.notified_at)
        w.ledger = book.ledger
        w.notices = book.notices
        spend = book.spend
        if spend.dirty_spent:
            w.figures = spend.staged_spent()
        if spend.dirty_limits:
            w.limits = spend.staged_limits()
        w.warnings = spend.warnings
        return w

    # -- the messages: the book decides, the actor answers ---------------------------------------
    @on(PlaceHold)
    def _place(self, m: PlaceHold) -> Any:
        return self.book.place(m.hold_id, m.amount_uc, m.job_id, m.workflow_run_id, m.project_id, m.description,
                               m.api_key_id)

    @on(LimitPut)
    def _limit(self, m: LimitPut) -> Any:
        return self.book.put_limit(m.scope, m.scope_id, m.limit_uc)

    @on(SpendCheck)
    def _check(self, m: SpendCheck) -> Any:
        return self.book.check_spend(m.amount_uc, m.project_id, m.api_key_id)

    @on(Capture)
    def _capture(self, m: Capture) -> Any:
        return self.book.capture(m.hold_id, m.amount_uc)

    @on(Release)
    def _release(self, m: Release) -> Any:
        return self.book.release(m.hold_id)

    @on(Grant)
    def _grant(self, m: Grant) -> Any:
        return self.book.grant(m.grant_id, m.source, m.amount_uc, m.expires_at, m.reason)

    @on(SettingsPut)
    def _settings(self, m: SettingsPut) -> Any:
        self.book.put_settings(m.low_balance_threshold_uc)
        return sql.settings_view(self.book.threshold, self.book.notified_at)

    @on(Snapshot)
    def _snapshot(self, m: Snapshot) -> dict[str, Any]:
        return self.state()

    def state(self) -> dict[str, Any]:
        """Canonical memory state; a fresh actor loaded from the DB must give the same."""
        return self.book.state()

    @on(Sync)
    def _sync(self, m: Sync) -> dict[str, Any]:
        return {"available_uc": self.book.available, "held_uc": self.book.held}

    @on(Stop)
    def _stop(self, m: Stop) -> None:
        self.done = True
        return None

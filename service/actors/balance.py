"""The balance actor: one per organization, the only owner of its credits.

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

import bisect
import logging
import math
from collections import OrderedDict
from functools import partial
from typing import Any, Callable, NamedTuple

import trio

from service.actors.billing_messages import Capture, Grant, PlaceHold, Release, SettingsPut, Snapshot, Stop, Sync
from service.actors.runtime import Actor, Deferred, fail
from service.clock import iso, parse_iso
from service.errors import ApiError, Conflict, InsufficientCredits, NotFound, Unavailable, Unprocessable
from service.machines import HOLD, LOW_BALANCE
from service.money import fmt
from service.storage import billing as sql

log = logging.getLogger(__name__)

MAX_UC = 10 ** 15  # 1e9 credits: any single amount above this is refused (int64 headroom)
RECENT = 4096      # committed settled holds kept in memory for idempotent repeats; older ones come
                   # from the DB (holds settled by a batch still in flight are kept apart until it commits)
SIGNUP_UC = 200 * 1_000_000
SIGNUP_DAYS = 30


NOTHING: frozenset = frozenset()
UNAVAILABLE = "The balance could not be updated; try again."
IN_FLIGHT = 2      # batches decided but not yet committed: one committing, the next queued behind it
SPLIT_FROM = 128   # a burst of at least this many messages is decided in two halves (smaller commits;
                   # measured: helps p99 at 256 requesters, costs CPU at 64)


class ChainBroken(Exception):
    """A batch's write refuses to apply because the batch before it did not commit."""


class _Batch:
    __slots__ = ("replies", "epoch", "prev", "trace", "settled", "item", "done", "ok")

    def __init__(self, replies, epoch, prev, trace, settled) -> None:
        self.replies = replies
        self.settled = settled
        self.epoch = epoch
        self.prev = prev
        self.trace = trace
        self.item = None
        self.done = trio.Event()
        self.ok = False


class Lot:
    __slots__ = ("id", "grant_id", "source", "amount", "remaining", "reserved", "expired_uc", "expires_at",
                 "expires_iso", "expired_at", "reason", "created_at", "key", "new_in")

    def __init__(self, id, grant_id, source, amount, remaining, reserved, expired_uc, expires_at, expires_iso,
                 expired_at, reason, created_at) -> None:
        self.id = id
        self.grant_id = grant_id
        self.source = source
        self.amount = amount
        self.remaining = remaining
        self.reserved = reserved
        self.expired_uc = expired_uc
        self.expires_at = expires_at      # service-time float or None
        self.expires_iso = expires_iso
        self.expired_at = expired_at      # ISO time the actor expired it, or None
        self.reason = reason
        self.created_at = created_at
        self.key = (expires_at is None, expires_at if expires_at is not None else 0.0, created_at, id)
        self.new_in = -1                  # serial of the batch that created it (its INSERT)

    def view(self) -> dict:
        return {"id": self.id, "grant_id": self.grant_id, "source": self.source, "amount": fmt(self.amount),
                "remaining": fmt(self.remaining), "expires_at": self.expires_iso, "reason": self.reason,
                "created_at": self.created_at, "amount_uc": self.amount, "remaining_uc": self.remaining}


class Settled(NamedTuple):
    """A settled hold, as remembered for repeats. Kept in memory as a plain tuple of atomics
    (`tuple(settled)`), which Python's cyclic GC stops tracking, so thousands cost no GC
    time; the named view is built on the rare repeat."""

    id: str
    job_id: str | None
    workflow_run_id: str | None
    project_id: str | None
    description: str | None
    status: str
    amount: int
    captured: int | None
    created_at: str
    settled_at: str | None


class Hold:
    __slots__ = ("id", "job_id", "workflow_run_id", "project_id", "description", "status", "amount", "captured",
                 "slices", "created_at", "settled_at", "new_in", "placed_slices")

    def __init__(self, id, job_id, workflow_run_id, project_id, description, status, amount, captured, slices,
                 created_at, settled_at) -> None:
        self.id = id
        self.job_id = job_id
        self.workflow_run_id = workflow_run_id
        self.project_id = project_id
        self.description = description
        self.status = status
        self.amount = amount
        self.captured = captured
        self.slices = slices              # [(Lot, uc)] for outstanding holds; [] once settled
        self.created_at = created_at
        self.settled_at = settled_at
        self.new_in = -1                  # serial of the batch that placed it (its INSERT)
        self.placed_slices: str | None = None


def _bad_amount(v: Any, zero_ok: bool) -> bool:
    return type(v) is not int or v < (0 if zero_ok else 1) or v > MAX_UC


class BalanceActor(Actor):
    def __init__(self, node, org_id: str, *, trace: list | None = None) -> None:
        self.store = node.store
        self.clock = node.clock
        self.org_id = org_id
        self.trace = trace        # a list: committed decisions are appended (benchmark, tests)
        self._slots = trio.Semaphore(IN_FLIGHT)
        self._epoch = 0
        self._last_write = None   # the store item of the last submitted write of this epoch
        self._tail: _Batch | None = None
        self._serial = 0          # batch counter (marks rows a batch inserts)
        self._iso_sec: int | None = None
        self._iso_prefix = ""
        self._reset()

    # -- loading -----------------------------------------------------------------------------
    def _reset(self) -> None:
        self.lots: dict[str, Lot] = {}
        self.by_grant: dict[str, Lot] = {}
        self.order: list[Lot] = []          # unexpired lots with credits left, in spend order
        self.active: dict[str, Hold] = {}
        self.settling: dict[str, Hold] = {}  # settled by a batch not yet committed
        self.recent: OrderedDict[str, tuple] = OrderedDict()  # plain tuples of Settled fields
        self.available = 0
        self.held = 0
        self.threshold: int | None = None
        self.notified_at: str | None = None

    async def load(self) -> None:
        self._load()

    def _load(self) -> None:
        self._reset()
        lots, holds, settings = sql.load_org(self.store, self.org_id)
        persisted_reserved = {}
        for r in lots:
            lot = Lot(r["id"], r["grant_id"], r["source"], r["amount_uc"], r["remaining_uc"], 0, r["expired_uc"],
                      r["expires_ts"], r["expires_at"], r["expired_at"], r["reason"], r["created_at"])
            self.lots[lot.id] = lot
            self.by_grant[lot.grant_id] = lot
            persisted_reserved[lot.id] = r["reserved_uc"]
        for r in holds:
            slices = [(self.lots[lot_id], uc) for lot_id, uc in sql.load_slices(r["slices"])]
            for lot, uc in slices:
                lot.reserved += uc
            self.active[r["id"]] = Hold(r["id"], r["job_id"], r["workflow_run_id"], r["project_id"],
                                        r["description"], "held", r["amount_uc"], None, slices, r["created_at"],
                                        None)
            self.held += r["amount_uc"]
        for lot in self.lots.values():
            if lot.reserved != persisted_reserved[lot.id]:
                raise RuntimeError(f"lot {lot.id}: reserved {persisted_reserved[lot.id]} in the DB but the "
                                   f"outstanding holds reserve {lot.reserved}")
            if lot.expired_at is None and lot.remaining > 0:
                self.order.append(lot)
                self.available += lot.remaining - lot.reserved
        self.order.sort(key=lambda lot: lot.key)
        if settings is not None:
            self.threshold = settings["low_balance_threshold_uc"]
            self.notified_at = settings["low_balance_notified_at"]

    # -- the loop's hooks ----------------------------------------------------------------------
    def batch_limit(self, waiting: int) -> int:
        """A big burst is decided in two halves: the second is decided (and queued behind)
        while the first commits, so deciding and committing overlap instead of alternating."""
        return waiting if waiting < SPLIT_FROM else (waiting + 1) // 2

    def next_deadline(self) -> float | None:
        order = self.order
        return order[0].expires_at if order else None

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
        refusal of an id not yet read reads it first (`_place`)."""
        optimistic = bool(msgs) and not read_new and self._tail is None and self.store.fast_path_open()
        now = self.clock.now()
        self._now = now
        self._now_iso = self._iso(now)
        self._serial += 1
        self._w = sql.Writes()
        self._dirty_lots: dict[str, Lot] = {}
        self._dirty_holds: dict[str, Hold] = {}
        self._settings_dirty = False
        self._foreign: set[str] = NOTHING  # type: ignore[assignment]  # shared and empty until a first add
        self._settled: list[Hold] = []
        self._pending_trace: list | None = [] if self.trace is not None else None
        self._unread: set[str] = NOTHING  # type: ignore[assignment]  # shared and empty until replaced
        if msgs:
            self._prefetch(msgs, optimistic)
        self._expire_due(now)
        replies = [self._apply(m) for m in msgs]
        w = self._flush()
        batch = _Batch(replies, self._epoch, self._tail, self._pending_trace, self._settled)
        if not w.empty():
            org_id, link = self.org_id, [self._last_write]

            def write(conn):
                prev, link[0] = link[0], None  # drop the link: history must not stay reachable
                if prev is not None and (prev.error is not None or not prev.result):
                    raise ChainBroken(f"balance {org_id}: the previous batch did not commit")
                sql.persist(conn, org_id, w)
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
            for h in batch.settled:  # committed: remembered compactly for repeats
                self.settling.pop(h.id, None)
                self._remember((h.id, h.job_id, h.workflow_run_id, h.project_id, h.description, h.status,
                                h.amount, h.captured, h.created_at, h.settled_at))
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
        handler = HANDLERS.get(type(m))
        if handler is None:
            return fail(TypeError(f"balance actor: unknown message {type(m).__name__}"))
        try:
            return handler(self, m)
        except ApiError as e:  # validation happens before any mutation
            return fail(e)

    def _prefetch(self, msgs: list[Any], optimistic: bool) -> None:
        """Holds named by the batch that memory does not know: new, settled long ago (or
        before a restart), another organization's, or unknown. One query for the batch;
        an optimistic batch leaves new hold ids unread (`_unread`, see `_decide`)."""
        active, settling, recent = self.active, self.settling, self.recent
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
            self._unread = {hid for hid, settles in unknown.items() if not settles}
            if len(self._unread) == len(unknown):
                return
            self._lookup([hid for hid, settles in unknown.items() if settles])
        else:
            self._lookup(list(unknown))

    def _lookup(self, ids: list[str]) -> None:
        """Read holds by id into what memory knows: settled ones as recent, another
        organization's as foreign."""
        for r in sql.holds_by_ids(self.store, ids):
            if r["organization_id"] != self.org_id:
                if self._foreign is NOTHING:
                    self._foreign = set()
                self._foreign.add(r["id"])
            elif r["status"] == "held":
                raise RuntimeError(f"hold {r['id']} is held in the DB but not in memory")
            else:
                self._remember((r["id"], r["job_id"], r["workflow_run_id"], r["project_id"], r["description"],
                                r["status"], r["amount_uc"], r["captured_uc"], r["created_at"], r["settled_at"]))

    def _remember(self, hold: tuple) -> None:
        """`hold` is a plain tuple of `Settled`'s fields."""
        recent = self.recent
        recent[hold[0]] = hold
        if len(recent) > RECENT:
            recent.popitem(last=False)

    def _flush(self) -> sql.Writes:
        w, org = self._w, self.org_id
        for lot in self._dirty_lots.values():
            if lot.new_in == self._serial:
                w.lot_inserts.append((lot.id, org, lot.grant_id, lot.source, lot.amount, lot.remaining,
                                      lot.reserved, lot.expired_uc, lot.expires_iso, lot.expires_at, lot.expired_at,
                                      lot.reason, lot.created_at))
            else:
                w.lot_updates.append((lot.remaining, lot.reserved, lot.expired_uc, lot.expired_at, lot.id))
        for h in self._dirty_holds.values():
            if h.new_in == self._serial:
                w.hold_inserts.append((h.id, org, h.job_id, h.workflow_run_id, h.project_id, h.description,
                                       h.status, h.amount, h.captured,
                                       sql.dump_slices([(lot.id, uc) for lot, uc in h.slices])
                                       if h.status == "held" else h.placed_slices,
                                       h.created_at, h.settled_at))
            else:
                w.hold_updates.append((h.status, h.captured, h.settled_at, h.id))
        if self._settings_dirty:
            w.settings = (org, self.threshold, self.notified_at)
        return w

    def _ledger(self, kind: str, amount: int, lot: Lot, hold: Hold | None = None, description: str | None = None):
        if hold is None or kind == "expiry":
            project_id = job_id = run_id = None
        else:
            project_id, job_id, run_id = hold.project_id, hold.job_id, hold.workflow_run_id
        self._w.ledger.append((sql.new_id(), self.org_id, self._now_iso, kind, amount, lot.source, lot.id,
                               hold.id if hold is not None else None, project_id, job_id, run_id, description))

    def _record(self, *entry) -> None:
        if self._pending_trace is not None:
            self._pending_trace.append(entry)

    # -- expiry ----------------------------------------------------------------------------------
    def _expire_due(self, now: float) -> None:
        order = self.order
        while order and order[0].expires_at is not None and order[0].expires_at <= now:
            self._expire(order.pop(0))

    def _expire(self, lot: Lot) -> None:
        free = lot.remaining - lot.reserved
        lot.expired_uc += free
        lot.expired_at = self._now_iso
        self.available -= free
        if free:
            self._ledger("expiry", -free, lot, description="Credits expired")
        self._dirty_lots[lot.id] = lot
        self._record("expire", self._now, lot.id, free)
        self._check_low()

    # -- holds -------------------------------------------------------------------------------------
    def _hold_reply(self, h: Hold | Settled | None) -> dict:
        assert h is not None  # asked only for a hold this actor holds or has settled
        return {"id": h.id, "organization_id": self.org_id, "job_id": h.job_id,
                "workflow_run_id": h.workflow_run_id, "project_id": h.project_id, "description": h.description,
                "status": h.status, "amount_uc": h.amount, "captured_uc": h.captured, "created_at": h.created_at,
                "settled_at": h.settled_at}

    def _find(self, hold_id: str) -> Hold | Settled | None:
        h = self.active.get(hold_id)
        if h is None:
            h = self.settling.get(hold_id)
            if h is None:
                t = self.recent.get(hold_id)
                if t is not None:
                    return Settled._make(t)
        return h

    def _place(self, m: PlaceHold) -> Any:
        if not isinstance(m.hold_id, str) or not m.hold_id:
            raise Unprocessable("hold_id is required.", {"hold_id": m.hold_id})
        h = self._find(m.hold_id)
        if h is not None:
            self._record("dup", self._now, "hold", m.hold_id)
            return self._hold_reply(h)
        if m.hold_id in self._foreign:
            raise Conflict("This hold id is already in use.", {"hold_id": m.hold_id})
        amount = m.amount_uc
        if m.hold_id in self._unread and (_bad_amount(amount, zero_ok=True) or amount > self.available):
            self._unread.discard(m.hold_id)  # refusing: a repeat must get its original hold instead
            self._lookup([m.hold_id])
            return self._place(m)
        if _bad_amount(amount, zero_ok=True):
            raise Unprocessable("A hold amount must be a whole number of micro-credits, zero or more.",
                                {"amount_uc": amount})
        if amount > self.available:
            self._record("hold", self._now, m.hold_id, amount, None, self.available)
            raise InsufficientCredits("Not enough credits.",
                                      {"required": fmt(amount), "available": fmt(self.available)})
        HOLD.apply(None, "place")
        h = Hold(m.hold_id, m.job_id, m.workflow_run_id, m.project_id, m.description, "held", amount, None, [],
                 self._now_iso, None)
        left = amount
        slices = h.slices
        dirty = self._dirty_lots
        for lot in self.order:
            if not left:
                break
            free = lot.remaining - lot.reserved
            if free <= 0:
                continue
            take = free if free < left else left
            lot.reserved += take
            left -= take
            slices.append((lot, take))
            dirty[lot.id] = lot
            self._ledger("hold", -take, lot, h, m.description)
        assert left == 0, "available disagrees with the lots"
        self.available -= amount
        self.held += amount
        self.active[h.id] = h
        self._dirty_holds[h.id] = h
        h.new_in = self._serial
        self._record("hold", self._now, h.id, amount, tuple((lot.id, uc) for lot, uc in slices), self.available + amount)
        self._check_low()
        return self._hold_reply(h)

    def _settle(self, m, event: str) -> Hold | None:
        """Common part of capture and release: the hold, or None when it is a repeat."""
        if not isinstance(m.hold_id, str):
            raise NotFound("Hold not found.", {"hold_id": m.hold_id})
        h = self._find(m.hold_id)
        if h is None:
            raise NotFound("Hold not found.", {"hold_id": m.hold_id})
        if not HOLD.can(h.status, event):
            other = "released" if h.status == "released" else "captured"
            raise Conflict(f"The hold was already {other}.", {"hold_id": h.id, "status": h.status})
        if h.status != "held":  # captured + capture, released + release: settles once
            self._record("dup", self._now, event, h.id)
            return None
        return h  # type: ignore[return-value]  # a held hold is active, never a Settled

    def _return_part(self, lot: Lot, uc: int, h: Hold) -> None:
        """`uc` of a slice goes back to its lot; from an expired lot it expires at once."""
        if not uc:
            return
        if lot.expired_at is not None:
            lot.expired_uc += uc
            self._ledger("expiry", -uc, lot, h, "Returned credits of an expired lot expired")
        else:
            self.available += uc

    def _capture(self, m: Capture) -> Any:
        h = self._settle(m, "capture")
        if h is None:
            return self._hold_reply(self._find(m.hold_id))
        amount = h.amount if m.amount_uc is None else m.amount_uc
        if _bad_amount(amount, zero_ok=True):
            raise Unprocessable("A capture amount must be a whole number of micro-credits, zero or more.",
                                {"amount_uc": amount})
        if amount > h.amount:
            raise Unprocessable("Cannot capture more than the hold.",
                                {"held": fmt(h.amount), "requested": fmt(amount)})
        HOLD.apply("held", "capture")
        left = amount
        desc = f"Charged {fmt(amount)} of {fmt(h.amount)} held"
        dirty = self._dirty_lots
        for lot, s in h.slices:
            c = s if s <= left else left
            left -= c
            lot.remaining -= c
            lot.reserved -= s
            self._ledger("capture", s - c, lot, h, desc)
            self._return_part(lot, s - c, h)
            dirty[lot.id] = lot
            if lot.remaining == 0 and lot.expired_at is None:
                self.order.remove(lot)
        self._finish(h, "captured", amount)
        self._record("capture", self._now, h.id, amount)
        self._check_low()
        return self._hold_reply(h)

    def _release(self, m: Release) -> Any:
        h = self._settle(m, "release")
        if h is None:
            return self._hold_reply(self._find(m.hold_id))
        HOLD.apply("held", "release")
        dirty = self._dirty_lots
        for lot, s in h.slices:
            lot.reserved -= s
            self._ledger("release", s, lot, h, "Hold released")
            self._return_part(lot, s, h)
            dirty[lot.id] = lot
        self._finish(h, "released", None)
        self._record("release", self._now, h.id)
        self._check_low()
        return self._hold_reply(h)

    def _finish(self, h: Hold, status: str, captured: int | None) -> None:
        if h.new_in == self._serial:  # placed in this batch: its insert carries the slices
            h.placed_slices = sql.dump_slices([(lot.id, uc) for lot, uc in h.slices])
        h.status = status
        h.captured = captured
        h.settled_at = self._now_iso
        h.slices = []
        self.held -= h.amount
        del self.active[h.id]
        self.settling[h.id] = h
        self._settled.append(h)
        self._dirty_holds[h.id] = h

    # -- grants ------------------------------------------------------------------------------------
    def _grant(self, m: Grant) -> Any:
        lot = self.by_grant.get(m.grant_id)
        if lot is not None:
            self._record("dup", self._now, "grant", m.grant_id)
            return lot.view()
        if _bad_amount(m.amount_uc, zero_ok=False):
            raise Unprocessable("A grant must be a positive whole number of micro-credits.",
                                {"amount_uc": m.amount_uc})
        if not isinstance(m.source, str) or not m.source or len(m.source) > 64:
            raise Unprocessable("source must be a name of 1 to 64 characters.", {"source": m.source})
        if not isinstance(m.grant_id, str) or not m.grant_id:
            raise Unprocessable("grant_id is required.", {"grant_id": m.grant_id})
        exp_iso = exp = None
        if m.expires_at is not None:
            # Stored to the microsecond (rounded down, so advancing the clock by exactly the
            # lifetime expires it); the deadline is exactly the stored value.
            exp_iso = iso(math.floor(m.expires_at * 1_000_000) / 1_000_000)
            exp = parse_iso(exp_iso)
        lot = Lot(sql.new_id(), m.grant_id, m.source, m.amount_uc, m.amount_uc, 0, 0, exp, exp_iso, None, m.reason,
                  self._now_iso)
        self.lots[lot.id] = lot
        self.by_grant[lot.grant_id] = lot
        self._dirty_lots[lot.id] = lot
        lot.new_in = self._serial
        self._ledger("grant", lot.amount, lot, description=m.reason or f"{m.source} credits")
        self._record("grant", self._now, m.grant_id, lot.id, lot.amount, exp, lot.created_at, lot.source)
        self.available += lot.amount
        if exp is not None and exp <= self._now:
            self._expire(lot)
        else:
            bisect.insort(self.order, lot, key=lambda x: x.key)
        self._check_low()
        return lot.view()

    # -- low-balance warning ---------------------------------------------------------------------
    def _check_low(self) -> None:
        threshold = self.threshold
        if threshold is None or self.available >= threshold:
            return
        _, effects = LOW_BALANCE.apply("armed" if self.notified_at is None else "notified", "below")
        if "notify" in effects:
            self.notified_at = self._now_iso
            self._settings_dirty = True
            self._w.notices.append((fmt(self.available), fmt(threshold), self._now_iso))
            self._record("notify", self._now, self.available, threshold)

    def _settings(self, m: SettingsPut) -> Any:
        t = m.low_balance_threshold_uc
        if t is not None and _bad_amount(t, zero_ok=True):
            raise Unprocessable("low_balance_threshold cannot be negative." if type(t) is int and t < 0
                                else "low_balance_threshold must be a number of credits.",
                                {"field": "low_balance_threshold"})
        _, effects = LOW_BALANCE.apply("armed" if self.notified_at is None else "notified", "settings_put")
        self.threshold = t
        self.notified_at = None
        self._settings_dirty = True
        self._record("settings", self._now, t)
        if "check_now" in effects:
            self._check_low()
        return sql.settings_view(self.threshold, self.notified_at)

    # -- inspection ------------------------------------------------------------------------------
    def _snapshot(self, m: Snapshot) -> dict:
        return self.state()

    def state(self) -> dict:
        """Canonical memory state; a fresh actor loaded from the DB must give the same."""
        return {
            "organization_id": self.org_id,
            "available_uc": self.available,
            "held_uc": self.held,
            "lots": {lot.id: {"grant_id": lot.grant_id, "source": lot.source, "amount_uc": lot.amount,
                              "remaining_uc": lot.remaining, "reserved_uc": lot.reserved,
                              "expired_uc": lot.expired_uc, "expires_at": lot.expires_at,
                              "expired": lot.expired_at is not None}
                     for lot in sorted(self.lots.values(), key=lambda x: x.key)},
            "order": [lot.id for lot in self.order],
            "holds": {h.id: {"amount_uc": h.amount, "slices": [(lot.id, uc) for lot, uc in h.slices]}
                      for h in self.active.values()},
            "low_balance_threshold_uc": self.threshold,
            "low_balance_notified_at": self.notified_at,
        }

    def _sync(self, m: Sync) -> dict:
        return {"available_uc": self.available, "held_uc": self.held}

    def _stop(self, m: Stop) -> None:
        self.done = True
        return None


HANDLERS: dict[type, Callable[[BalanceActor, Any], Any]] = {
    PlaceHold: BalanceActor._place, Capture: BalanceActor._capture, Release: BalanceActor._release,
    Grant: BalanceActor._grant, SettingsPut: BalanceActor._settings, Snapshot: BalanceActor._snapshot,
    Sync: BalanceActor._sync, Stop: BalanceActor._stop,
}

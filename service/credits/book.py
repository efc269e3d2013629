"""One organization's credits in memory and the rules that move them (pure: no trio, no SQL).

`CreditBook` places, captures and releases holds, grants and expires lots and keeps the
low-balance warning; the rules are those of `service.actors.balance.actor`'s docstring. What a
transition does is read from the HOLD and LOW_BALANCE tables (`service.machines`): each
effect named there is bound to a method of the book (`HOLD_EFFECTS` / `LOW_BALANCE_EFFECTS`,
`service.effects`, the binding every actor uses too), so the book never decides a transition
beside the table.

The balance actor holds one book and drives it one batch at a time: `begin` opens a batch
(its time, its serial), the rules stage what changed (`dirty_lots`, `dirty_holds`, `ledger`
rows, `notices`, `settled`, the optional `trace`), and the actor turns that into one write,
commits it and replies. Lot and ledger ids come from `new_id` and expiry timestamps from
`expiry` (given by the actor), so tests can drive the book with plain functions.

The spend limits of projects and keys are `service.credits.limits`, asked by `place`.

(Over 400 lines on purpose: every rule reads and changes the same lots, holds and
staged rows; cut in two, each half would reach into the other's state.)
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Any, Callable

from service.credits.limits import SpendLimits, month_of
from service.credits.records import Hold, Lot, Settled
from service.credits.rules import available, free_part, is_due
from service.effects import EffectHandlers
from service.errors import Conflict, InsufficientCredits, NotFound, Unprocessable
from service.machines import HOLD, LOW_BALANCE, NEW
from service.money import bad_amount, fmt

__all__ = ["HOLD_EFFECTS", "LOW_BALANCE_EFFECTS", "CreditBook", "Hold", "Lot", "Settled", "Unread"]

NOTHING: frozenset[str] = frozenset()


class Unread(Exception):
    """The rule needs hold `hold_id` read from the database first (it was left unread
    optimistically and is about to be refused): read it, then apply the message again."""

    def __init__(self, hold_id: str) -> None:
        super().__init__(hold_id)
        self.hold_id = hold_id


class CreditBook:
    def __init__(self, org_id: str, new_id: Callable[[], str],
                 expiry: Callable[[float], tuple[float, str]]) -> None:
        self.org_id = org_id
        self.new_id = new_id      # ids of new lots and ledger rows
        self.expiry = expiry      # a grant's expires_at -> (stored deadline, its ISO text)
        self.spend = SpendLimits()  # project and key spend limits (service.credits.limits)
        self.reset()
        self.begin(0.0, "", 0, False)

    def reset(self) -> None:
        self.lots: dict[str, Lot] = {}
        self.by_grant: dict[str, Lot] = {}
        self.order: list[Lot] = []          # unexpired lots with credits left, in spend order
        self.active: dict[str, Hold] = {}
        self.settling: dict[str, Hold] = {}  # settled by a batch not yet committed
        self.recent: OrderedDict[str, tuple[Any, ...]] = OrderedDict()  # plain tuples of Settled fields
        self.available = 0
        self.held = 0
        self.threshold: int | None = None
        self.notified_at: str | None = None

    def load(self, lots: list[dict[str, Any]], holds: list[tuple[dict[str, Any], list[tuple[str, int]]]],
             settings: dict[str, Any] | None,
             spend: tuple[str, list[dict[str, Any]], list[dict[str, Any]]] | None = None) -> None:
        """Rebuild from stored rows: lots, the held holds with their slices, the settings row,
        and the spend limits (this month, limit rows, figure rows)."""
        self.reset()
        self.spend.load(*(spend or ("", [], [])))
        persisted_reserved = {}
        for r in lots:
            lot = Lot(r["id"], r["grant_id"], r["source"], r["amount_uc"], r["remaining_uc"], 0, r["expired_uc"],
                      r["expires_ts"], r["expires_at"], r["expired_at"], r["reason"], r["created_at"])
            self.lots[lot.id] = lot
            self.by_grant[lot.grant_id] = lot
            persisted_reserved[lot.id] = r["reserved_uc"]
        for r, stored in holds:
            slices = [(self.lots[lot_id], uc) for lot_id, uc in stored]
            for lot, uc in slices:
                lot.reserved += uc
            self.active[r["id"]] = Hold(r["id"], r["job_id"], r["workflow_run_id"], r["project_id"],
                                        r["description"], "held", r["amount_uc"], None, slices, r["created_at"],
                                        None, r.get("api_key_id"), r["created_at"][:7])
            self.held += r["amount_uc"]
        for lot in self.lots.values():
            if lot.reserved != persisted_reserved[lot.id]:
                raise RuntimeError(f"lot {lot.id}: reserved {persisted_reserved[lot.id]} in the DB but the "
                                   f"outstanding holds reserve {lot.reserved}")
            if lot.expired_at is None and lot.remaining > 0:
                self.order.append(lot)
        self.order.sort(key=lambda lot: lot.key)
        self.available = available((lot.remaining, lot.reserved) for lot in self.order)
        if settings is not None:
            self.threshold = settings["low_balance_threshold_uc"]
            self.notified_at = settings["low_balance_notified_at"]

    # -- one batch -------------------------------------------------------------------------------
    def begin(self, now: float, now_iso: str, serial: int, tracing: bool) -> None:
        """Open a batch decided at `now`: fresh change sets, nothing staged."""
        self.now = now
        self.now_iso = now_iso
        self.serial = serial
        self.spend.begin(now_iso, month_of(now))
        self.dirty_lots: dict[str, Lot] = {}
        self.dirty_holds: dict[str, Hold] = {}
        self.settings_dirty = False
        self.ledger: list[tuple[Any, ...]] = []
        self.notices: list[tuple[str, str, str]] = []
        self.settled: list[Hold] = []
        self.trace: list[tuple[Any, ...]] | None = [] if tracing else None
        self.foreign: set[str] = NOTHING  # type: ignore[assignment]  # shared and empty until a first add
        self.unread: set[str] = NOTHING  # type: ignore[assignment]  # shared and empty until replaced

    def next_deadline(self) -> float | None:
        order = self.order
        return order[0].expires_at if order else None

    def remember(self, hold: tuple[Any, ...], keep: int) -> None:
        """`hold` is a plain tuple of `Settled`'s fields (committed: a repeat returns it); the
        `keep` most recent are kept, older repeats are the caller's to read from storage."""
        recent = self.recent
        recent[hold[0]] = hold
        if len(recent) > keep:
            recent.popitem(last=False)

    def committed(self, settled: list[Hold], keep: int) -> None:
        """The batch that settled these holds committed: remember them compactly."""
        for h in settled:
            self.settling.pop(h.id, None)
            self.remember(h.settled(), keep)

    def add_foreign(self, hold_id: str) -> None:
        if self.foreign is NOTHING:
            self.foreign = set()
        self.foreign.add(hold_id)

    def _ledger(self, kind: str, amount: int, lot: Lot, hold: Hold | None = None,
                description: str | None = None) -> None:
        if hold is None or kind == "expiry":
            project_id = job_id = run_id = None
        else:
            project_id, job_id, run_id = hold.project_id, hold.job_id, hold.workflow_run_id
        self.ledger.append((self.new_id(), self.org_id, self.now_iso, kind, amount, lot.source, lot.id,
                            hold.id if hold is not None else None, project_id, job_id, run_id, description))

    def _record(self, *entry: Any) -> None:
        if self.trace is not None:
            self.trace.append(entry)

    # -- expiry ----------------------------------------------------------------------------------
    def expire_due(self) -> None:
        order, now = self.order, self.now
        while order and is_due(order[0].expires_at, now):
            self._expire(order.pop(0))

    def _expire(self, lot: Lot) -> None:
        free = free_part(lot.remaining, lot.reserved)
        lot.expired_uc += free
        lot.expired_at = self.now_iso
        self.available -= free
        if free:
            self._ledger("expiry", -free, lot, description="Credits expired")
        self.dirty_lots[lot.id] = lot
        self._record("expire", self.now, lot.id, free)
        self._check_low()

    # -- holds -------------------------------------------------------------------------------------
    def hold_reply(self, h: Hold | Settled | None) -> dict[str, Any]:
        assert h is not None  # asked only for a hold this book holds or has settled
        return {"id": h.id, "organization_id": self.org_id, "job_id": h.job_id,
                "workflow_run_id": h.workflow_run_id, "project_id": h.project_id, "description": h.description,
                "status": h.status, "amount_uc": h.amount, "captured_uc": h.captured, "created_at": h.created_at,
                "settled_at": h.settled_at}

    def find(self, hold_id: str) -> Hold | Settled | None:
        h = self.active.get(hold_id)
        if h is None:
            h = self.settling.get(hold_id)
            if h is None:
                t = self.recent.get(hold_id)
                if t is not None:
                    return Settled._make(t)
        return h

    def place(self, hold_id: Any, amount: Any, job_id: str | None = None, workflow_run_id: str | None = None,
              project_id: str | None = None, description: str | None = None,
              api_key_id: str | None = None) -> dict[str, Any]:
        """Refusals in order: the amount, the balance, the key's limit, the project's limit."""
        if not isinstance(hold_id, str) or not hold_id:
            raise Unprocessable("hold_id is required.", {"hold_id": hold_id})
        h = self.find(hold_id)
        if h is not None:
            self._record("dup", self.now, "hold", hold_id)
            return self.hold_reply(h)
        if hold_id in self.foreign:
            raise Conflict("This hold id is already in use.", {"hold_id": hold_id})
        if hold_id in self.unread and (bad_amount(amount, zero_ok=True) or amount > self.available
                                       or self.spend.check(project_id, api_key_id, amount) is not None):
            self.unread.discard(hold_id)  # refusing: a repeat must get its original hold instead
            raise Unread(hold_id)
        if bad_amount(amount, zero_ok=True):
            raise Unprocessable("A hold amount must be a whole number of micro-credits, zero or more.",
                                {"amount_uc": amount})
        if amount > self.available:
            self._record("hold", self.now, hold_id, amount, None, self.available)
            raise InsufficientCredits("Not enough credits.",
                                      {"required": fmt(amount), "available": fmt(self.available)})
        over = self.spend.check(project_id, api_key_id, amount)
        if over is not None:
            self._record("limit", self.now, hold_id, amount, over[0], over[1])
            raise self.spend.refuse(over, amount)
        status, effects = HOLD_EFFECTS.transition(NEW, "place")
        h = Hold(hold_id, job_id, workflow_run_id, project_id, description, status, amount, None, [],
                 self.now_iso, None, api_key_id, self.spend.month)
        HOLD_EFFECTS.call(self, effects, h, amount)
        self.active[h.id] = h
        self.dirty_holds[h.id] = h
        h.new_in = self.serial
        self._record("hold", self.now, h.id, amount, tuple((lot.id, uc) for lot, uc in h.slices),
                     self.available + amount)
        self._check_low()
        return self.hold_reply(h)

    def _reserve(self, h: Hold, amount: int) -> None:
        """Effect `reserve`: slices from the lots in spend order, `amount` moves to held."""
        left = amount
        slices = h.slices
        dirty = self.dirty_lots
        for lot in self.order:
            if not left:
                break
            free = free_part(lot.remaining, lot.reserved)
            if free <= 0:
                continue
            take = free if free < left else left
            lot.reserved += take
            left -= take
            slices.append((lot, take))
            dirty[lot.id] = lot
            self._ledger("hold", -take, lot, h, h.description)
        assert left == 0, "available disagrees with the lots"
        self.available -= amount
        self.held += amount
        self.spend.add(h.project_id, h.api_key_id, amount)

    def _settle(self, hold_id: Any, event: str) -> tuple[Hold | None, tuple[str, ...]]:
        """Common part of capture and release: the hold and the effects of `event`, or
        (None, ()) when it is a repeat."""
        if not isinstance(hold_id, str):
            raise NotFound("Hold not found.", {"hold_id": hold_id})
        h = self.find(hold_id)
        if h is None:
            raise NotFound("Hold not found.", {"hold_id": hold_id})
        if not HOLD.can(h.status, event):
            other = "released" if h.status == "released" else "captured"
            raise Conflict(f"The hold was already {other}.", {"hold_id": h.id, "status": h.status})
        if h.status != "held":  # captured + capture, released + release: settles once
            self._record("dup", self.now, event, h.id)
            return None, ()
        return h, HOLD_EFFECTS.transition(h.status, event)[1]  # type: ignore[return-value]  # a held hold is active

    def _return_part(self, lot: Lot, uc: int, h: Hold) -> None:
        """`uc` of a slice goes back to its lot; from an expired lot it expires at once."""
        if not uc:
            return
        if lot.expired_at is not None:
            lot.expired_uc += uc
            self._ledger("expiry", -uc, lot, h, "Returned credits of an expired lot expired")
        else:
            self.available += uc

    def capture(self, hold_id: Any, amount: Any = None) -> dict[str, Any]:
        h, effects = self._settle(hold_id, "capture")
        if h is None:
            return self.hold_reply(self.find(hold_id))
        if amount is None:
            amount = h.amount
        if bad_amount(amount, zero_ok=True):
            raise Unprocessable("A capture amount must be a whole number of micro-credits, zero or more.",
                                {"amount_uc": amount})
        if amount > h.amount:
            raise Unprocessable("Cannot capture more than the hold.",
                                {"held": fmt(h.amount), "requested": fmt(amount)})
        HOLD_EFFECTS.call(self, effects, h, amount)
        self._finish(h, "captured", amount)
        self._record("capture", self.now, h.id, amount)
        self._check_low()
        return self.hold_reply(h)

    def _charge(self, h: Hold, amount: int) -> None:
        """Effect `charge`: the slices in order up to `amount`, even from an expired lot; the
        rest goes back."""
        left = amount
        desc = f"Charged {fmt(amount)} of {fmt(h.amount)} held"
        dirty = self.dirty_lots
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
        self.spend.give_back(h.project_id, h.api_key_id, h.month, h.amount - amount)

    def release(self, hold_id: Any) -> dict[str, Any]:
        h, effects = self._settle(hold_id, "release")
        if h is None:
            return self.hold_reply(self.find(hold_id))
        HOLD_EFFECTS.call(self, effects, h, h.amount)
        self._finish(h, "released", None)
        self._record("release", self.now, h.id)
        self._check_low()
        return self.hold_reply(h)

    def _unreserve(self, h: Hold, amount: int) -> None:
        """Effect `unreserve`: every slice goes back to its lot."""
        dirty = self.dirty_lots
        for lot, s in h.slices:
            lot.reserved -= s
            self._ledger("release", s, lot, h, "Hold released")
            self._return_part(lot, s, h)
            dirty[lot.id] = lot
        self.spend.give_back(h.project_id, h.api_key_id, h.month, h.amount)

    def _finish(self, h: Hold, status: str, captured: int | None) -> None:
        if h.new_in == self.serial:  # placed in this batch: its insert carries the slices
            h.placed_slices = [(lot.id, uc) for lot, uc in h.slices]
        h.status = status
        h.captured = captured
        h.settled_at = self.now_iso
        h.slices = []
        self.held -= h.amount
        del self.active[h.id]
        self.settling[h.id] = h
        self.settled.append(h)
        self.dirty_holds[h.id] = h

    # -- grants ------------------------------------------------------------------------------------
    def grant(self, grant_id: Any, source: Any, amount: Any, expires_at: float | None = None,
              reason: str | None = None) -> dict[str, Any]:
        lot = self.by_grant.get(grant_id)
        if lot is not None:
            self._record("dup", self.now, "grant", grant_id)
            return lot.view()
        if bad_amount(amount, zero_ok=False):
            raise Unprocessable("A grant must be a positive whole number of micro-credits.", {"amount_uc": amount})
        if not isinstance(source, str) or not source or len(source) > 64:
            raise Unprocessable("source must be a name of 1 to 64 characters.", {"source": source})
        if not isinstance(grant_id, str) or not grant_id:
            raise Unprocessable("grant_id is required.", {"grant_id": grant_id})
        exp_iso = exp = None
        if expires_at is not None:
            exp, exp_iso = self.expiry(expires_at)
        lot = Lot(self.new_id(), grant_id, source, amount, amount, 0, 0, exp, exp_iso, None, reason, self.now_iso)
        self.lots[lot.id] = lot
        self.by_grant[lot.grant_id] = lot
        self.dirty_lots[lot.id] = lot
        lot.new_in = self.serial
        self._ledger("grant", lot.amount, lot, description=reason or f"{source} credits")
        self._record("grant", self.now, grant_id, lot.id, lot.amount, exp, lot.created_at, lot.source)
        self.available += lot.amount
        if is_due(exp, self.now):
            self._expire(lot)
        else:
            bisect.insort(self.order, lot, key=lambda x: x.key)
        self._check_low()
        return lot.view()

    # -- low-balance warning ---------------------------------------------------------------------
    def _warning(self) -> str:
        return "armed" if self.notified_at is None else "notified"

    def _check_low(self) -> None:
        """Effect `check_now`, and the check after every change: below the threshold is `below`."""
        threshold = self.threshold
        if threshold is None or self.available >= threshold:
            return
        LOW_BALANCE_EFFECTS.call(self, LOW_BALANCE_EFFECTS.transition(self._warning(), "below")[1])

    def _notify(self) -> None:
        """Effect `notify`: one warning per crossing (email + event, written with the batch)."""
        self.notified_at = self.now_iso
        self.settings_dirty = True
        threshold = self.threshold
        assert threshold is not None  # `below` happens only under a threshold
        self.notices.append((fmt(self.available), fmt(threshold), self.now_iso))
        self._record("notify", self.now, self.available, self.threshold)

    def put_settings(self, threshold: Any) -> None:
        if threshold is not None and bad_amount(threshold, zero_ok=True):
            raise Unprocessable("low_balance_threshold cannot be negative." if type(threshold) is int
                                and threshold < 0 else "low_balance_threshold must be a number of credits.",
                                {"field": "low_balance_threshold"})
        _, effects = LOW_BALANCE_EFFECTS.transition(self._warning(), "settings_put")
        self.threshold = threshold
        self.notified_at = None
        self.settings_dirty = True
        self._record("settings", self.now, threshold)
        LOW_BALANCE_EFFECTS.call(self, effects)

    # -- spend limits ------------------------------------------------------------------------------
    def put_limit(self, scope: Any, scope_id: Any, limit: Any) -> dict[str, Any]:
        """Set a project's monthly or a key's lifetime limit (None: none); re-arms its warning."""
        if scope not in ("project", "api_key") or not isinstance(scope_id, str) or not scope_id:
            raise Unprocessable("A spend limit needs a scope (project or api_key) and an id.", {"scope": scope})
        if limit is not None and bad_amount(limit, zero_ok=True):
            raise Unprocessable("A spend limit must be a whole number of micro-credits, zero or more.",
                                {"limit_uc": limit})
        self.spend.put(scope, scope_id, limit)
        self._record("limit_put", self.now, scope, scope_id, limit)
        return self.spend.view(scope, scope_id)

    def check_spend(self, amount: int, project_id: str | None, api_key_id: str | None) -> None:
        """A product run's start: the refusal a hold of `amount` would meet now (the
        balance, then the key, then the project), without holding anything."""
        if amount > self.available:
            raise InsufficientCredits("Not enough credits to start this run.",
                                      {"required": fmt(amount), "available": fmt(self.available)})
        over = self.spend.check(project_id, api_key_id, amount)
        if over is not None:
            raise self.spend.refuse(over, amount)

    # -- inspection ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Canonical memory state; a fresh book loaded from the DB must give the same."""
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
            "spend": self.spend.state(),
        }


# What each effect of the tables does: HOLD handlers take (hold, amount), LOW_BALANCE ones nothing
# (plain values through `call`, no `Step`, so no facts).
HOLD_EFFECTS: EffectHandlers[None] = EffectHandlers(HOLD, CreditBook, {
    "reserve": "_reserve", "charge": "_charge", "unreserve": "_unreserve",
})
LOW_BALANCE_EFFECTS: EffectHandlers[None] = EffectHandlers(LOW_BALANCE, CreditBook,
                                                           {"notify": "_notify", "check_now": "_check_low"})

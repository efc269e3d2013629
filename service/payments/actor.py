"""The top-up actor: the one owner of an organization's top-ups (registry
`node.topups`, key = organization id). It applies `machines.TOPUP`:

    NEW + checkout_started -> pending        RecordCheckout with a checkout
    NEW + checkout_failed  -> expired        RecordCheckout without one (503, nothing charged)
    pending + confirm      -> paid (add_lot) Confirm: paid_at set, then the balance actor's
                                             Grant(grant_id=top-up id, source "topup",
                                             expires_at = paid_at + expiry_days)
    paid + confirm         -> paid           a repeat: no second lot
    pending + expire       -> expired        Expire (checkout abandoned)

through its binding `TOPUP_EFFECTS` (`service.effects`, as every actor): `add_lot` is
`_on_add_lot`, work left for after `paid` is committed.

The lot is granted after `paid` is committed (crash point `payment_verified` sits between
the two) and recorded (`lot_id`) after the grant. The
grant is idempotent on the top-up id, so a confirmation that was cut short (crash, balance
actor busy or down) is completed by the next confirmation of the same top-up, by the
actor's own retry timer (backoff up to 10 minutes), and after a restart by `recover`.
Asks flow one way: HTTP -> top-up actor -> balance actor.

Replies are top-up rows (see `service.storage.topups`). Errors: NotFound for an unknown
top-up (or one of another organization), Conflict for paying an expired top-up, for a
provider reference that is not the top-up's checkout, or for a payment (`Paid`) whose
amount, currency or organization is not the order's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from service.actors.balance.messages import Grant
from service.actors.runtime import Actor, on
from service.clock import parse_iso
from service.crash import crashpoint
from service.effects import EffectHandlers, Step, after
from service.errors import Conflict, NotFound, ServiceError
from service.machines import NEW, TOPUP, IllegalTransition
from service.money import UC, fmt
from service.payments.base import Checkout, Paid, TopupDraft
from service.payments.pricing import DAY
from service.storage import topups as sql

log = logging.getLogger(__name__)

RETRY_FIRST = 5.0
RETRY_MAX = 600.0


@dataclass(frozen=True)
class TopupFacts:
    """What the top-up actor tells the TOPUP handlers about a move."""

    topup_id: str


@dataclass(frozen=True)
class RecordCheckout:
    draft: TopupDraft
    provider: str
    created_by: str | None
    created_at: str
    usd_per_credit: str
    expiry_days: int
    checkout: Checkout | None = None   # None: the checkout could not start
    failure: str | None = None


@dataclass(frozen=True)
class Confirm:
    topup_id: str
    provider_ref: str | None = None   # when given, must be the top-up's checkout
    paid: Paid | None = None          # when given, must be exactly what was ordered


@dataclass(frozen=True)
class Expire:
    topup_id: str
    provider_ref: str | None = None


class TopupActor(Actor):
    def __init__(self, node) -> None:
        self.node = node
        self.store = node.store
        self.clock = node.clock
        self.retry_at: float | None = None
        self.backoff = RETRY_FIRST

    # An actor with no grant to retry stops when idle; the registry spawns it again on demand.
    @property
    def done(self) -> bool:  # type: ignore[override]
        return self.retry_at is None

    async def load(self) -> None:
        self.retry_at = self.clock.now() if sql.ungranted(self.store, self.key) else None
        self.backoff = RETRY_FIRST

    def next_deadline(self) -> float | None:
        return self.retry_at

    async def on_deadline(self) -> None:
        for row in sql.ungranted(self.store, self.key):
            try:
                await self._grant(row)
            except ServiceError as e:
                self._schedule_retry(row["id"], e)
                return
        self.retry_at = None
        self.backoff = RETRY_FIRST

    # -- messages ------------------------------------------------------------------------
    @on(RecordCheckout)
    async def on_RecordCheckout(self, m: RecordCheckout) -> dict:
        d = m.draft
        step = TOPUP_EFFECTS.apply(self, NEW, "checkout_started" if m.checkout else "checkout_failed",
                                   TopupFacts(d.id))
        status = step.new
        row = {
            "id": d.id, "organization_id": d.organization_id, "created_by": m.created_by,
            "credits_uc": d.credits * UC, "amount_cents": d.amount_cents, "currency": d.currency,
            "usd_per_credit": m.usd_per_credit, "expiry_days": m.expiry_days, "status": status,
            "provider": m.provider,
            "provider_ref": m.checkout.provider_ref if m.checkout else None,
            "checkout_url": m.checkout.url if m.checkout else None,
            "success_url": d.success_url, "cancel_url": d.cancel_url, "failure": m.failure,
            "created_at": m.created_at,
            "expired_at": None if m.checkout else self.clock.iso_now(),
        }
        await self.store.write(lambda conn: sql.insert(conn, row))
        await after(step)
        return self._reread(d.id)

    def _reread(self, topup_id: str) -> dict:
        """A top-up row this actor has just written (top-ups are never deleted)."""
        row = sql.get(self.store, topup_id)
        assert row is not None, topup_id
        return row

    @on(Confirm)
    async def on_Confirm(self, m: Confirm) -> dict:
        row = self._row(m.topup_id, m.provider_ref)
        if m.paid is not None:
            check_paid(row, m.paid)
        try:
            step = TOPUP_EFFECTS.apply(self, row["status"], "confirm", TopupFacts(row["id"]))
        except IllegalTransition:
            raise Conflict("The top-up has expired and can no longer be paid.",
                           {"topup_id": row["id"], "status": row["status"]}) from None
        if step.new != step.old:  # pending -> paid
            paid_at = self.clock.iso_now()
            await self.store.write(lambda conn: sql.set_paid(conn, row["id"], paid_at))
            crashpoint("payment_verified")  # paid is committed, the lot is not: recovery grants it
        elif row["lot_id"] is None:  # a repeat completes an add_lot cut short, as the retry timer would
            await self._grant_or_retry(row["id"])
        await after(step)
        return self._reread(row["id"])

    @on(Expire)
    async def on_Expire(self, m: Expire) -> dict:
        row = self._row(m.topup_id, m.provider_ref)
        if not TOPUP.can(row["status"], "expire"):
            if row["status"] == "paid":
                log.warning("top-up %s: expiry notice for a paid top-up ignored", row["id"])
            return row  # expired already: a repeat
        step = TOPUP_EFFECTS.apply(self, row["status"], "expire", TopupFacts(row["id"]))
        now = self.clock.iso_now()
        await self.store.write(lambda conn: sql.set_expired(conn, row["id"], now))
        await after(step)
        return self._reread(row["id"])

    # effects of machines.TOPUP -------------------------------------------------------------
    def _on_add_lot(self, step: Step[TopupFacts]) -> None:
        """Grant the top-up's lot once `paid` is committed."""
        topup_id = step.facts.topup_id
        step.after.append(lambda: self._grant_or_retry(topup_id))

    # -- helpers -------------------------------------------------------------------------
    def _row(self, topup_id: str, provider_ref: str | None) -> dict:
        row = sql.get_in_org(self.store, self.key, topup_id)
        if row is None:
            raise NotFound("Top-up not found.")
        if provider_ref is not None and row["provider_ref"] is not None and provider_ref != row["provider_ref"]:
            raise Conflict("The payment does not belong to this top-up's checkout.",
                           {"topup_id": row["id"]})
        return row

    async def _grant_or_retry(self, topup_id: str) -> None:
        """Grant a paid top-up's lot; when the balance actor refuses or is away, the retry
        timer takes over and the ask still fails (the caller hears of it)."""
        row = self._reread(topup_id)
        try:
            await self._grant(row)
        except ServiceError as e:
            self._schedule_retry(topup_id, e)
            raise

    async def _grant(self, row: dict) -> dict:
        paid = parse_iso(row["paid_at"])
        lot = await self.node.balances.ask(self.key, Grant(
            grant_id=row["id"], amount_uc=row["credits_uc"], source="topup",
            expires_at=paid + row["expiry_days"] * DAY,
            reason=f"Top-up of {fmt(row['credits_uc'])} credits",
        ))
        await self.store.write(lambda conn: sql.set_lot(conn, row["id"], lot["id"]))
        return lot

    def _schedule_retry(self, topup_id: str, error: BaseException) -> None:
        log.warning("top-up %s paid but its lot is not granted yet (%r); retrying in %.0fs",
                    topup_id, error, self.backoff)
        self.retry_at = self.clock.now() + self.backoff
        self.backoff = min(self.backoff * 2, RETRY_MAX)


def check_paid(row: dict, paid: Paid) -> None:
    """Conflict unless the provider's payment covers the order: the currency, at least the
    amount (a tax the provider adds on top, e.g. Stripe Tax, is more; a discount code that
    takes it below is less, and credits nothing), and (when echoed) the organization."""
    ordered = (row["amount_cents"], row["currency"])
    short = paid.amount_cents is None or paid.amount_cents < row["amount_cents"]
    if short or paid.currency != row["currency"] or paid.org_id not in (None, row["organization_id"]):
        log.error("top-up %s: payment of %r %r (organization %r) does not match the order %r %r; not credited",
                  row["id"], paid.amount_cents, paid.currency, paid.org_id, *ordered)
        raise Conflict("The payment does not match the top-up's order.", {"topup_id": row["id"]})


TOPUP_EFFECTS: EffectHandlers[TopupFacts] = EffectHandlers(TOPUP, TopupActor, {"add_lot": "_on_add_lot"})


async def recover(node) -> None:
    """After a restart: wake the actor of every organization with a paid, ungranted top-up."""
    for org_id in sql.orgs_with_ungranted(node.store):
        node.topups.get(org_id)

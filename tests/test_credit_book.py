"""The money rules (`service.credits`) on their own: plain calls, no trio, no database.

The actor-level tests (test_balance_actor.py, test_balance_model.py) check the same rules
through batching and commits; these pin the rules themselves and the effects tables."""

from __future__ import annotations

import itertools

import pytest

from service.credits import rules
from service.credits.book import CreditBook, Unread
from service.errors import Conflict, InsufficientCredits, NotFound, Unprocessable
from service.money import MAX_UC, UC

LEDGER_KIND, LEDGER_AMOUNT, LEDGER_LOT, LEDGER_HOLD = 3, 4, 6, 7


class Book:
    """A CreditBook driven like the actor drives it, one batch per call, keeping every ledger row."""

    def __init__(self) -> None:
        counter = itertools.count()
        self.book = CreditBook("org", lambda: f"id{next(counter):04d}", lambda t: (t, f"T{t}"))
        self.ledger: list[tuple] = []
        self.notices: list[tuple] = []
        self.serial = 0
        self.now = 1000.0

    def at(self, now: float) -> CreditBook:
        """Open the next batch at `now` (expiring what is due), collecting the previous one."""
        b = self.book
        self.ledger += b.ledger
        self.notices += b.notices
        b.committed(b.settled, 10)
        self.serial += 1
        self.now = now
        b.begin(now, f"T{now}", self.serial, True)
        b.expire_due()
        return b

    def __getattr__(self, name):  # the rules, each in a fresh batch at the current time
        book = self.at(self.now)
        return getattr(book, name)

    def rows(self) -> list[tuple]:
        return self.ledger + self.book.ledger

    def check(self) -> None:
        """The ledger rule: Σ ledger = available, and per live lot Σ its rows = its free part."""
        b = self.book
        assert sum(r[LEDGER_AMOUNT] for r in self.rows()) == b.available
        assert b.available == rules.available((lot.remaining, lot.reserved) for lot in b.order)
        for lot in b.lots.values():
            rows = sum(r[LEDGER_AMOUNT] for r in self.rows() if r[LEDGER_LOT] == lot.id)
            assert rows == lot.remaining - lot.reserved - lot.expired_uc
            assert 0 <= lot.reserved <= lot.remaining <= lot.amount


@pytest.fixture
def b() -> Book:
    return Book()


def test_the_book_runs_the_handlers_the_tables_name():
    """place runs `reserve`, capture `charge`, release `unreserve`, a fall below the threshold
    `notify`: seen through a book whose handlers record their calls."""
    seen = []

    class Recording(CreditBook):
        def _reserve(self, h, amount):
            seen.append(("reserve", h.id, amount))
            super()._reserve(h, amount)

        def _charge(self, h, amount):
            seen.append(("charge", h.id, amount))
            super()._charge(h, amount)

        def _unreserve(self, h, amount):
            seen.append(("unreserve", h.id, amount))
            super()._unreserve(h, amount)

        def _notify(self):
            seen.append(("notify",))
            super()._notify()

    counter = itertools.count()
    book = Recording("org", lambda: f"id{next(counter)}", lambda t: (t, f"T{t}"))
    book.grant("g", "promo", 10 * UC)
    book.put_settings(5 * UC)
    book.place("h1", 3 * UC)
    book.capture("h1", 2 * UC)
    book.capture("h1", 2 * UC)  # a repeat: captured + capture has no effect
    book.place("h2", 1 * UC)
    book.release("h2")
    book.place("h3", 4 * UC)   # 10 - 2 - 4 = 4 < 5: below the threshold
    assert seen == [("reserve", "h1", 3 * UC), ("charge", "h1", 2 * UC), ("reserve", "h2", UC),
                    ("unreserve", "h2", UC), ("reserve", "h3", 4 * UC), ("notify",)]


def test_spend_order_is_soonest_expiry_first_no_expiry_last_ties_by_creation_then_id():
    keys = [rules.spend_key(None, "2026-01-01", "a"), rules.spend_key(50.0, "2026-01-02", "b"),
            rules.spend_key(50.0, "2026-01-01", "z"), rules.spend_key(50.0, "2026-01-01", "c"),
            rules.spend_key(10.0, "2026-01-09", "d")]
    assert [k[3] for k in sorted(keys)] == ["d", "c", "z", "b", "a"]
    assert rules.is_due(10.0, 10.0) and not rules.is_due(10.0, 9.999999) and not rules.is_due(None, 1e18)
    assert rules.available([(10, 3), (5, 5), (7, 0)]) == 14


def test_grant_place_capture_release(b):
    lot = b.grant("g1", "promo", 100 * UC)
    assert (lot["amount_uc"], lot["remaining_uc"], lot["source"]) == (100 * UC, 100 * UC, "promo")
    h = b.place("h1", 30 * UC, "job1", None, "p1", "render")
    assert (h["status"], h["amount_uc"], h["job_id"], h["project_id"]) == ("held", 30 * UC, "job1", "p1")
    assert (b.book.available, b.book.held) == (70 * UC, 30 * UC)
    c = b.capture("h1", 12 * UC)
    assert (c["status"], c["captured_uc"], c["settled_at"]) == ("captured", 12 * UC, "T1000.0")
    assert (b.book.available, b.book.held) == (88 * UC, 0)
    b.place("h2", 40 * UC)
    r = b.release("h2")
    assert (r["status"], r["captured_uc"]) == ("released", None)
    assert (b.book.available, b.book.held) == (88 * UC, 0)
    assert [r[LEDGER_KIND] for r in b.rows()] == ["grant", "hold", "capture", "hold", "release"]
    b.check()


def test_a_hold_takes_slices_in_spend_order_and_a_capture_charges_them_in_order(b):
    b.grant("never", "topup", 10 * UC)
    b.grant("late", "promo", 10 * UC, 5000.0)
    b.grant("soon", "signup", 10 * UC, 2000.0)
    assert [lot.grant_id for lot in b.book.order] == ["soon", "late", "never"]
    b.place("h", 25 * UC)
    slices = [(lot.grant_id, uc) for lot, uc in b.book.active["h"].slices]
    assert slices == [("soon", 10 * UC), ("late", 10 * UC), ("never", 5 * UC)]
    b.capture("h", 15 * UC)  # all of "soon", half of "late"; the rest returns
    left = {lot.grant_id: lot.remaining for lot in b.book.lots.values()}
    assert left == {"soon": 0, "late": 5 * UC, "never": 10 * UC}
    assert [lot.grant_id for lot in b.book.order] == ["late", "never"]  # an empty lot leaves the order
    b.check()


def test_refusals_change_nothing(b):
    b.grant("g", "promo", 10 * UC)
    before = b.book.state()
    with pytest.raises(InsufficientCredits, match="Not enough credits.") as e:
        b.place("big", 11 * UC)
    assert e.value.details == {"required": "11.00", "available": "10.00"}
    for bad in (-1, 1.5, "5", MAX_UC + 1, True):
        with pytest.raises(Unprocessable, match="A hold amount must be a whole number"):
            b.place("bad", bad)
    with pytest.raises(Unprocessable, match="hold_id is required."):
        b.place("", 1)
    with pytest.raises(NotFound, match="Hold not found."):
        b.capture("nope")
    with pytest.raises(NotFound, match="Hold not found."):
        b.release(None)
    with pytest.raises(Unprocessable, match="A grant must be a positive whole number"):
        b.grant("g0", "promo", 0)
    with pytest.raises(Unprocessable, match="source must be a name of 1 to 64 characters."):
        b.grant("g2", "x" * 65, UC)
    b.place("h", 4 * UC)
    with pytest.raises(Unprocessable, match="Cannot capture more than the hold."):
        b.capture("h", 4 * UC + 1)
    assert b.book.active["h"].status == "held"
    b.release("h")
    assert b.book.state() == before
    b.check()


def test_repeats_return_the_original_and_settle_once(b):
    g = b.grant("g", "promo", 10 * UC)
    assert b.grant("g", "other", 99 * UC) == g
    h = b.place("h", 3 * UC)
    assert b.place("h", 9 * UC) == h
    c = b.capture("h", 2 * UC)
    assert b.capture("h", 1 * UC) == c  # settled in a committed batch: remembered
    with pytest.raises(Conflict, match="The hold was already captured."):
        b.release("h")
    b.place("r", UC)
    rel = b.release("r")
    assert b.release("r") == rel
    with pytest.raises(Conflict, match="The hold was already released."):
        b.capture("r")
    assert b.book.available == 8 * UC
    assert sum(1 for r in b.rows() if r[LEDGER_KIND] in ("capture", "release")) == 2
    b.check()


def test_a_lot_expiring_under_a_hold_keeps_the_reserved_part_for_the_hold(b):
    b.grant("short", "promo", 10 * UC, 2000.0)
    b.grant("long", "topup", 10 * UC)
    b.place("cap", 6 * UC)
    b.place("rel", 2 * UC)
    b.at(1999.999999)
    assert b.book.lots[b.book.by_grant["short"].id].expired_at is None  # not a microsecond early
    book = b.at(2000.0)
    short = book.by_grant["short"]
    assert short.expired_at == "T2000.0" and short.expired_uc == 2 * UC  # only the free part expired
    assert book.available == 10 * UC
    b.capture("cap", 5 * UC)  # charged from the expired lot; the returned 1 expires at once
    assert (short.remaining, short.reserved, short.expired_uc) == (5 * UC, 2 * UC, 3 * UC)
    b.release("rel")  # returned to an expired lot: expires at once, with an expiry row
    assert (short.remaining, short.reserved, short.expired_uc) == (5 * UC, 0, 5 * UC)
    kinds = [(r[LEDGER_KIND], r[LEDGER_AMOUNT]) for r in b.rows() if r[LEDGER_LOT] == short.id]
    assert kinds[-2:] == [("release", 2 * UC), ("expiry", -2 * UC)]
    assert book.available == 10 * UC
    b.check()


def test_a_grant_already_due_expires_at_once(b):
    lot = b.grant("old", "promo", 5 * UC, 999.0)
    assert b.book.available == 0 and b.book.lots[lot["id"]].expired_at == "T1000.0"
    assert b.book.next_deadline() is None
    b.grant("next", "promo", 5 * UC, 3000.0)
    assert b.book.next_deadline() == 3000.0
    b.check()


def test_low_balance_warns_once_per_crossing_and_settings_rearm(b):
    b.grant("g", "promo", 100 * UC)
    b.put_settings(50 * UC)
    b.place("h1", 60 * UC)
    assert b.book.notified_at == "T1000.0" and len(b.book.notices) == 1
    b.place("h2", 10 * UC)
    assert b.book.notices == []  # still below: no second warning
    b.at(1001.0)
    b.put_settings(50 * UC)  # re-armed and checked at once (`check_now`)
    assert b.book.notified_at == "T1001.0"
    assert b.notices[0] == ("40.00", "50.00", "T1000.0")
    with pytest.raises(Unprocessable, match="low_balance_threshold cannot be negative."):
        b.put_settings(-1)


def test_a_hold_left_unread_asks_to_be_read_before_it_is_refused(b):
    book = b.at(b.now)
    book.unread = {"h"}
    with pytest.raises(Unread) as e:
        book.place("h", UC)  # nothing granted: a refusal, but a repeat would need the stored hold
    assert e.value.hold_id == "h" and book.unread == set()
    book.remember(("h", None, None, None, None, "released", UC, None, "T0", "T1"), 10)
    assert book.place("h", UC)["status"] == "released"

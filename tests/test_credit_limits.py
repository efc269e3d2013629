"""Spend limits in the pure money core (`service.credits.limits` through `CreditBook`): plain
calls, no trio, no database. A hypothesis property drives random interleavings of holds,
captures, releases, limit changes and month changes and checks that no accepted hold ever
takes a figure past its limit and that the figures always equal what the holds say."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.clock import iso
from service.credits.book import CreditBook
from service.credits.limits import month_of
from service.errors import InsufficientCredits, SpendLimitReached, Unprocessable
from service.money import UC

NOV = datetime(2026, 11, 20, tzinfo=UTC).timestamp()
DEC = datetime(2026, 12, 1, tzinfo=UTC).timestamp()  # the first instant of December


class Book:
    """A CreditBook driven like the actor drives it: one batch per call, at a settable time."""

    def __init__(self, now: float = NOV) -> None:
        counter = itertools.count()
        self.book = CreditBook("org", lambda: f"id{next(counter):04d}", lambda t: (t, iso(t)))
        self.serial = 0
        self.now = now
        self.warnings: list[tuple] = []
        self.staged_limits: list[tuple] = []
        self.staged_spent: list[tuple] = []

    def batch(self) -> CreditBook:
        b = self.book
        self.warnings += b.spend.warnings
        b.committed(b.settled, 10_000)
        self.serial += 1
        b.begin(self.now, iso(self.now), self.serial, False)
        return b

    def __getattr__(self, name):
        book = self.batch()
        return getattr(book, name)


@pytest.fixture
def b() -> Book:
    book = Book()
    book.grant("g", "promo", 1000 * UC)
    return book


def test_month_is_the_utc_calendar_month():
    assert month_of(DEC - 0.000001) == "2026-11" and month_of(DEC) == "2026-12"
    assert iso(DEC)[:7] == month_of(DEC)


def test_a_project_limit_refuses_the_hold_that_would_pass_it_and_holds_nothing(b):
    b.put_limit("project", "p1", 50 * UC)
    b.place("h1", 30 * UC, project_id="p1")
    before = b.book.state()
    with pytest.raises(SpendLimitReached, match="This project's monthly spend limit is reached.") as e:
        b.place("h2", 21 * UC, project_id="p1")
    assert (e.value.status, e.value.code) == (402, "billing.spend_limit_reached")
    assert e.value.details == {"scope": "project", "limit": "50.00", "spent": "30.00", "required": "21.00"}
    after = b.book.state()
    after["spend"]["notified"] = before["spend"]["notified"]  # only the warning's mark moved
    assert after == before and "h2" not in b.book.active
    b.place("h3", 20 * UC, project_id="p1")  # exactly up to the limit is fine
    assert b.book.spend.spent("project", "p1") == 50 * UC
    b.place("other", 100 * UC, project_id="p2")  # another project has no limit


def test_a_key_limit_counts_every_project_and_refuses_first(b):
    b.put_limit("api_key", "k1", 10 * UC)
    b.put_limit("project", "p1", 5 * UC)
    b.place("a", 4 * UC, project_id="p1", api_key_id="k1")
    b.place("b", 4 * UC, project_id="p2", api_key_id="k1")
    with pytest.raises(SpendLimitReached, match="This API key's spend limit is reached.") as e:
        b.place("c", 3 * UC, project_id="p1", api_key_id="k1")  # both would refuse: the key's first
    assert e.value.details == {"scope": "api_key", "limit": "10.00", "spent": "8.00", "required": "3.00"}
    with pytest.raises(SpendLimitReached) as e:
        b.place("d", 2 * UC, project_id="p1", api_key_id="k1")  # the key has room, the project not
    assert e.value.details["scope"] == "project"


def test_the_balance_refuses_before_any_limit(b):
    b.put_limit("api_key", "k1", 0)
    with pytest.raises(InsufficientCredits):
        b.place("big", 2000 * UC, project_id="p1", api_key_id="k1")
    with pytest.raises(SpendLimitReached):
        b.place("small", 1 * UC, project_id="p1", api_key_id="k1")


def test_zero_stops_all_spending_but_a_free_hold(b):
    b.put_limit("project", "p1", 0)
    with pytest.raises(SpendLimitReached):
        b.place("h", 1, project_id="p1")
    b.place("free", 0, project_id="p1")


def test_release_gives_back_and_capture_keeps_only_what_it_charged(b):
    b.put_limit("project", "p1", 100 * UC)
    b.put_limit("api_key", "k", 100 * UC)
    b.place("h1", 40 * UC, project_id="p1", api_key_id="k")
    b.place("h2", 40 * UC, project_id="p1", api_key_id="k")
    b.release("h1")
    b.capture("h2", 25 * UC)
    assert b.book.spend.spent("project", "p1") == b.book.spend.spent("api_key", "k") == 25 * UC
    b.release("h1")  # a repeat gives back nothing more
    assert b.book.spend.spent("project", "p1") == 25 * UC


def test_a_new_month_starts_the_project_from_zero_and_an_old_hold_gives_back_nothing(b):
    b.put_limit("project", "p1", 50 * UC)
    b.put_limit("api_key", "k", 80 * UC)
    b.place("nov", 50 * UC, project_id="p1", api_key_id="k")
    b.now = DEC
    assert b.batch().spend.spent("project", "p1") == 0
    b.place("dec", 20 * UC, project_id="p1", api_key_id="k")
    b.release("nov")  # November's hold: December keeps its 20, the key gets 50 back
    assert b.book.spend.spent("project", "p1") == 20 * UC
    assert b.book.spend.spent("api_key", "k") == 20 * UC
    b.place("dec2", 30 * UC, project_id="p1", api_key_id="k")


def test_warning_once_per_scope_per_period_and_rearmed_by_a_new_limit(b):
    b.put_limit("project", "p1", 1 * UC)
    b.put_limit("api_key", "k", 1 * UC)
    for hold_id in ("x", "y"):
        with pytest.raises(SpendLimitReached):
            b.place(hold_id, 2 * UC, project_id="p1")
        with pytest.raises(SpendLimitReached):
            b.place(hold_id, 2 * UC, api_key_id="k")
    b.batch()
    assert [w[:4] for w in b.warnings] == [("project", "p1", "1.00", "0.00"), ("api_key", "k", "1.00", "0.00")]
    b.now = DEC  # a new month: the project warns again, the key (a lifetime limit) does not
    for _ in range(2):
        with pytest.raises(SpendLimitReached):
            b.place("z", 2 * UC, project_id="p1", api_key_id=None)
        with pytest.raises(SpendLimitReached):
            b.place("z", 2 * UC, api_key_id="k")
    b.put_limit("api_key", "k", 1 * UC)  # setting the limit arms it again
    with pytest.raises(SpendLimitReached):
        b.place("z", 2 * UC, api_key_id="k")
    b.batch()
    assert [w[:2] for w in b.warnings] == [("project", "p1"), ("api_key", "k"), ("project", "p1"),
                                           ("api_key", "k")]
    assert b.warnings[2][4] == iso(DEC)


def test_bad_limits_are_refused(b):
    for bad in (-1, 1.5, "5", True):
        with pytest.raises(Unprocessable, match="A spend limit must be a whole number"):
            b.put_limit("project", "p1", bad)
    with pytest.raises(Unprocessable, match="A spend limit needs a scope"):
        b.put_limit("org", "p1", 1)
    b.put_limit("project", "p1", None)
    assert b.book.spend.view("project", "p1") == {"scope": "project", "id": "p1", "limit": None, "spent": "0.00"}


def test_a_reload_from_the_staged_rows_gives_the_same_figures(b):
    b.put_limit("project", "p1", 90 * UC)
    b.place("h1", 40 * UC, project_id="p1", api_key_id="k")
    book = b.batch()
    limits = [{"scope": s, "scope_id": i, "limit_uc": lim, "notified_at": n} for s, i, lim, n in
              [("project", "p1", 90 * UC, None)]]
    spent = [{"scope": s, "scope_id": i, "period": p, "spent_uc": v}
             for s, i, p, v in [("project", "p1", "2026-11", 40 * UC), ("project", "p1", "2026-10", 7 * UC),
                                ("api_key", "k", "", 40 * UC)]]
    fresh = Book()
    fresh.book.load([], [], None, ("2026-11", limits, spent))
    assert fresh.book.spend.state() == book.spend.state()


# -- the property: no interleaving overspends ----------------------------------------------------
PROJECTS, KEYS = ["p1", "p2"], ["k1", "k2", None]
step = st.one_of(
    st.tuples(st.just("place"), st.integers(0, 9), st.integers(0, 30), st.sampled_from(PROJECTS),
              st.sampled_from(KEYS)),
    st.tuples(st.just("capture"), st.integers(0, 9), st.integers(0, 30)),
    st.tuples(st.just("release"), st.integers(0, 9)),
    st.tuples(st.just("limit"), st.sampled_from(["project", "api_key"]), st.integers(0, 1),
              st.one_of(st.none(), st.integers(0, 60))),
    st.tuples(st.just("month")),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(step, min_size=10, max_size=80))
def test_no_interleaving_takes_a_figure_past_its_limit(steps):
    b = Book()
    b.grant("g", "promo", 10_000 * UC)
    placed: dict[str, tuple] = {}  # hold id -> (project, key, month)
    for s in steps:
        book = b.batch()
        spend = book.spend
        if s[0] == "place":
            hid, amount, project, key = f"h{s[1]}", s[2] * UC, s[3], s[4]
            before = {(sc, i): spend.spent(sc, i) for sc, i in (("project", project), ("api_key", key))
                      if i is not None}
            try:
                book.place(hid, amount, project_id=project, api_key_id=key)
            except SpendLimitReached:
                continue
            if hid not in placed:
                placed[hid] = (project, key, spend.month)
                for (sc, i), was in before.items():
                    limit = spend.limits.get((sc, i))
                    assert limit is None or was + amount <= limit, "overspend"
        elif s[0] == "capture" and f"h{s[1]}" in book.active:
            hid = f"h{s[1]}"
            book.capture(hid, min(s[2] * UC, book.active[hid].amount))
        elif s[0] == "release" and f"h{s[1]}" in book.active:
            book.release(f"h{s[1]}")
        elif s[0] == "limit":
            scope = s[1]
            book.put_limit(scope, (PROJECTS if scope == "project" else KEYS)[s[2]] or "k1",
                           None if s[3] is None else s[3] * UC)
        elif s[0] == "month":
            b.now += 31 * 86400
        # the figures are what the holds say: held amounts and captured amounts
        book = b.batch()
        for scope, ids in (("project", PROJECTS), ("api_key", KEYS)):
            for i in ids:
                if i is None:
                    continue
                want = 0
                for hid, (project, key, month) in placed.items():
                    h = book.find(hid)
                    if h is None or (project if scope == "project" else key) != i:
                        continue
                    if scope == "project" and month != book.spend.month:
                        continue
                    want += h.amount if h.status == "held" else (h.captured or 0)
                assert book.spend.spent(scope, i) == want

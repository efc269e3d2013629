"""Spend-limit edges in the pure money core (CreditBook, no trio): a limit lowered below what
is already held, room given back exactly once, a key revoked with holds out, a hold that
crosses a month boundary, and the largest limit. See docs/security-limits.md "Spend limits"."""

from __future__ import annotations

import pytest

from service.errors import SpendLimitReached
from service.money import CENT_UC as CENT
from service.money import UC
from test_credit_limits import DEC, Book


@pytest.fixture
def b() -> Book:
    book = Book()
    book.grant("g", "promo", 1000 * UC)
    return book


def refusal(b: Book, hold_id: str, amount: int, **kw) -> tuple[str, dict]:
    with pytest.raises(SpendLimitReached) as e:
        b.place(hold_id, amount, **kw)
    return e.value.message, e.value.details


def test_a_limit_lowered_below_what_is_held_refuses_more_but_not_a_free_hold(b):
    b.put_limit("api_key", "k", 5 * UC)
    b.place("h1", 3 * UC, api_key_id="k")
    b.put_limit("api_key", "k", 1 * UC)
    assert refusal(b, "h2", CENT, api_key_id="k") == (
        "This API key's spend limit is reached.",
        {"scope": "api_key", "limit": "1.00", "spent": "3.00", "required": "0.01"})
    # a free job cannot take the figure anywhere: as under a limit of "0", it is not refused
    assert b.place("free", 0, api_key_id="k")["status"] == "held"
    b.release("h1")
    b.place("h3", 1 * UC, api_key_id="k")  # exactly the limit again
    assert b.book.spend.spent("api_key", "k") == 1 * UC


def test_a_lowered_project_limit_lets_a_free_hold_through_too(b):
    b.put_limit("project", "p", 5 * UC)
    b.place("h1", 5 * UC, project_id="p")
    b.put_limit("project", "p", 0)
    assert refusal(b, "h2", CENT, project_id="p")[1] == {"scope": "project", "limit": "0.00", "spent": "5.00",
                                                          "required": "0.01"}
    assert b.place("free", 0, project_id="p")["status"] == "held"


def test_release_and_capture_give_back_once_even_after_the_key_is_gone(b):
    b.put_limit("api_key", "k", 10 * UC)
    b.place("h1", 4 * UC, api_key_id="k")
    b.place("h2", 4 * UC, api_key_id="k")
    # the key is revoked now (the book is not told: its holds settle as any other)
    b.release("h1")
    b.release("h1")
    b.capture("h2", 1 * UC)
    b.capture("h2", 1 * UC)
    assert b.book.spend.spent("api_key", "k") == 1 * UC


def test_a_hold_crossing_the_month_counts_in_the_month_it_was_placed(b):
    b.put_limit("project", "p", 10 * UC)
    b.put_limit("api_key", "k", 10 * UC)
    b.place("nov", 8 * UC, project_id="p", api_key_id="k")
    b.now = DEC
    # December starts at zero; November's hold, captured in December, is November's
    b.capture("nov", 2 * UC)
    assert b.book.spend.spent("project", "p") == 0
    assert b.book.spend.spent("api_key", "k") == 2 * UC  # a key's figure is for its whole life
    b.place("dec", 8 * UC, project_id="p", api_key_id="k")
    assert refusal(b, "more", CENT, project_id="p", api_key_id="k")[1]["scope"] == "api_key"


def test_the_largest_limit_is_held_exactly(b):
    top = 1_000_000_000 * UC
    b.put_limit("api_key", "k", top)
    b.place("h", 1000 * UC, api_key_id="k")
    assert b.book.spend.view("api_key", "k") == {"scope": "api_key", "id": "k", "limit": "1000000000.00",
                                                 "spent": "1000.00"}

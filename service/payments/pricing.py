"""The top-up quote and exact prices. Pure: stdlib only.

Price rule: `amount_cents = credits * usd_per_credit * 100`, computed with Decimal. When
that is not a whole number of cents (a price with more than two decimal places of cents,
e.g. usd_per_credit "0.0125" and 101 credits = 126.25 cents) it is rounded half up to the
cent (126 cents; 126.5 would be 127). With the default price of 0.01 every amount is exact.
`amount_cents` is in the smallest unit of `currency`; the settings' currency is expected
to have cents (usd, eur, ...), like `usd_per_credit` says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from service.views.billing_shapes import TopupQuote

MIN_CREDITS = 100
MAX_CREDITS = 100_000
EXPIRY_DAYS = 365
DAY = 86_400

RANGE_MESSAGE = f"A top-up must be between {MIN_CREDITS} and {MAX_CREDITS} credits."
CURRENCY_RE = re.compile(r"^[a-z]{3}$")


@dataclass(frozen=True)
class Quote:
    usd_per_credit: Decimal
    currency: str
    min_credits: int = MIN_CREDITS
    max_credits: int = MAX_CREDITS
    expiry_days: int = EXPIRY_DAYS

    def view(self) -> TopupQuote:
        return {"usd_per_credit": str(self.usd_per_credit), "min_credits": self.min_credits,
                "max_credits": self.max_credits, "expiry_days": self.expiry_days,
                "currency": self.currency}

    def in_range(self, credits: int) -> bool:
        return self.min_credits <= credits <= self.max_credits

    def amount_cents(self, credits: int) -> int:
        return amount_cents(credits, self.usd_per_credit)

    @property
    def expiry_seconds(self) -> int:
        return self.expiry_days * DAY


def parse_price(text: str) -> Decimal:
    """A positive, finite decimal; raises ValueError (a misconfigured node fails at start)."""
    try:
        d = Decimal(str(text).strip())
    except InvalidOperation:
        raise ValueError(f"usd_per_credit is not a decimal number: {text!r}") from None
    if not d.is_finite() or d <= 0:
        raise ValueError(f"usd_per_credit must be a positive number: {text!r}")
    return d


def parse_currency(text: str) -> str:
    cur = str(text).strip().lower()
    if not CURRENCY_RE.match(cur):
        raise ValueError(f"currency must be a three-letter code: {text!r}")
    return cur


def quote_from(usd_per_credit: str, currency: str) -> Quote:
    return Quote(parse_price(usd_per_credit), parse_currency(currency))


def amount_cents(credits: int, usd_per_credit: Decimal) -> int:
    """Exact when the product is whole cents; otherwise rounded half up to the cent."""
    cents = Decimal(credits) * usd_per_credit * 100
    return int(cents.quantize(Decimal(1), rounding=ROUND_HALF_UP))

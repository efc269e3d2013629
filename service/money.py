"""Credits as integer micro-credits (1 credit = 1_000_000 uc); decimals only at the edges.

Amounts the service accepts are limited to two decimal places, so every stored
amount shows exactly with two places on the billing endpoints.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import overload

UC = 1_000_000
CENT_UC = UC // 100
CENT = Decimal("0.01")
MAX_UC = 10 ** 15  # 1e9 credits: any single amount above this is refused (int64 headroom)


class NotCredits(ValueError):
    """Not a finite decimal number."""


class TooPrecise(ValueError):
    """More than two decimal places."""


def to_decimal(value: str | int | Decimal) -> Decimal:
    """A decimal string, int or Decimal of credits as a finite Decimal (strings are stripped)."""
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except InvalidOperation as e:
        raise NotCredits(f"not a decimal number: {value!r}") from e
    if not d.is_finite():
        raise NotCredits("credits must be finite")
    return d


def decimal_uc(d: Decimal) -> int:
    """Credits as micro-credits, refusing more than two decimal places. Past 10**21 credits
    Decimal's 28 digits would round, or trap outside ValueError (a 500): refused first."""
    if d.adjusted() > 20:
        raise NotCredits("credits out of range")
    if d != 0 and d.adjusted() < -2:  # under a cent: `%` would underflow to 0 for 1e-999999999
        raise TooPrecise("credits take at most two decimal places")
    if d % CENT != 0:  # exact: the quotient has at most 23 digits
        raise TooPrecise("credits take at most two decimal places")
    return int(d * UC)


def to_uc(value: str | int | Decimal) -> int:
    """Parse a decimal string (or int) of credits into micro-credits; at most 2 places."""
    if isinstance(value, bool) or isinstance(value, float):
        raise NotCredits("credits must be a decimal string or an integer, not a float")
    return decimal_uc(to_decimal(value))


PLAIN = re.compile(r"[0-9]{1,12}(\.[0-9]{1,2})?")


def plain_uc(text: str, zero_ok: bool) -> int | None:
    """Credits typed by a person or sent as a limit: plain decimal notation only (`25`,
    `12.50`; no sign, exponent or third decimal), within range; else None."""
    if not PLAIN.fullmatch(text):
        return None
    uc = to_uc(text)
    return None if bad_amount(uc, zero_ok) else uc


def bad_amount(v: object, zero_ok: bool) -> bool:
    """True unless `v` is an int of micro-credits in range (0 or 1 up to MAX_UC)."""
    return type(v) is not int or v < (0 if zero_ok else 1) or v > MAX_UC


@overload
def fmt(uc: int, places: int = 2) -> str: ...
@overload
def fmt(uc: None, places: int = 2) -> None: ...
def fmt(uc: int | None, places: int = 2) -> str | None:
    """Format micro-credits as a decimal string with `places` places (exact when divisible)."""
    if uc is None:
        return None
    d = Decimal(uc) / UC
    return str(d.quantize(Decimal(1).scaleb(-places)))

"""Credits as integer micro-credits (1 credit = 1_000_000 uc); decimals only at the edges.

Amounts the service accepts are limited to two decimal places, so every stored
amount shows exactly with two places on the billing endpoints.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import overload

UC = 1_000_000
CENT_UC = UC // 100


def to_uc(value: str | int | Decimal) -> int:
    """Parse a decimal string (or int) of credits into micro-credits; at most 2 places."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError("credits must be a decimal string or an integer, not a float")
    try:
        d = Decimal(str(value).strip()) if not isinstance(value, Decimal) else value
    except InvalidOperation as e:
        raise ValueError(f"not a decimal number: {value!r}") from e
    if not d.is_finite():
        raise ValueError("credits must be finite")
    uc = d * UC
    if uc != uc.to_integral_value() or (uc % CENT_UC) != 0:
        raise ValueError("credits take at most two decimal places")
    return int(uc)


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

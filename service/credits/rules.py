"""Credit rules every reader shares, written once: spend order, a lot's free part, `available`.

The balance actor's book, the balance view and the tests' cross-checks all call these, so
the SQL reads and the in-memory state cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable


def spend_key(expires_at: float | None, created_at: str, lot_id: str) -> tuple[bool, float, str, str]:
    """Spend order: soonest expiry first, no expiry last, ties by creation time then id."""
    return (expires_at is None, expires_at if expires_at is not None else 0.0, created_at, lot_id)


def is_due(expires_at: float | None, now: float) -> bool:
    """A lot expires at exactly its `expires_at` (service time)."""
    return expires_at is not None and expires_at <= now


def free_part(remaining: int, reserved: int) -> int:
    """What a live lot can still reserve: not charged, not held."""
    return remaining - reserved


def available(lots: Iterable[tuple[int, int]]) -> int:
    """`available` = Σ free part of the live (unexpired) lots, given as (remaining, reserved)."""
    return sum(free_part(remaining, reserved) for remaining, reserved in lots)

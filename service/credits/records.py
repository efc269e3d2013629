"""The records a credit book keeps: lots, outstanding holds, settled holds (plain data)."""

from __future__ import annotations

from typing import Any, NamedTuple

from service.credits.rules import spend_key
from service.money import fmt


class Lot:
    __slots__ = ("id", "grant_id", "source", "amount", "remaining", "reserved", "expired_uc", "expires_at",
                 "expires_iso", "expired_at", "reason", "created_at", "key", "new_in")

    def __init__(self, id: str, grant_id: str, source: str, amount: int, remaining: int, reserved: int,
                 expired_uc: int, expires_at: float | None, expires_iso: str | None, expired_at: str | None,
                 reason: str | None, created_at: str) -> None:
        self.id = id
        self.grant_id = grant_id
        self.source = source
        self.amount = amount
        self.remaining = remaining
        self.reserved = reserved
        self.expired_uc = expired_uc
        self.expires_at = expires_at      # service-time float or None
        self.expires_iso = expires_iso
        self.expired_at = expired_at      # ISO time the book expired it, or None
        self.reason = reason
        self.created_at = created_at
        self.key = spend_key(expires_at, created_at, id)
        self.new_in = -1                  # serial of the batch that created it (its INSERT)

    def view(self) -> dict[str, Any]:
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
                 "slices", "created_at", "settled_at", "new_in", "placed_slices", "api_key_id", "month")

    def __init__(self, id: str, job_id: str | None, workflow_run_id: str | None, project_id: str | None,
                 description: str | None, status: str, amount: int, captured: int | None,
                 slices: list[tuple[Lot, int]], created_at: str, settled_at: str | None,
                 api_key_id: str | None = None, month: str = "") -> None:
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
        self.placed_slices: list[tuple[str, int]] | None = None  # a hold settled in the batch that placed it
        self.api_key_id = api_key_id      # the key its work was submitted with (spend limits)
        self.month = month                # UTC month it was placed in, `YYYY-MM` (spend limits)

    def settled(self) -> tuple[Any, ...]:
        """The plain tuple of `Settled`'s fields."""
        return (self.id, self.job_id, self.workflow_run_id, self.project_id, self.description, self.status,
                self.amount, self.captured, self.created_at, self.settled_at)

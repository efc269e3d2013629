"""The Idempotency-Key gate shared by job submits and product-run starts (beyond the spec).

Within 24 hours the same key with the same request returns the first 202 answer and creates
nothing new; the same key with another request is 422. Keys are per organization, and
requests carrying one key are serialised on this node (`KeyedLocks`).
"""

from __future__ import annotations

import hashlib
import json
from contextlib import asynccontextmanager
from typing import Any

import trio

from service.errors import Unprocessable

TTL_S = 24 * 3600.0


def request_hash(parts: dict[str, Any]) -> str:
    """A stable digest of what makes two requests "the same"."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def replay(row: dict | None, request_hash: str, now: float, *, id_field: str, detail: str) -> dict | None:
    """The stored answer for a live key with the same request; None when the key is free.

    A live key used with another request raises 422 naming the original resource
    (`details[detail]` = the row's `id_field`).
    """
    if row is None or row["created_at"] < now - TTL_S:
        return None
    if row["request_hash"] != request_hash:
        raise Unprocessable("Idempotency-Key was already used with a different request; use a new key.",
                            {"header": "Idempotency-Key", detail: row[id_field]})
    return json.loads(row["response"])


class KeyedLocks:
    """One trio.Lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._slots: dict[Any, list] = {}

    @asynccontextmanager
    async def hold(self, key: Any):
        slot = self._slots.setdefault(key, [trio.Lock(), 0])
        slot[1] += 1
        try:
            async with slot[0]:
                yield
        finally:
            slot[1] -= 1
            if slot[1] == 0:
                self._slots.pop(key, None)

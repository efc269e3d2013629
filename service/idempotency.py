"""The Idempotency-Key flow shared by job submits and product-run starts (beyond the spec).

Within 24 hours the same key with the same request returns the first 202 answer and creates
nothing new; the same key with another request is 422. Keys are per organization.

One flow, `Gate.once`, for both:

1. Requests carrying one key are serialised on this node (`KeyedLocks`).
2. A live row for the key answers: its stored 202 body (same request) or 422 (another one).
3. Otherwise `make(claim)` creates the resource; its owner (the job or run actor) writes the
   key's row (`Gate.put`) in the same transaction as the resource, so a key never names a
   resource that was not created, nor the reverse.
4. The key race: a write for the same key may commit between step 2 and step 3 (a request
   whose ask timed out let go of the lock while its actor still wrote). The second write
   then fails on the table's unique key; the owner undoes what it did (a job releases its
   hold) and raises `KeyTaken`, and the flow goes back to step 2, answering as the winner
   did. A key still taken after that is 422 "Idempotency-Key is in use; retry."
"""

from __future__ import annotations

import hashlib
import json
from contextlib import asynccontextmanager
from typing import Any, Awaitable, Callable, Mapping

import trio

from service.errors import ServiceError, Unprocessable
from service.storage import idempotency as sql

TTL_S = 24 * 3600.0
ATTEMPTS = 2

Claim = dict  # {organization_id, key, request_hash}: what a creating write stores with its resource


class KeyTaken(ServiceError):
    """A concurrent request with the same Idempotency-Key committed first. A ServiceError, so
    the actor that lost answers it to its asker (the flow) instead of crashing."""


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


def key_taken(error: BaseException) -> bool:
    """Whether a failed write failed on the key's unique index (the race of step 4)."""
    return "UNIQUE" in str(error).upper()


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


class Gate:
    """The flow for one kind of resource: its key table (service/storage/idempotency.py),
    the row's resource id column, and the name of that id in a 422's details."""

    def __init__(self, store, clock, *, table: str, id_field: str, detail: str) -> None:
        self.store = store
        self.clock = clock
        self.table = table
        self.id_field = id_field
        self.detail = detail
        self._locks = KeyedLocks()

    async def once(self, org_id: str, key: str | None, request_hash: str | None,
                   make: Callable[[Claim | None], Awaitable[dict]]) -> dict:
        """`await make(claim)` at most once per (organization, key) within TTL_S; without a
        key, `await make(None)`. `make` must raise `KeyTaken` when its write lost the key."""
        if key is None:
            return await make(None)
        assert request_hash is not None
        async with self._locks.hold((org_id, key)):
            for _ in range(ATTEMPTS):
                stored = replay(sql.get(self.store, self.table, org_id, key), request_hash, self.clock.now(),
                                id_field=self.id_field, detail=self.detail)
                if stored is not None:
                    return stored
                try:
                    return await make({"organization_id": org_id, "key": key, "request_hash": request_hash})
                except KeyTaken:
                    continue  # another task won the key: answer as it did
            raise Unprocessable("Idempotency-Key is in use; retry.", {"header": "Idempotency-Key"})

    def put(self, conn, claim: Claim, resource_id: str, response: Mapping[str, Any], now: float) -> None:
        """Inside the resource's own transaction: the key's row (`now` in service seconds,
        read before the write: the writer thread has no clock)."""
        sql.put(conn, self.table, {**claim, self.id_field: resource_id, "response": json.dumps(response),
                                   "created_at": now}, older_than=now - TTL_S)

    async def purge(self) -> None:
        cutoff = self.clock.now() - TTL_S  # not inside the write: it may run in a thread
        await self.store.write(lambda c: sql.purge(c, self.table, cutoff))

"""The retention sweep: one actor whose deadline is the next sweep (every SWEEP_EVERY_S of
service time, the first right after start). Each sweep deletes what service/storage/
retention.py says is no longer needed, one batch per transaction, until a batch comes back
short; the actor answers nothing else, so nobody waits on it."""

from __future__ import annotations


import logging
from functools import partial
from typing import Any

import trio

from service.actors.runtime import Actor
from service.clock import Clock, iso
from service.storage import retention as sql
from service.storage.db import Store
from service.storage.rows import Connection

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 3600.0
DAY_S = 86400.0


class RetentionActor(Actor):
    def __init__(self, store: Store, clock: Clock, retention_days: float) -> None:
        self.store = store
        self.clock = clock
        self.age_s = retention_days * DAY_S
        self.next_sweep: float | None = None
        self.swept: dict[str, int] = {}  # rows deleted per table by the last sweep (tests, logs)

    async def load(self) -> None:
        self.next_sweep = self.clock.now()

    def next_deadline(self) -> float | None:
        return self.next_sweep

    async def on_deadline(self) -> None:
        # hourly; sooner when the retention age itself is short (a node set to keep minutes)
        self.next_sweep = self.clock.now() + min(SWEEP_EVERY_S, max(1.0, self.age_s / 4))
        await self.sweep()

    async def sweep(self) -> None:
        now = self.clock.now()
        cutoffs: dict[str, Any] = {"age": iso(now - self.age_s), "day": now - DAY_S, "now": now}
        present = sql.tables(self.store)
        swept = {}
        for rule in sql.RULES:
            if rule.table not in present or not sql.has_some(self.store, rule, cutoffs[rule.cutoff]):
                continue
            total = 0
            while True:
                n: int = await self.store.write(partial(_delete_batch, rule=rule, cutoff=cutoffs[rule.cutoff]))
                total += n
                if n < sql.BATCH:
                    break
                await trio.sleep(0)  # other writers in between batches
            if total:
                swept[rule.table] = total
        self.swept = swept
        if swept:
            log.info("retention: deleted %s", ", ".join(f"{n} {t}" for t, n in swept.items()))


def _delete_batch(conn: Connection, *, rule: sql.Rule, cutoff: str) -> int:
    return sql.delete_batch(conn, rule, cutoff)

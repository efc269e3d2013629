"""Token buckets on the service clock, for login and sign-up attempts.

A bucket holds up to `burst` attempts and gains one back every `every` seconds; an attempt
takes one, and an empty bucket answers how long until the next one (the 429's Retry-After).
Buckets live in memory (one node). The keys are the client's to choose (an address, an
email), so the table is capped (`trim`): a flood of fresh names can neither grow it nor
make every attempt scan it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from service.clock import Clock

MAX_KEYS = 50_000


def trim(table: dict[str, Any], cap: int, full: Callable[[str, Any], bool]) -> None:
    """Called when `table` (least recently touched first) reaches `cap`: forget the full
    buckets (the default state), then the least recently touched until half the cap is
    left. Half, so the next trim is `cap / 2` new names away: amortized, a few bucket reads
    a take. A forgotten drained bucket starts full again: generous, never stricter."""
    for key in [k for k, v in table.items() if full(k, v)]:
        del table[key]
    excess = len(table) - cap // 2
    if excess > 0:
        for key in list(itertools.islice(table, excess)):
            del table[key]


class Throttle:
    def __init__(self, clock: Clock, *, burst: int, every: float) -> None:
        self.clock = clock
        self.burst = burst
        self.every = every
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def _level(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) / self.every)

    def retry_after(self, key: str) -> int:
        """Whole seconds until `key` may try again (0: it may now); takes nothing."""
        level = self._level(key, self.clock.now())
        return 0 if level >= 1 else max(1, math.ceil(round((1 - level) * self.every, 6)))

    def take(self, key: str) -> None:
        now = self.clock.now()
        level = self._level(key, now)
        if self._buckets.pop(key, None) is None and len(self._buckets) >= MAX_KEYS:
            trim(self._buckets, MAX_KEYS, lambda k, _: self._level(k, now) >= self.burst)
        self._buckets[key] = (max(0.0, level - 1), now)  # re-inserted: most recently touched last

"""Token buckets on the service clock, for login and sign-up attempts.

A bucket holds up to `burst` attempts and gains one back every `every` seconds; an attempt
takes one, and an empty bucket answers how long until the next one (the 429's Retry-After).
Buckets live in memory (one node); full buckets are forgotten when the table grows, so a
flood of distinct keys cannot grow it without bound.
"""

from __future__ import annotations

import math

from service.clock import Clock

MAX_KEYS = 50_000


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
        if len(self._buckets) >= MAX_KEYS and key not in self._buckets:
            self._prune(now)
        self._buckets[key] = (max(0.0, level - 1), now)

    def _prune(self, now: float) -> None:
        self._buckets = {k: v for k, v in self._buckets.items() if self._level(k, now) < self.burst}

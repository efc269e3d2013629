"""Request limits that keep one tenant from starving the others (answered 429
`request.rate_limited` with `Retry-After`):

- per API key: a token bucket, `rate_limit_per_key` requests a second sustained with bursts of
  `rate_limit_burst` (settings; 0 turns it off). Kept in memory, on trio's clock: a restart
  refills every bucket, which only ever errs on the generous side. Taken only after the key
  authenticates (random keys make no bucket); browser sessions have one each too, so the
  table is capped as the login throttle's is (`service.throttle.trim`).
- per organization: at most `max_active_jobs_per_org` jobs queued or rendering from API and
  dashboard submits (steps of product runs are counted by their run's own estimate check,
  not here), and as many product runs queued or running (service/actors/runs/facade.py). Read from the database at each submit: two submits racing at the limit may both
  pass, so the limit can be passed by the few in flight at once; it bounds a flood, not a
  count.
"""

from __future__ import annotations

import math

import trio

from service.errors import RateLimited
from service.throttle import trim

MAX_BUCKETS = 50_000  # at it, full buckets are forgotten, then the least recently touched


class KeyBuckets:
    def __init__(self, per_second: float, burst: int) -> None:
        self.rate = per_second
        self.burst = max(1, burst)
        self.buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, trio time)

    @property
    def on(self) -> bool:
        return self.rate > 0

    def take(self, key_id: str) -> None:
        """One request of `key_id`, or RateLimited with the seconds until one is allowed."""
        if not self.on:
            return
        now = trio.current_time()
        found = self.buckets.pop(key_id, None)  # re-inserted below: most recently touched last
        if found is None and len(self.buckets) >= MAX_BUCKETS:
            trim(self.buckets, MAX_BUCKETS, lambda _, v: v[0] + (now - v[1]) * self.rate >= self.burst)
        tokens, last = found or (float(self.burst), now)
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1:
            wait = math.ceil((1 - tokens) / self.rate)
            self.buckets[key_id] = (tokens, now)
            raise RateLimited(f"Too many requests for this API key: at most {self.rate:g} a second "
                              f"(bursts of {self.burst}). Retry in {wait} s.", wait,
                              {"limit_per_second": self.rate, "burst": self.burst})
        self.buckets[key_id] = (tokens - 1, now)


def check_active_jobs(active: int, limit: int) -> None:
    """Refuse one more job when `active` (queued or rendering) already reaches `limit`."""
    if limit > 0 and active >= limit:
        raise RateLimited(f"Too many jobs in progress for this organization (at most {limit} queued or "
                          "rendering). Retry when some have finished.", 5, {"active_jobs_limit": limit})

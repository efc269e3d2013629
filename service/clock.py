"""Service time = offset + trio's clock. Only this module reads the wall clock.

Because service time follows trio's clock, tests with a MockClock control every rule about
time. Test mode can also move the offset forward (`advance`); actors register a watcher
so they re-check their deadlines at once.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Callable, overload

import trio

ISO = "%Y-%m-%dT%H:%M:%S.%fZ"

# How stale a "last seen" time may be: a session's, an API key's or an operator session's
# last_seen_at / last_used_at is written at most once per this many seconds (one write a
# minute per caller, not one per request).
TOUCH_EVERY = 60.0


class Clock:
    def __init__(self, start: float | None = None) -> None:
        self._start = start
        self._offset: float | None = None
        self._watchers: set[Callable[[], None]] = set()

    def _ensure(self) -> float:
        if self._offset is None:
            start = time.time() if self._start is None else self._start
            self._offset = start - trio.current_time()
        return self._offset

    def now(self) -> float:
        """Service time, seconds since the epoch."""
        return self._ensure() + trio.current_time()

    def trio_time(self, service_ts: float) -> float:
        """The trio clock reading at which service time reaches `service_ts` (rounded up,
        so that `now() >= service_ts` holds once trio's clock gets there)."""
        offset = self._ensure()
        t = service_ts - offset
        while offset + t < service_ts:
            t = math.nextafter(t, math.inf)
        return t

    def advance(self, seconds: float) -> float:
        self._offset = self._ensure() + seconds
        for w in list(self._watchers):
            w()
        return self.now()

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._watchers.add(callback)
        return lambda: self._watchers.discard(callback)

    def iso_now(self) -> str:
        return iso(self.now())


@overload
def iso(ts: float) -> str: ...
@overload
def iso(ts: None) -> None: ...
def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime(ISO)


def parse_iso(text: str) -> float:
    """Parse an ISO 8601 timestamp that carries an offset; raises ValueError otherwise."""
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError("timestamp must include an offset")
    try:  # a time every answer can write back: within years 1 to 9999 in UTC
        dt.astimezone(UTC)
    except OverflowError:
        raise TimestampOutOfRange(text) from None
    return dt.timestamp()


class TimestampOutOfRange(ValueError):
    """A well-formed timestamp whose UTC time is outside years 1 to 9999."""

    def __init__(self, text: str) -> None:
        super().__init__(f"{text} is outside the years 1 to 9999 in UTC")

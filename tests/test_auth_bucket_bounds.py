"""Rate-limit tables are bounded by the caller's distinct names, not by trust: login throttle
keys are chosen by the client (an address, an email), and per-key buckets follow keys and
browser sessions. A flood of fresh names must neither grow a table past its cap nor make
each request pay a scan of the whole table. Mock clock only: no clock advance at all, so
every bucket stays partly drained (none is "full" and free to forget)."""

from __future__ import annotations

import trio

import service.limits as limits_mod
import service.throttle as throttle_mod
from service.clock import Clock
from service.limits import KeyBuckets
from service.throttle import Throttle

CAP = 100
FLOOD = 2_000


def counting(monkeypatch, cls, name: str) -> list[int]:
    """Counts calls of `cls.name` (a bucket's level or fullness check): the table work done."""
    calls = [0]
    original = getattr(cls, name)

    def counted(self, *a, **kw):
        calls[0] += 1
        return original(self, *a, **kw)

    monkeypatch.setattr(cls, name, counted)
    return calls


async def test_a_flood_of_fresh_login_names_keeps_the_throttle_within_its_cap(mock_clock, monkeypatch):
    monkeypatch.setattr(throttle_mod, "MAX_KEYS", CAP)
    t = Throttle(Clock(start=0.0), burst=5, every=60.0)
    levels = counting(monkeypatch, Throttle, "_level")
    for i in range(FLOOD):
        t.take(f"email:{i}@x.test|ip:203.0.113.{i % 250}")
    assert len(t._buckets) <= CAP
    assert levels[0] <= 5 * FLOOD  # amortized: a few bucket reads a take, never a full scan each
    await trio.sleep(0)


async def test_the_newest_drained_login_buckets_survive_a_flood(mock_clock, monkeypatch):
    monkeypatch.setattr(throttle_mod, "MAX_KEYS", CAP)
    t = Throttle(Clock(start=0.0), burst=2, every=60.0)
    for i in range(FLOOD):
        t.take(f"n{i}")
    t.take("guesser")
    t.take("guesser")
    for i in range(CAP // 2):  # more fresh names after it: it is among the newest
        t.take(f"m{i}")
    assert t.retry_after("guesser") == 60  # still drained: recent buckets are kept
    await trio.sleep(0)


async def test_a_flood_of_distinct_keys_keeps_the_key_buckets_within_their_cap(mock_clock, monkeypatch):
    monkeypatch.setattr(limits_mod, "MAX_BUCKETS", CAP)
    b = KeyBuckets(per_second=1.0, burst=5)
    for i in range(FLOOD):
        b.take(f"session:{i}")
    assert len(b.buckets) <= CAP
    await trio.sleep(0)

"""Token buckets of the login throttle, on the service clock (trio's mock clock)."""

from __future__ import annotations

import trio

from service.clock import Clock
from service.throttle import Throttle


async def test_burst_then_one_per_period(mock_clock):
    t = Throttle(Clock(start=1000.0), burst=3, every=10.0)
    for _ in range(3):
        assert t.retry_after("a") == 0
        t.take("a")
    assert t.retry_after("a") == 10
    assert t.retry_after("b") == 0  # keys are independent
    mock_clock.jump(9.5)
    assert t.retry_after("a") == 1
    mock_clock.jump(0.5)
    assert t.retry_after("a") == 0
    t.take("a")
    assert t.retry_after("a") == 10
    mock_clock.jump(30)  # refills to the burst, never past it
    for _ in range(3):
        assert t.retry_after("a") == 0
        t.take("a")
    assert t.retry_after("a") == 10
    await trio.sleep(0)


async def test_full_buckets_are_forgotten_when_the_table_is_full(mock_clock, monkeypatch):
    import service.throttle as mod
    monkeypatch.setattr(mod, "MAX_KEYS", 4)
    t = Throttle(Clock(start=0.0), burst=2, every=10.0)
    for k in "abcd":
        t.take(k)
    mock_clock.jump(10)  # a..d are full again
    t.take("x")
    t.take("x")
    t.take("e")
    assert set(t._buckets) == {"x", "e"}
    assert t.retry_after("x") == 10

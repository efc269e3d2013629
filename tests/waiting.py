"""Waiting in tests: for a condition, never for a fixed time.

- `settle()`: under trio, until every other task is blocked, i.e. everything that could happen
  now has happened (trio.testing.wait_all_tasks_blocked). The way to check that something did
  *not* happen, with no real time spent.
- `wait_until(condition, timeout=...)`: for what runs outside the test's control (a real
  server, a thread, another process): reads `condition()` (sync or async) until it gives a
  true value and returns that value; fails after `timeout` seconds of trio's clock (virtual
  under a mock clock, so a test on the mock clock stays virtual).
- `wait_until_sync`: the same for a test without trio (browser, subprocess tests), on the
  real clock.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
import trio.testing

T = TypeVar("T")

EVERY = 0.01  # seconds between two reads of a condition


async def settle() -> None:
    """Until every other task is blocked (on I/O, a lock, or a sleep)."""
    await trio.testing.wait_all_tasks_blocked()


async def wait_until(condition: Callable[[], T | Awaitable[T]], timeout: float = 10.0, every: float = EVERY) -> T:
    with trio.fail_after(timeout):
        while True:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
            await trio.sleep(every)


def wait_until_sync(condition: Callable[[], T], timeout: float = 10.0, every: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not true within {timeout} s: {getattr(condition, '__name__', condition)}")
        time.sleep(every)

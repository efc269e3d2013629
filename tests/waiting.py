"""Waiting in tests: for a condition, never for a fixed time.

- `settle()`: under trio, until every other task is blocked, i.e. everything that could happen
  now has happened (trio.testing.wait_all_tasks_blocked). The way to check that something did
  *not* happen, with no real time spent.
- `wait_until(condition, timeout=...)`: for what runs outside the test's control (a real
  server, a thread, another process): reads `condition()` (sync or async) until it gives a
  true value and returns that value; fails after `timeout` seconds of trio's clock (virtual
  under a mock clock, so a test on the mock clock stays virtual).
  With `real_time=True` it waits on the real clock whatever trio's clock is (for a thread
  such as the SMTP server's, under a mock clock nobody advances).
- `wait_until_sync`: the same for a test without trio (browser, subprocess tests), on the
  real clock.
"""

from __future__ import annotations

import inspect
import threading
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


async def wait_until(condition: Callable[[], T | Awaitable[T]], timeout: float = 10.0, every: float = EVERY, *,
                     real_time: bool = False) -> T:
    if real_time:
        deadline = time.monotonic() + timeout
        while True:
            value = await _read(condition)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"not true within {timeout} s (real time): {_name(condition)}")
            await trio.to_thread.run_sync(threading.Event().wait, every)
    with trio.fail_after(timeout):
        while True:
            value = await _read(condition)
            if value:
                return value
            await trio.sleep(every)


async def _read(condition: Callable[[], T | Awaitable[T]]) -> T:
    value = condition()
    if inspect.isawaitable(value):
        return await value
    return value


def _name(condition: Callable[..., object]) -> str:
    return getattr(condition, "__qualname__", repr(condition))


def wait_until_sync(condition: Callable[[], T], timeout: float = 10.0, every: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not true within {timeout} s: {_name(condition)}")
        time.sleep(every)

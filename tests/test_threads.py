"""Thread hand-offs without the limiter's step when a token is free (service/threads.py)."""

from __future__ import annotations

import threading

import pytest
import trio
from conftest import steps_taken

from service import threads


async def test_a_free_token_is_taken_without_a_step():
    assert await threads.run_sync(lambda: 7) == 7
    with steps_taken() as own:
        await threads.run_sync(lambda: None)
    with steps_taken() as trios:
        await trio.to_thread.run_sync(lambda: None)
    assert own.taken == trios.taken - 1 and own.taken >= 1  # the wait for the thread's result is still a step


async def test_the_tokens_are_trios_default_limiters_and_a_full_one_is_waited_for(autojump_clock):
    limiter = trio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = 1
    held = object()
    limiter.acquire_on_behalf_of_nowait(held)
    ran: list[float] = []
    async with trio.open_nursery() as n:
        n.start_soon(lambda: threads.run_sync(lambda: ran.append(1.0)))
        await trio.sleep(5)
        assert ran == [] and limiter.statistics().tasks_waiting == 1
        limiter.release_on_behalf_of(held)
    assert ran == [1.0] and limiter.borrowed_tokens == 0


async def test_a_cancel_that_came_before_is_raised_before_any_thread_work():
    ran = threading.Event()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await threads.run_sync(ran.set)
    assert not ran.is_set() and trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0


async def test_an_error_in_the_thread_is_raised_and_the_token_given_back():
    def boom():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await threads.run_sync(boom)
    assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0


async def test_async_with_takes_a_free_token_without_a_step_and_gives_it_back():
    """trio-parallel enters its limiter with `async with` (service/media/isolated.py)."""
    limiter = trio.CapacityLimiter(1)
    with steps_taken() as own:
        async with threads.prompt(limiter):
            assert limiter.borrowed_tokens == 1
    with steps_taken() as trios:
        async with limiter:
            pass
    assert (own.taken, trios.taken) == (0, 1) and limiter.borrowed_tokens == 0


async def test_async_with_waits_for_a_full_limiter_and_raises_a_cancel_that_came_before(autojump_clock):
    limiter = trio.CapacityLimiter(1)
    held = object()
    limiter.acquire_on_behalf_of_nowait(held)
    entered: list[bool] = []

    async def enter():
        async with threads.prompt(limiter):
            entered.append(True)

    async with trio.open_nursery() as n:
        n.start_soon(enter)
        await trio.sleep(5)
        assert entered == [] and limiter.statistics().tasks_waiting == 1
        limiter.release_on_behalf_of(held)
    assert entered == [True] and limiter.borrowed_tokens == 0
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            async with threads.prompt(limiter):
                entered.append(False)
    assert entered == [True] and limiter.borrowed_tokens == 0

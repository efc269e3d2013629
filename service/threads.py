"""Work handed to a worker thread without the scheduler step trio's limiter takes when free.

`trio.to_thread.run_sync` first acquires a token of its limiter, and trio's
`CapacityLimiter` yields to the scheduler after taking a free one; the call then waits for
its thread, a step of its own. The first step is for nothing: two a job on its path (the
output's write and check, and its placing; bench/README.md, "Throughput XII"; also an
engine's inputs fetched and outputs hashed, where a render has them), and one a group
commit (`service/storage/db.py`). `Prompt` wraps a limiter (trio's own default by
`run_sync`, the same tokens as every other thread call) and takes a free token at once; a
cancel that came before is still raised before any thread work, and a limiter with no token
free (or with tasks already waiting) is waited for as before, in trio's fair order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import trio

T = TypeVar("T")


class Prompt:
    """A `CapacityLimiter`-like object for `trio.to_thread.run_sync(limiter=...)` (trio
    documents the two methods it calls) and `trio_parallel.run_sync(limiter=...)` (which
    enters it with `async with`) over `limiter`'s tokens."""

    __slots__ = ("limiter",)

    def __init__(self, limiter: trio.CapacityLimiter) -> None:
        self.limiter = limiter

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            await self.limiter.acquire_on_behalf_of(borrower)

    def release_on_behalf_of(self, borrower: object) -> None:
        self.limiter.release_on_behalf_of(borrower)

    async def __aenter__(self) -> None:  # `async with limiter:` (trio-parallel's run_sync)
        await self.acquire_on_behalf_of(trio.lowlevel.current_task())

    async def __aexit__(self, *exc: object) -> None:
        self.release_on_behalf_of(trio.lowlevel.current_task())


def prompt(limiter: trio.CapacityLimiter) -> trio.CapacityLimiter:
    """`limiter` as `Prompt`, typed as what `to_thread.run_sync` names."""
    return cast(trio.CapacityLimiter, Prompt(limiter))


async def run_sync(fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
    """`trio.to_thread.run_sync` under trio's default limiter, taken without a step when free."""
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=abandon_on_cancel,
                                         limiter=prompt(trio.to_thread.current_default_thread_limiter()))

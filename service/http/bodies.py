"""Streamed answers whose cleanup does not wait for their first byte.

quart closes an answer's body only once it has begun to send it, and closing an async
generator that never started runs none of its `finally`. A body whose head could not be
written (the client left as it was, the response timeout fell there) kept what it held: a
stream's place under the stream limits, a streamed chat's job, charged for an answer
nobody reads. `ClosingBody` runs its `release` when it is closed, started or not, and the
node's connection (service/http/request_task.py) closes every streamed body it answered
with, sent or not.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable

import trio


class ClosingBody:
    """`frames` as an answer's body; `release` runs once when it is closed (shielded: it
    runs in a request's cancelled scope)."""

    def __init__(self, frames: AsyncGenerator[bytes, None], release: Callable[[], Awaitable[None] | None]) -> None:
        self._frames = frames
        self._release: Callable[[], Awaitable[None] | None] | None = release

    def __aiter__(self) -> ClosingBody:
        return self

    async def __anext__(self) -> bytes:
        return await self._frames.__anext__()

    async def aclose(self) -> None:
        try:
            await self._frames.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                with trio.CancelScope(shield=True):
                    done = release()
                    if inspect.isawaitable(done):
                        await done

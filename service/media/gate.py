"""The node's budget for large decodes, shared fairly between organizations.

A large decode (an image over LARGE_DECODE pixels, or a video whose frames are) holds
hundreds of megabytes, so only `capacity` run at once on the node. Waiters queue per
organization and the organizations are served in turn: when a slot frees, the next
organization in the round gets it, and the one whose decode just ended goes to the back.
So one key's queue of large uploads delays another organization's single upload by at
most one decode per organization ahead of it, never by the whole queue.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

LARGE_DECODE = 4_000_000  # pixels; a decode past this takes a slot of the gate


class DecodeGate:
    def __init__(self, capacity: int = 1) -> None:
        self.capacity = max(1, capacity)
        self.running = 0
        self.waiting: OrderedDict[str, deque[trio.Event]] = OrderedDict()  # org -> its waiters, in turn order

    @asynccontextmanager
    async def slot(self, org: str, pixels: int) -> AsyncIterator[None]:
        """Hold a slot while decoding `pixels` for `org`; small decodes pass at once."""
        if pixels <= LARGE_DECODE:
            yield
            return
        await self._acquire(org)
        try:
            yield
        finally:
            self._release(org)

    def queued(self, org: str) -> int:
        return len(self.waiting.get(org, ()))

    async def _acquire(self, org: str) -> None:
        if self.running < self.capacity and not self.waiting:
            self.running += 1
            return
        granted = trio.Event()
        self.waiting.setdefault(org, deque()).append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():  # the slot came as we were cancelled: hand it on
                self._release(org)
            else:
                self._forget(org, granted)
            raise

    def _release(self, org: str) -> None:
        if org in self.waiting:
            self.waiting.move_to_end(org)  # the organization just served goes to the back
        if not self.waiting:
            self.running -= 1
            return
        first, queue = next(iter(self.waiting.items()))
        granted = queue.popleft()
        self.waiting.move_to_end(first)
        if not queue:
            del self.waiting[first]
        granted.set()  # the slot passes over: `running` is unchanged

    def _forget(self, org: str, granted: trio.Event) -> None:
        queue = self.waiting.get(org)
        if queue is None:
            return
        try:
            queue.remove(granted)
        except ValueError:
            pass
        if not queue:
            del self.waiting[org]

"""A pool of engine servers for one model: least busy first, down servers skipped.

Each server runs at most the model's `concurrency` jobs at once. A server is `down`
after a failed health check or a job that could not reach it, and up again after a
passing check (checked every HEALTH_S by `watch`). A server not yet checked counts as
up, so a node whose engines are slow to answer still takes jobs.

`acquire` waits (the job stays `rendering`) while every live server is full, and
raises Unreachable at once when every server is known down: a job then fails fast
with the "unavailable" message, and `all_down` makes submits answer 503.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from .common import Unreachable

log = logging.getLogger(__name__)

HEALTH_S = 5.0
FIRST_S = 3.0  # the longest the first round may delay the node's start


@dataclass
class Server:
    url: str
    busy: int = 0
    down: bool = False
    retired: bool = False  # taken out by a catalog reload: no new jobs, dropped once idle
    error: str | None = None  # why the last health check failed (the operator console shows it)


class Pool:
    def __init__(self, model_id: str, urls: list[str], concurrency: int) -> None:
        self.model_id = model_id
        self.servers = [Server(u) for u in urls]
        self.concurrency = concurrency
        self._changed = trio.Event()

    @property
    def all_down(self) -> bool:
        return all(s.down or s.retired for s in self.servers)

    def mark(self, server: Server, down: bool) -> None:
        if server.down != down:
            log.warning("engine server %s of model %s is %s", server.url, self.model_id, "down" if down else "up again")
        server.down = down
        self._wake()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Server]:
        """The least busy live server with room, held for one job."""
        while True:
            if self.all_down:
                raise Unreachable(f"every server of {self.model_id} is down")
            free = [s for s in self.servers if not s.down and not s.retired and s.busy < self.concurrency]
            if free:
                break
            changed = self._changed
            await changed.wait()
        server = min(free, key=lambda s: s.busy)
        server.busy += 1
        try:
            yield server
        finally:
            server.busy -= 1
            if server.retired and server.busy == 0 and server in self.servers:
                self.servers.remove(server)
            self._wake()

    def resize(self, urls: list[str], concurrency: int) -> None:
        """A catalog reload: servers not listed before are added (checked at the next round,
        up until then), servers no longer listed take no new job and leave once idle."""
        for s in self.servers:
            s.retired = s.url not in urls
        self.servers = [s for s in self.servers if not (s.retired and s.busy == 0)]
        known = {s.url for s in self.servers}
        self.servers += [Server(u) for u in urls if u not in known]
        self.concurrency = concurrency
        self._wake()

    async def watch(self, healthy: Callable[[str], Awaitable[bool]], period: float = HEALTH_S, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check every server now (started once that round ends, or after FIRST_S: a
        server that refuses is known down before the first submit) and then every
        `period` seconds, for ever."""
        with trio.move_on_after(FIRST_S):
            await self._round(healthy)
        task_status.started()
        while True:
            await trio.sleep(period)
            await self._round(healthy)

    async def _round(self, healthy: Callable[[str], Awaitable[bool]]) -> None:
        async with trio.open_nursery() as n:
            for s in self.servers:
                if not s.retired:
                    n.start_soon(self._check, s, healthy)

    async def _check(self, server: Server, healthy: Callable[[str], Awaitable[bool]]) -> None:
        error = "the health check answered not ready"
        try:
            ok = await healthy(server.url)
        except Exception as e:  # noqa: BLE001 - any failure to answer is "down"
            ok, error = False, f"{type(e).__name__}: {e}"[:300]
        server.error = None if ok else error
        self.mark(server, not ok)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

"""httpcore's connection pool, without handing one idle connection to several requests.

httpcore 1.0 assigns a queued request an idle HTTP/1.1 connection, but the connection
stays idle until that request's task runs and starts on it. Until then every other pass
of the pool (another request queued, a response closed) still sees it idle, and:

- gives it to more queued requests: all but one then fail to start on it
  (`ConnectionNotAvailable`) and go round the pool again. Through one Cog server at 64 jobs
  in flight that was 1.2 such retries a job, each a lock wait, an exception and another
  pass (bench/README.md, "Throughput VII");
- may close it as a surplus keep-alive connection, or to make room for a new one: the
  request it was given then retries too (encode/httpcore#1110).

`Pool` builds each connection inside `_Promised`, which reports a connection promised to a
request that has not started on it as neither available nor idle, so a pass neither gives
it away again nor closes it. A request that gives its connection back unstarted (a
cancel, or a retry) is no longer in the pool's list, so the promise ends with it. Only for
HTTP/1.1 pools: an HTTP/2 connection takes many requests at once.

httpcore also asks every connection on every pass whether it has expired, and for an idle
HTTP/1.1 one that includes whether the server closed it: a `poll` of its socket each, about
ten a job through one Cog server at 64 in flight, each a system call that hands the GIL to
any worker thread that wants it. Here a pass drops connections by the keep-alive clock
only, and asks whether the server closed an idle connection when it is chosen for a request
(and drops it and looks on if so): a request never starts on a connection the server closed,
as before, and a closed one nobody chooses goes at its keep-alive expiry or when room is
needed, as any idle one does (bench/README.md, "Throughput XXI").
"""

from __future__ import annotations

import time
from typing import Any

import httpcore
import trio
from httpcore import AsyncConnectionInterface, Origin, Request, Response


class Pool(httpcore.AsyncConnectionPool):
    _held: set[AsyncConnectionInterface] | None = None  # in a pass: what the requests held at its start
    _queued: tuple[Any, ...] = ()  # in a pass: the requests it may assign (queued at its start)

    def create_connection(self, origin: Origin) -> AsyncConnectionInterface:
        return _Promised(super().create_connection(origin), self)

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        """httpcore 1.0's pass, decision for decision (tests/test_engines_http_pool.py
        compares the two on random pools) but for when a closed idle connection is found
        (when chosen: module docstring) and for an orphaned one (`_orphaned`), without
        asking the same things again and again.
        httpcore asks `is_idle` of every connection once for each idle one (a count of all
        the connections, `len([c.is_idle() for c in ...])`, whatever they answer), and of
        every connection again for each queued request whether or not it needs an idle
        one: about 107 `is_idle` calls a job through one Cog server at 64 in flight. Here:
        the count is the pool's length, and the first idle connection is looked for only
        when a request needs one closed to make room. `promised` answers from the
        connections the requests held when the pass began plus the queued requests (the
        only ones a pass assigns)."""
        connections = self._connections
        self._held = held = {r.connection for r in self._requests if r.connection is not None}
        self._queued = queued = tuple(r for r in self._requests if r.connection is None)
        try:
            closing: list[AsyncConnectionInterface] = []
            for connection in list(connections):  # closed, expired, an idle one too many, or orphaned
                if connection.is_closed():
                    connections.remove(connection)
                elif _expired_by_clock(connection) or (
                        len(connections) > self._max_keepalive_connections and connection.is_idle()) or (
                        connection not in held and _orphaned(connection)):
                    connections.remove(connection)
                    closing.append(connection)
            for pool_request in queued:
                origin = pool_request.request.url.origin
                chosen = _first_open(connections, origin, closing)
                if chosen is None:
                    if len(connections) >= self._max_connections:
                        idle = next((c for c in connections if c.is_idle()), None)
                        if idle is None:
                            continue  # stays queued
                        connections.remove(idle)
                        closing.append(idle)
                    chosen = self.create_connection(origin)
                    connections.append(chosen)
                pool_request.assign_to_connection(chosen)
            return closing
        finally:
            self._held, self._queued = None, ()

    def promised(self, connection: AsyncConnectionInterface) -> bool:
        """Given to a request of this pool that has not started on it (its own request
        only makes it busy, so a busy connection never gets this far)."""
        if self._held is None:
            return any(r.connection is connection for r in self._requests)
        return connection in self._held or any(r.connection is connection for r in self._queued)


def _orphaned(connection: AsyncConnectionInterface) -> bool:
    """A connection no request holds that is not idle (nor closed): made for a request that
    was cancelled before it started on it (never connected, or connected in state NEW).
    httpcore's pass keeps it for good, a slot lost (encode/httpcore#1093)."""
    return isinstance(connection, _Promised) and not connection.inner.is_idle()


def _expired_by_clock(connection: AsyncConnectionInterface) -> bool:
    """httpcore's `has_expired` without the socket's poll where the connection can answer so
    (`_Promised`); any other connection is asked as httpcore asks it."""
    if isinstance(connection, _Promised):
        return connection.expired_by_clock()
    return connection.has_expired()


def _first_open(connections: list[AsyncConnectionInterface], origin: Origin,
                closing: list[AsyncConnectionInterface]) -> AsyncConnectionInterface | None:
    """The first connection available for `origin` that the server has not closed; those
    found closed on the way are moved from `connections` to `closing`."""
    for c in list(connections):
        if c.can_handle_request(origin) and c.is_available():
            if not c.has_expired():
                return c
            connections.remove(c)
            closing.append(c)
    return None


class _Promised(AsyncConnectionInterface):
    """One of the pool's connections: httpcore's own, asked through `Pool.promised` first."""

    def __init__(self, inner: AsyncConnectionInterface, pool: Pool) -> None:
        self.inner, self.pool = inner, pool
        if isinstance(inner, httpcore.AsyncHTTPConnection):  # its lock around the connect, taken by each request
            inner._request_lock = FreeLock()  # type: ignore[assignment]  # the same async-with use

    async def handle_async_request(self, request: Request) -> Response:
        http11 = getattr(self.inner, "_connection", None)  # made by its first request
        if isinstance(http11, httpcore.AsyncHTTP11Connection) and not isinstance(http11._state_lock, FreeLock):
            http11._state_lock = FreeLock()  # type: ignore[assignment]  # the same async-with use
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def info(self) -> str:
        return self.inner.info()

    def can_handle_request(self, origin: Origin) -> bool:
        return self.inner.can_handle_request(origin)

    def is_available(self) -> bool:
        return self.inner.is_available() and not self.pool.promised(self)

    def has_expired(self) -> bool:
        return self.inner.has_expired()

    def expired_by_clock(self) -> bool:
        """`has_expired` as httpcore 1.0 answers it, less the poll of an idle HTTP/1.1
        connection's socket (whether the server closed it)."""
        http11 = getattr(self.inner, "_connection", None)
        if isinstance(http11, httpcore.AsyncHTTP11Connection):
            expire_at = http11._expire_at
            return expire_at is not None and time.monotonic() > expire_at
        return self.inner.has_expired()

    def is_idle(self) -> bool:
        return self.inner.is_idle() and not self.pool.promised(self)

    def is_closed(self) -> bool:
        return self.inner.is_closed()

    def __repr__(self) -> str:
        return repr(self.inner)


class FreeLock:
    """httpcore's HTTP/1.1 state lock and its connection's request lock, taken at once when
    free. trio's `Lock` yields to the scheduler even then: three scheduler steps a request,
    for locks that guard a few state assignments (and a close), and the connect of a
    connection's first request; the request's own reads and writes are checkpoints anyway.
    Held by another task (a connect under way), it is waited for as before."""

    def __init__(self) -> None:
        self._lock = trio.Lock()

    async def __aenter__(self) -> FreeLock:
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()

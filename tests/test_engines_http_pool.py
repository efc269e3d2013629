"""The engine client's connection pool (service/engines/http_pool.py): an idle connection
given to a request that has not started on it yet is given to no other request and is not
closed, so no request fails to start on its connection and goes round the pool again; the
pool's pass decides as httpcore's own (3,000 random pools) without its repeated asks."""

from __future__ import annotations

from functools import partial

import httpcore
import pytest
import trio
import trio.testing
from httpcore._async.connection_pool import AsyncPoolRequest
from keepalive_server import Server
from waiting import wait_until

from service.engines import one_send
from service.engines.http_pool import FreeLock, Pool


@pytest.fixture
async def server(nursery):
    s = Server()
    await s.serve(nursery)
    return s


@pytest.fixture
def retries(monkeypatch):
    """How many times a request of any pool failed to start on the connection it was given
    (`ConnectionNotAvailable`) and was queued again: httpcore clears its connection then."""
    count = [0]
    clear = AsyncPoolRequest.clear_connection

    def counted(self):
        count[0] += 1
        clear(self)

    monkeypatch.setattr(AsyncPoolRequest, "clear_connection", counted)
    return count


def queued(port: int) -> AsyncPoolRequest:
    return AsyncPoolRequest(httpcore.Request("GET", f"http://127.0.0.1:{port}/x"))


async def get(pool: Pool, port: int) -> None:
    assert (await pool.request("GET", f"http://127.0.0.1:{port}/x")).status == 200


async def test_requests_queued_together_take_one_idle_connection_each(server):
    async with Pool(max_connections=4, max_keepalive_connections=4) as pool:
        await get(pool, server.port)
        [idle] = pool.connections
        first, second = queued(server.port), queued(server.port)
        pool._requests += [first, second]
        pool._assign_requests_to_connections()  # one pass, as httpcore runs it for a new request
        assert first.connection is idle
        assert second.connection is not None and second.connection is not idle  # a new one
        assert not idle.is_available() and not idle.is_idle()  # promised: to no one else
        pool._requests.remove(second)
        pool._assign_requests_to_connections()
        assert pool._requests == [first] and first.connection is idle
        pool._requests.remove(first)  # given back unstarted (a cancel): the promise ends
        assert idle.is_available() and idle.is_idle()


async def test_a_promised_connection_is_not_closed_to_make_room(server, nursery):
    other = Server()
    await other.serve(nursery)
    async with Pool(max_connections=1, max_keepalive_connections=1) as pool:
        await get(pool, server.port)
        [idle] = pool.connections
        mine, theirs = queued(server.port), queued(other.port)
        pool._requests.append(mine)
        assert pool._assign_requests_to_connections() == [] and mine.connection is idle
        pool._requests.append(theirs)
        # httpcore's own pool closes the idle connection here, to open one to the other server
        assert pool._assign_requests_to_connections() == []
        assert theirs.connection is None and pool.connections == [idle]  # it waits its turn
        pool._requests.remove(mine)
        [closing] = pool._assign_requests_to_connections()  # now idle: closed for the other server
        assert closing is idle and theirs.connection is not None
        await closing.aclose()
        pool._requests.remove(theirs)


async def test_requests_in_flight_together_never_fail_to_start_on_their_connection(server, retries):
    async with Pool(max_connections=8, max_keepalive_connections=8) as pool:
        for round_ in range(5):
            server.hold, server.waiting, server.go = 8, 0, trio.Event()
            async with trio.open_nursery() as n:
                for _ in range(8):
                    n.start_soon(get, pool, server.port)
            assert server.accepted == 8, round_  # after the first round, every one reused
            server.hold = 0
            async with trio.open_nursery() as n:  # fewer than there are idle connections
                for _ in range(3):
                    n.start_soon(get, pool, server.port)
        assert retries[0] == 0
        assert len(pool.connections) == 8


async def test_a_reused_connection_takes_its_locks_without_a_scheduler_step(server):
    async with Pool(max_connections=1, max_keepalive_connections=1) as pool:
        await get(pool, server.port)
        await get(pool, server.port)  # the connection's HTTP/1.1 state now exists: its lock swapped
        [conn] = pool.connections
        lock = conn.inner._connection._state_lock
        assert isinstance(lock, FreeLock)
        with trio.testing.assert_no_checkpoints():
            async with lock:
                pass
        await get(pool, server.port)
        assert conn.inner._connection._state_lock is lock  # swapped once
        assert isinstance(conn.inner._request_lock, FreeLock)  # the connection's own, from its start


async def test_the_free_lock_still_excludes_a_second_holder(autojump_clock):
    lock, order = FreeLock(), []

    async def hold(name: str) -> None:
        async with lock:
            order.append(f"{name} in")
            await trio.sleep(1)
            order.append(f"{name} out")

    async with trio.open_nursery() as n:
        n.start_soon(hold, "a")
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(hold, "b")
    assert order == ["a in", "a out", "b in", "b out"]


class FakeConnection(httpcore.AsyncConnectionInterface):
    """A connection in a given state, for comparing passes (no I/O)."""

    def __init__(self, name: str, origin: httpcore.Origin, closed=False, expired=False, idle=False,
                 available=False) -> None:
        self.name, self.origin = name, origin
        self.closed, self.expired, self.idle, self.available = closed, expired, idle, available

    def can_handle_request(self, origin):
        return origin == self.origin

    def is_available(self):
        return self.available

    def has_expired(self):
        return self.expired

    def is_idle(self):
        return self.idle

    def is_closed(self):
        return self.closed


class Comparable(Pool):
    """A pool whose new connections are named in order (the same in both passes)."""

    def create_connection(self, origin):
        self.made = getattr(self, "made", 0) + 1
        return FakeConnection(f"new{self.made}", origin, available=True)


def random_pool(rng) -> tuple[Comparable, list]:
    origins = [httpcore.URL(f"http://h{i}:80/").origin for i in range(2)]
    pool = Comparable(max_connections=rng.randint(1, 6), max_keepalive_connections=rng.randint(0, 6))
    conns = []
    for i in range(rng.randint(0, 7)):
        idle = rng.random() < 0.5
        conn = FakeConnection(f"c{i}", rng.choice(origins), closed=rng.random() < 0.1, expired=rng.random() < 0.1,
                              idle=idle, available=idle or rng.random() < 0.2)
        conns.append(conn)
    pool._connections = list(conns)
    requests = []
    for _ in range(rng.randint(0, 6)):
        r = AsyncPoolRequest(httpcore.Request("GET", f"{rng.choice(['http://h0', 'http://h1'])}/x"))
        if conns and rng.random() < 0.3:  # already holds one (started or promised)
            r.connection = rng.choice(conns)
        requests.append(r)
    pool._requests = requests
    return pool, requests


def outcome(pool: Comparable, requests: list, closing: list) -> tuple:
    name = lambda c: None if c is None else getattr(c, "name", None) or c.inner.name  # noqa: E731
    return ([name(c) for c in pool._connections], [name(c) for c in closing],
            [name(r.connection) for r in requests])


async def test_the_pass_decides_as_httpcores_own_on_random_pools():
    import random

    for seed in range(3000):
        ours, ours_requests = random_pool(random.Random(seed))
        theirs, their_requests = random_pool(random.Random(seed))
        closing = ours._assign_requests_to_connections()
        their_closing = httpcore.AsyncConnectionPool._assign_requests_to_connections(theirs)
        assert outcome(ours, ours_requests, closing) == outcome(theirs, their_requests, their_closing), seed


async def test_the_pass_asks_each_connection_once_at_most_whether_it_is_idle():
    asked: list[str] = []

    class Counted(FakeConnection):
        def is_idle(self):
            asked.append(self.name)
            return self.idle

    origin = httpcore.URL("http://h0:80/").origin
    pool = Comparable(max_connections=8, max_keepalive_connections=8)
    pool._connections = [Counted(f"c{i}", origin, idle=True, available=True) for i in range(8)]
    pool._requests = [AsyncPoolRequest(httpcore.Request("GET", "http://h0/x")) for _ in range(4)]
    pool._assign_requests_to_connections()
    assert asked == []  # nothing to close, every request met an available connection
    httpcore.AsyncConnectionPool._assign_requests_to_connections(pool)
    assert len(asked) > 8  # httpcore's own pass, for comparison


async def test_a_pass_asks_the_socket_only_of_the_idle_connection_it_chooses(server, monkeypatch):
    """httpcore polls every idle HTTP/1.1 connection's socket on every pass (did the server
    close it?); here only the one a request is about to take."""
    polls: list[int] = []

    def counted(self, name):
        if name == "is_readable":
            polls.append(id(self))
        return self.inner.get_extra_info(name)

    monkeypatch.setattr(one_send.OneSendStream, "get_extra_info", counted)
    async with Pool(max_connections=8, max_keepalive_connections=8, network_backend=one_send.OneSendBackend()) as pool:
        server.hold = 4  # four requests in flight together: four connections, then idle
        async with trio.open_nursery() as n:
            for _ in range(4):
                n.start_soon(get, pool, server.port)
        server.hold = 0
        assert len(pool.connections) == 4 and all(c.is_idle() for c in pool.connections)
        polls.clear()
        await get(pool, server.port)  # two passes (queued, closed), one connection chosen
        assert len(polls) == 1 and len(pool.connections) == 4


async def test_an_idle_connection_the_server_closed_is_dropped_when_chosen(nursery):
    """A server that closes its side after each answer (without saying so): the next request
    finds the connection closed when it is chosen and opens another instead of failing."""
    accepted = [0]

    async def once(stream: trio.SocketStream) -> None:
        accepted[0] += 1
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await stream.aclose()

    listeners = await nursery.start(partial(trio.serve_tcp, once, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    async with Pool(max_connections=4, max_keepalive_connections=4) as pool:
        for n in range(1, 4):
            await get(pool, port)
            assert accepted[0] == n and len(pool.connections) <= 1  # a new connection each time; the dead one dropped
            await wait_until(lambda: all(c.has_expired() for c in pool.connections))  # the server's close arrived

"""The engine client's connection pool (service/engines/http_pool.py): an idle connection
given to a request that has not started on it yet is given to no other request and is not
closed, so no request fails to start on its connection and goes round the pool again."""

from __future__ import annotations

import httpcore
import pytest
import trio
import trio.testing
from httpcore._async.connection_pool import AsyncPoolRequest
from test_engines_transport import Server

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


async def test_a_reused_connection_takes_its_state_lock_without_a_scheduler_step(server):
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

"""A model's pool of engine servers: least busy first, `concurrency` per server, down
servers skipped until a health check passes, fail fast when all are down (mock clock)."""

from __future__ import annotations

import pytest
import trio

from engine_support import cog_catalog, engine_node
from service.engines.common import Unreachable
from service.engines.pool import FIRST_S, HEALTH_S, Pool
from test_generation_support import submit, wait_status


async def test_jobs_spread_least_busy_first_and_wait_when_full():
    pool = Pool("m", ["http://a", "http://b"], concurrency=2)
    held: list[str] = []
    release = trio.Event()

    async def job(task_status=trio.TASK_STATUS_IGNORED):
        async with pool.acquire() as server:
            held.append(server.url)
            task_status.started()
            await release.wait()

    async with trio.open_nursery() as n:
        for _ in range(4):
            await n.start(job)
        assert sorted(held) == ["http://a", "http://a", "http://b", "http://b"]
        assert held[:2] == ["http://a", "http://b"]  # the second job goes to the idle server
        n.start_soon(job)  # a fifth waits: every server is full
        await trio.testing.wait_all_tasks_blocked()
        assert len(held) == 4
        release.set()
    assert len(held) == 5 and all(s.busy == 0 for s in pool.servers)


async def test_a_down_server_is_skipped_and_all_down_fails_fast(autojump_clock):
    pool = Pool("m", ["http://a", "http://b"], concurrency=1)
    health = {"http://a": False, "http://b": True}

    async def healthy(url: str) -> bool:
        if url == "http://b" and not health[url]:
            raise OSError("refused")
        return health[url]

    async with trio.open_nursery() as n:
        await n.start(pool.watch, healthy)
        assert [s.down for s in pool.servers] == [True, False]
        async with pool.acquire() as server:
            assert server.url == "http://b"
        health["http://b"] = False
        await trio.sleep(HEALTH_S + 0.1)
        assert pool.all_down
        with pytest.raises(Unreachable, match="every server of m is down"):
            async with pool.acquire():
                pass
        health["http://a"] = True  # recovers at the next check
        await trio.sleep(HEALTH_S)
        async with pool.acquire() as server:
            assert server.url == "http://a"
        n.cancel_scope.cancel()


async def test_a_silent_server_does_not_hold_the_start_longer_than_the_first_round(autojump_clock):
    pool = Pool("m", ["http://slow"], concurrency=1)

    async def healthy(url: str) -> bool:
        await trio.sleep_forever()

    async with trio.open_nursery() as n:
        before = trio.current_time()
        await n.start(pool.watch, healthy)
        assert trio.current_time() - before == pytest.approx(FIRST_S)
        assert not pool.all_down  # not known down: still takes jobs
        n.cancel_scope.cancel()



async def test_a_pool_with_a_dead_server_sends_every_job_to_the_live_one(cog, tmp_path):
    async with engine_node(tmp_path, cog_catalog(["http://127.0.0.1:9", cog.url])) as n:
        pool = n.parts.engines.pools["cog-image"]
        assert [s.down for s in pool.servers] == [True, False]
        key = (await n.create_org())["api_key"]
        rids = [(await submit(n, key, {"prompt": f"p{i}"}, path="/v1/generation/models/cog-image"))["request_id"]
                for i in range(3)]
        for rid in rids:
            assert (await wait_status(n, key, rid))["status"] == "completed"

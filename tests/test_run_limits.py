"""At most `max_active_jobs_per_org` runs of one organization queued or running at once: a
run start reserves nothing (each step's hold is placed as it starts) and a run's steps are
not counted among the jobs, so the balance check alone let one member start any number of
runs, each an actor, rows and a job at once."""

from __future__ import annotations

import pytest

from conftest import j, start_node, stop_node

RUNS = "/v1/workflows/products/text-to-clip/runs"
LIMIT = 3
MESSAGE = (f"Too many product runs in progress for this organization (at most {LIMIT} queued or running). "
           "Retry when some have finished.")


async def start(node, key):
    return await node.call("POST", RUNS, key, json={"inputs": {"prompt": "x [[delay:600]]"}})


@pytest.fixture
async def node(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, max_active_jobs_per_org=LIMIT)
    yield n
    await stop_node(n)


async def test_one_run_past_the_open_runs_cap_is_429_and_a_finished_run_frees_its_place(node, autojump_clock):
    org = await node.create_org()
    other = await node.create_org(email="other@acme.test")
    key = org["api_key"]
    ids = []
    for _ in range(LIMIT):
        r = await start(node, key)
        assert r.status_code == 202
        ids.append((await j(r))["data"]["id"])
    r = await start(node, key)
    body = await j(r)
    body["error"].pop("request_id")
    assert (r.status_code, r.headers["Retry-After"]) == (429, "5")
    assert body == {"error": {"code": "request.rate_limited", "message": MESSAGE,
                              "details": {"open_runs_limit": LIMIT, "retry_after": 5}}}
    assert node.store.scalar("SELECT count(*) FROM product_runs WHERE organization_id = ?",
                             (org["organization_id"],)) == LIMIT
    assert (await start(node, other["api_key"])).status_code == 202
    r = await node.call("POST", f"/v1/workflows/runs/{ids[0]}/cancel", key)
    assert (await j(r))["data"]["status"] == "canceled"
    assert (await start(node, key)).status_code == 202
    assert (await start(node, key)).status_code == 429

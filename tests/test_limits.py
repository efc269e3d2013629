"""Request limits (service/limits.py): a token bucket per API key and a cap on the jobs an
organization has in progress, both 429 `request.rate_limited` with Retry-After, per key and
per organization (one tenant's flood leaves the others alone). Mock clock."""

from __future__ import annotations

import pytest
import trio

from conftest import start_node, stop_node
from service.http import auth
from test_generation_support import submit


@pytest.fixture
async def limited(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, rate_limit_per_key=5, rate_limit_burst=10,
                         max_active_jobs_per_org=2)
    yield n
    await stop_node(n)


def error_of(body: dict) -> dict:
    body["error"].pop("request_id")
    return body["error"]


async def test_a_key_past_its_bucket_gets_429_and_another_key_does_not(limited, autojump_clock, monkeypatch):
    monkeypatch.setattr(auth.random, "uniform", lambda a, b: b)  # the pause's jitter at its longest
    a = await limited.create_org()
    b = await limited.create_org(name="Other", email="o@other.test")
    for _ in range(10):
        assert (await limited.call("GET", "/v1/projects", a["api_key"])).status_code == 200
    started = trio.current_time()
    r = await limited.call("GET", "/v1/projects", a["api_key"])
    assert (r.status_code, r.headers["Retry-After"]) == (429, "1")
    assert trio.current_time() - started == pytest.approx(1.0)  # answered after a pause (tarpit)
    assert error_of(await r.get_json()) == {
        "code": "request.rate_limited",
        "message": "Too many requests for this API key: at most 5 a second (bursts of 10). Retry in 1 s.",
        "details": {"limit_per_second": 5.0, "burst": 10, "retry_after": 1}}
    assert (await limited.call("GET", "/v1/projects", b["api_key"])).status_code == 200
    # the pause refilled five requests (5 a second), and no more
    for _ in range(5):
        assert (await limited.call("GET", "/v1/projects", a["api_key"])).status_code == 200
    assert (await limited.call("GET", "/v1/projects", a["api_key"])).status_code == 429


async def test_an_organization_with_too_many_jobs_in_progress_gets_429(limited, autojump_clock):
    a = await limited.create_org()
    b = await limited.create_org(name="Other", email="o@other.test")
    first = [(await submit(limited, a["api_key"], {"prompt": f"slow {i} [[delay:60]] [[fail:internal]]"}))["request_id"]
             for i in range(2)]
    await trio.sleep(1)  # the bucket: submit and status calls are requests too
    r = await limited.call("POST", "/v1/generation/capabilities/image.generate", a["api_key"],
                           json={"prompt": "one more"})
    assert (r.status_code, r.headers["Retry-After"]) == (429, "5")
    assert error_of(await r.get_json()) == {
        "code": "request.rate_limited",
        "message": "Too many jobs in progress for this organization (at most 2 queued or rendering). "
                   "Retry when some have finished.",
        "details": {"active_jobs_limit": 2, "retry_after": 5}}
    r = await limited.call("GET", "/v1/billing/holds", a["api_key"])
    assert len((await r.get_json())["data"]) == 2  # nothing held for the refused one
    await submit(limited, b["api_key"], {"prompt": "another tenant [[fail:internal]]"})
    await trio.sleep(61)  # both renders end (and the bucket refills)
    for rid in first:
        r = await limited.call("GET", f"/v1/generation/requests/{rid}/status", a["api_key"])
        assert (await r.get_json())["status"] == "failed"
    await submit(limited, a["api_key"], {"prompt": "after [[fail:internal]]"})


async def test_the_pause_before_a_429_is_jittered_between_half_and_the_whole_of_it(limited, autojump_clock):
    a = await limited.create_org()
    for _ in range(10):
        await limited.call("GET", "/v1/projects", a["api_key"])
    pauses = []
    for _ in range(8):
        started = trio.current_time()
        r = await limited.call("GET", "/v1/projects", a["api_key"])
        if r.status_code == 429:
            pauses.append(trio.current_time() - started)
    assert pauses and all(0.5 <= p <= 1.0 for p in pauses), pauses

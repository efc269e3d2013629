"""The per-key request rate (service/limits.py) counts every request a key authenticates,
including those its role refuses: a read_only key hammering an admin route got an unmetered
stream of 403s (each one an authentication read) while its 200s were limited."""

from __future__ import annotations

import pytest

from conftest import start_node, stop_node
from service.http import auth


@pytest.fixture
async def limited(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, rate_limit_per_key=5, rate_limit_burst=10)
    yield n
    await stop_node(n)


async def test_forbidden_requests_take_from_the_keys_bucket(limited, autojump_clock, monkeypatch):
    monkeypatch.setattr(auth.random, "uniform", lambda a, b: b)
    org = await limited.create_org()
    viewer = await limited.add_member(org["organization_id"], "read_only")
    for _ in range(10):
        r = await limited.call("POST", "/v1/api-keys", viewer["api_key"], json={"name": "x"})
        assert (r.status_code, await r.get_json()) == (403, {"status": False, "error": "Forbidden"})
    r = await limited.call("POST", "/v1/api-keys", viewer["api_key"], json={"name": "x"})
    assert (r.status_code, r.headers["Retry-After"]) == (429, "1")
    body = await r.get_json()
    body["error"].pop("request_id")
    assert body["error"] == {
        "code": "request.rate_limited",
        "message": "Too many requests for this API key: at most 5 a second (bursts of 10). Retry in 1 s.",
        "details": {"limit_per_second": 5.0, "burst": 10, "retry_after": 1}}

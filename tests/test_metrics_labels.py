"""Probe M3: every new HTTP method string an unauthenticated client sent added permanent
Prometheus series (400 requests took /metrics to 113 MB). Only known methods and matched
route templates become labels; everything else is `other` and `unmatched`."""

from __future__ import annotations

import pytest

from conftest import start_node, stop_node
from service.metrics import method_label
from test_metrics_and_logs import TOKEN, samples


@pytest.fixture
async def mnode(nursery, tmp_path):
    n = await start_node(nursery, tmp_path, test_mode=True, metrics_token=TOKEN)
    yield n
    await stop_node(n)


async def series(node) -> set:
    r = await node.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    return {k for k in samples(await r.get_data(as_text=True)) if k[0].startswith("genservice_http_")}


def test_method_labels():
    for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        assert method_label(m) == m
    for m in ("get", "TRACE", "CONNECT", "PROPFIND", "X" * 500, "", "GET "):
        assert method_label(m) == "other"


async def test_odd_methods_and_paths_add_no_series(mnode):
    for i in range(2):  # the label sets of a few odd requests ...
        await mnode.client.open(f"/odd-{i}", method=f"M{i}")
        await mnode.client.get(f"/no/such/path/{i}")
    await mnode.client.open("/healthz", method="BREW")
    await series(mnode)  # the scrape's own series
    before = await series(mnode)
    for i in range(400):  # ... and of 400 more, every method and path new
        await mnode.client.open(f"/odd/{i}/{'x' * (i % 50)}", method=f"METHOD{i}")
        await mnode.client.get(f"/no/such/path/{i}?q={i}")
        await mnode.client.open("/healthz", method=f"WEIRD{i}")
    after = await series(mnode)
    assert after - before == set()
    methods = {dict(k[1]).get("method") for k in after}
    routes = {dict(k[1]).get("route") for k in after}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other", None}
    assert not any(r and ("odd" in r or "no/such" in r) for r in routes)
    assert "unmatched" in routes

"""The dashboard's webhook pages live under `/webhooks/`, beside the payment provider's
`/webhooks/stripe`: only that route is the API's, so a page's own fault is an HTML page for a
browser, not the API's JSON envelope."""

from __future__ import annotations

import pytest

from service.storage import webhooks as webhooks_sql
from tests.test_dashboard_http import logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")


async def test_a_fault_on_a_webhook_page_is_an_html_page(node, monkeypatch):
    org = await logged_in(node)
    r = await node.call("POST", "/v1/webhooks", org["api_key"],
                        json={"url": "https://hooks.example.com/x", "events": ["api_key.created"]})
    webhook_id = (await r.get_json())["webhook"]["id"]

    def broken(*_a, **_k):
        raise RuntimeError("the store failed")

    monkeypatch.setattr(webhooks_sql, "get_webhook", broken)
    r = await node.client.get(f"/webhooks/{webhook_id}", headers={"Accept": "text/html"})
    assert r.status_code == 500
    assert r.headers["Content-Type"].startswith("text/html")


async def test_the_payment_providers_route_keeps_the_api_envelope(node):
    r = await node.client.post("/webhooks/stripe", data=b"{}", headers={"Accept": "text/html",
                                                                        "Content-Type": "application/json"})
    assert r.headers["Content-Type"].startswith("application/json"), r.status_code

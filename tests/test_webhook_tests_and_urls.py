"""Account webhooks: credentials in a webhook URL, and test sends that took the
node-wide send slots of every organization's deliveries."""

from __future__ import annotations

import json

import pytest
import trio

from service.senders import account_webhooks
from conftest import err, j
from test_delivery import make_hook
from test_webhooks import create
from test_webhooks_receiver import receiver, running_node

CREDENTIAL_URLS = [
    ("https://user:s3cret@example.com/hook", "https://example.com/hook"),
    ("https://user@example.com:8443/h?x=1", "https://example.com:8443/h?x=1"),
    ("https://:s3cret@example.com/", "https://example.com/"),
    ("http://user:s3cret@10.0.0.1:8080/x", "http://10.0.0.1:8080/x"),  # before the https check
]


@pytest.mark.parametrize("url, shown", CREDENTIAL_URLS)
async def test_a_url_with_credentials_is_refused_without_echoing_them(node, url, shown):
    """The sender never sends a URL's user name or password, so storing them only kept a
    secret in clear text and showed it to every reader of the webhook."""
    org = await node.create_org()
    key = org["api_key"]
    expected = {"code": "webhook.invalid_url", "message": "url must not contain a user name or password.",
                "details": {"url": shown}}
    r = await node.call("POST", "/v1/webhooks", key, json={"url": url, "events": ["member.joined"]})
    assert r.status_code == 422
    body = await j(r)
    assert err(body) == expected
    assert "s3cret" not in json.dumps(body)
    hook = await create(node, key)
    r = await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"url": url})
    assert (r.status_code, err(await j(r))) == (422, expected)
    r = await node.call("GET", "/v1/webhooks", key)
    assert [h["url"] for h in (await j(r))["webhooks"]] == [hook["url"]]


async def test_test_sends_do_not_take_the_slots_of_other_organizations(tmp_path, mock_clock, monkeypatch):
    """Test sends to a hanging receiver used to count against the node-wide cap, so one
    organization calling the test endpoint held every other organization's deliveries."""
    monkeypatch.setattr(account_webhooks.AccountWebhookSource, "concurrency", 2)
    mock_clock.autojump_threshold = 30  # a delivery held behind the tests arrives 10 s late
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        noisy = await node.create_org("Noisy", "n@noisy.test")
        other = await node.create_org("Other", "o@other.test")
        held = await make_hook(node, noisy["api_key"], rx.url("/gate/noisy"), ["member.joined"])
        await make_hook(node, other["api_key"], rx.url("/ok"), ["member.joined"])
        answers = []

        async def test_send():
            r = await node.call("POST", f"/v1/webhooks/{held['id']}/test", noisy["api_key"])
            answers.append((r.status_code, (await j(r))["delivery"]["is_delivered"]))

        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(test_send)
            await rx.wait_for(2, "/gate/noisy")
            t0 = trio.current_time()
            await node.add_member(other["organization_id"], "member", "m@other.test")
            [hit] = await rx.wait_for(1, "/ok")
            assert hit.at == t0  # delivered at once, while both test sends are still held
            assert answers == []
            rx.release("noisy")
        assert answers == [(201, True), (201, True)]

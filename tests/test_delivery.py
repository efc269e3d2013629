"""Account-webhook delivery against a real HTTPS receiver (spec "Events", "Limits";
operations.md for the test answer): signatures byte for byte, each event's data fields,
paused and unsubscribed webhooks, no retries, the test endpoint, the delivery log, fairness
between organizations, and restarts with deliveries in the outbox.

Real sockets, so real time (no autojump clock; one test freezes the mock clock), short waits only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3

import pytest
import trio

from service.actors import delivery
from service.senders import account_webhooks
from service.roles import ROLE_IDS
from service.storage.events import emit
from test_webhooks_receiver import receiver, running_node
from conftest import j, outboxes_settled, until
from waiting import wait_until

KEY_FIELDS = {"key_id", "name", "key_prefix", "user_id", "role_id", "expires_at", "organization_id"}
MEMBER_FIELDS = {"member_id", "member_email", "role", "organization_id"}


def verify(hit, secret: str) -> dict:
    """What a receiver does: HMAC over the raw bytes, constant-time compare; then parse."""
    expected = "sha256=" + hmac.new(secret.encode("utf-8"), hit.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(hit.headers["x-service-signature"], expected)
    assert hit.headers["content-type"] == "application/json"
    assert hit.headers["x-service-delivery"]
    body = json.loads(hit.body)
    assert hit.body == json.dumps(body, separators=(",", ":")).encode()  # compact
    assert list(body) == ["event", "data"]
    return body


async def make_hook(node, key, url, events, **extra) -> dict:
    r = await node.call("POST", "/v1/webhooks", key, json={"url": url, "events": events} | extra)
    assert r.status_code == 201, await r.get_data(as_text=True)
    return (await j(r))["webhook"]


def statuses(node, webhook_id: str) -> list[dict]:
    return node.store.all("SELECT id, event, status, status_code, error, error_class FROM webhook_deliveries "
                          "WHERE webhook_id = ? ORDER BY seq", (webhook_id,))


# -- signature and body ------------------------------------------------------------------------
async def test_signature_covers_the_exact_bytes_sent(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        hook = await make_hook(node, key, rx.url("/ok"), ["api_key.created"])
        r = await node.call("POST", "/v1/api-keys", key, json={"name": "café ✓ key"})
        assert r.status_code == 201
        created = (await j(r))["data"]
        [hit] = await rx.wait_for(1)
        body = verify(hit, hook["secret"])
        assert body["event"] == "api_key.created"
        assert body["data"]["name"] == "café ✓ key"
        assert hit.headers["content-length"] == str(len(hit.body))
        # a signature over anything else does not match
        forged = "sha256=" + hmac.new(hook["secret"].encode(), hit.body + b" ", hashlib.sha256).hexdigest()
        assert forged != hit.headers["x-service-signature"]
        # hex-decoding the secret is the documented mistake: it gives another signature
        wrong = "sha256=" + hmac.new(hook["secret"][6:].encode(), hit.body, hashlib.sha256).hexdigest()
        assert wrong != hit.headers["x-service-signature"]
        # the delivery id header names the logged delivery
        log = (await j(await node.call("GET", f"/v1/webhooks/{hook['id']}/deliveries", key)))["deliveries"]
        assert [d["id"] for d in log] == [hit.headers["x-service-delivery"]]
        assert created["key_prefix"] == body["data"]["key_prefix"]


async def test_commit_to_receipt_waits_for_no_timer(tmp_path, mock_clock):
    """Frozen mock clock: each delivery arrives with the clock standing still, so it went out
    on the commit, not on a timer's tick (the real-time figure: bench/webhooks.py)."""
    mock_clock.autojump_threshold = 30  # a delivery waiting for a timer arrives late instead of never
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        await make_hook(node, org["api_key"], rx.url("/ok"), ["api_key.created"])
        for i in range(5):
            t0 = trio.current_time()
            r = await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": f"k{i}"})
            assert r.status_code == 201
            hits = await rx.wait_for(i + 1)
            assert hits[-1].at == t0


# -- every event's data fields --------------------------------------------------------------------
async def test_api_key_events_carry_the_spec_fields(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        hook = await make_hook(node, key, rx.url("/ok"), ["api_key.created", "api_key.revoked"])
        r = await node.call("POST", "/v1/api-keys", key, json={
            "name": "ci", "role_id": ROLE_IDS["member"], "expires_at": "2099-01-01T00:00:00Z"})
        k = (await j(r))["data"]
        [created] = await rx.wait_for(1)
        r = await node.call("DELETE", f"/v1/api-keys/{k['id']}", key)
        assert r.status_code == 204
        hits = await rx.wait_for(2)
        revoked = hits[1]
        expect = {"key_id": k["id"], "name": "ci", "key_prefix": k["key"][:12], "user_id": org["owner_user_id"],
                  "role_id": ROLE_IDS["member"], "expires_at": k["expires_at"],
                  "organization_id": org["organization_id"]}
        assert verify(created, hook["secret"]) == {"event": "api_key.created", "data": expect}
        assert verify(revoked, hook["secret"]) == {"event": "api_key.revoked", "data": expect}
        assert k["key"] not in created.body.decode() and k["key"] not in revoked.body.decode()
        # pausing a key sends nothing; revoking twice sends nothing more
        r = await node.call("POST", "/v1/api-keys", key, json={"name": "plain"})
        plain = (await j(r))["data"]
        await rx.wait_for(3)
        await node.call("PATCH", f"/v1/api-keys/{plain['id']}", key, json={"is_active": False})
        await node.call("DELETE", f"/v1/api-keys/{k['id']}", key)
        await outboxes_settled(node)
        assert len(rx.hits) == 3
        third = verify(rx.hits[2], hook["secret"])
        assert third["data"] == {"key_id": plain["id"], "name": "plain", "key_prefix": plain["key"][:12],
                                 "user_id": org["owner_user_id"], "role_id": None, "expires_at": None,
                                 "organization_id": org["organization_id"]}


async def test_member_events_carry_the_spec_fields(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        org_id = org["organization_id"]
        hook = await make_hook(node, org["api_key"], rx.url("/ok"),
                               ["member.joined", "member.role_changed", "member.removed"])
        m = await node.add_member(org_id, "member", "dev@acme.test")
        await rx.wait_for(1)
        r = await node.op("PATCH", f"/organizations/{org_id}/members/{m['user_id']}", {"role": "admin"})
        assert r.status_code == 200
        await rx.wait_for(2)
        r = await node.op("DELETE", f"/organizations/{org_id}/members/{m['user_id']}")
        assert r.status_code == 204
        hits = await rx.wait_for(3)
        bodies = [verify(h, hook["secret"]) for h in hits]
        base = {"member_id": m["user_id"], "member_email": "dev@acme.test", "organization_id": org_id}
        assert bodies == [
            {"event": "member.joined", "data": {**base, "role": "member"}},
            {"event": "member.role_changed", "data": {**base, "role": "admin"}},
            {"event": "member.removed", "data": {**base, "role": "admin"}},
        ]
        for b in bodies:
            assert set(b["data"]) == MEMBER_FIELDS


async def test_events_only_reach_their_own_organization(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        a = await node.create_org("A", "a@a.test")
        b = await node.create_org("B", "b@b.test")
        await make_hook(node, a["api_key"], rx.url("/ok?org=a"), ["member.joined"])
        await make_hook(node, b["api_key"], rx.url("/ok?org=b"), ["member.joined"])
        await node.add_member(a["organization_id"], "member", "x@a.test")
        [hit] = await rx.wait_for(1)
        await outboxes_settled(node)
        assert len(rx.hits) == 1 and hit.json["data"]["organization_id"] == a["organization_id"]


# -- subscriptions and activity -------------------------------------------------------------------
async def test_paused_and_unsubscribed_webhooks_receive_nothing(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        sentinel = await make_hook(node, key, rx.url("/ok?h=sentinel"), ["member.joined", "api_key.revoked"])
        paused = await make_hook(node, key, rx.url("/ok?h=paused"), ["member.joined"])
        other = await make_hook(node, key, rx.url("/ok?h=other"), ["member.removed"])
        r = await node.call("PATCH", f"/v1/webhooks/{paused['id']}", key, json={"is_active": False})
        assert (await j(r))["webhook"]["is_active"] is False
        await node.add_member(org["organization_id"], "member")
        await rx.wait_for(1)
        await outboxes_settled(node)
        assert [(h.target, h.json["event"]) for h in rx.hits] == [("/ok?h=sentinel", "member.joined")]
        assert statuses(node, paused["id"]) == [] and statuses(node, other["id"]) == []
        # resumed: receives the next event; a deleted webhook receives nothing
        await node.call("PATCH", f"/v1/webhooks/{paused['id']}", key, json={"is_active": True})
        await node.call("DELETE", f"/v1/webhooks/{sentinel['id']}", key)
        await node.add_member(org["organization_id"], "admin")
        await rx.wait_for(2)
        await outboxes_settled(node)
        assert len(rx.hits) == 2
        assert rx.hits[1].json["data"]["role"] == "admin"
        assert [s["status"] for s in statuses(node, paused["id"])] == ["delivered"]
        assert len(statuses(node, sentinel["id"])) == 1


async def test_a_webhook_paused_before_its_send_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(account_webhooks, "PER_WEBHOOK", 1)
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        hook = await make_hook(node, key, rx.url("/gate/g"), ["api_key.created"])
        for i in range(3):
            await node.call("POST", "/v1/api-keys", key, json={"name": f"k{i}"})
        await rx.wait_for(1)
        await until(lambda: [s["status"] for s in statuses(node, hook["id"])] == ["sending", "pending", "pending"])
        await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"is_active": False})
        rx.release("g")
        await outboxes_settled(node)
        assert len(rx.hits) == 1
        assert [s["status"] for s in statuses(node, hook["id"])] == ["delivered", "skipped", "skipped"]


# -- failures: recorded once, never retried ---------------------------------------------------------
async def test_no_retry_after_a_500(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], rx.url("/status/500"), ["member.joined"])
        await node.add_member(org["organization_id"], "member")
        await rx.wait_for(1)
        await outboxes_settled(node)
        assert len(rx.hits) == 1
        [d] = statuses(node, hook["id"])
        assert (d["status"], d["status_code"], d["error"], d["error_class"]) == (
            "failed", 500, "500 Internal Server Error", "non_2xx")


async def test_no_retry_after_a_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(account_webhooks, "TIMEOUT", 0.5)
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], rx.url("/hang"), ["member.joined"])
        await node.add_member(org["organization_id"], "member")
        await rx.wait_for(1)
        await outboxes_settled(node)
        assert len(rx.hits) == 1
        [d] = statuses(node, hook["id"])
        assert (d["status"], d["status_code"], d["error_class"]) == ("failed", None, "timeout")
        assert "timed out" in d["error"]


async def test_connection_error_is_recorded_not_retried(tmp_path):
    with trio.socket.socket() as s:  # a port with nobody listening
        await s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], f"https://127.0.0.1:{dead}/x", ["member.joined"])
        await node.add_member(org["organization_id"], "member")
        await wait_until(lambda: statuses(node, hook["id"]) and statuses(node, hook["id"])[0]["status"] == "failed",
                         5, every=0.05)
        await outboxes_settled(node)
        [d] = statuses(node, hook["id"])
        assert (d["status_code"], d["error_class"]) == (None, "connection")


async def test_private_addresses_are_refused_without_the_setting(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx, webhook_allow_private=False) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], rx.url("/ok"), ["member.joined"])
        await node.add_member(org["organization_id"], "member")
        await wait_until(lambda: statuses(node, hook["id"]) and statuses(node, hook["id"])[0]["status"] == "failed",
                         5, every=0.05)
        assert statuses(node, hook["id"])[0]["error_class"] == "blocked_address"
        r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", org["api_key"])
        d = (await j(r))["delivery"]
        assert (r.status_code, d["is_delivered"], d["status_code"]) == (201, False, None)
        assert d["error"] == "address not allowed"
        assert rx.hits == []


# -- the test endpoint ---------------------------------------------------------------------------
async def test_test_endpoint_success_fields_and_signature(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        hook = await make_hook(node, key, rx.url("/ok"), ["member.removed"])  # not subscribed to the test
        bystander = await make_hook(node, key, rx.url("/ok?b=1"), ["webhook.test"])
        await node.call("PATCH", f"/v1/webhooks/{hook['id']}", key, json={"is_active": False})  # and paused
        r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", key)
        assert r.status_code == 201, await r.get_data(as_text=True)
        b = await j(r)
        assert b["event"] == "webhook.test"
        d = b["delivery"]
        assert (d["url"], d["is_delivered"], d["status_code"], d["error"]) == (rx.url("/ok"), True, 200, None)
        assert isinstance(d["duration_ms"], int) and d["duration_ms"] >= 0
        assert len(rx.hits) == 1  # only to that webhook
        body = verify(rx.hits[0], hook["secret"])
        assert body["event"] == "webhook.test"
        assert body["data"] == {"webhook_id": hook["id"], "message": delivery.TEST_MESSAGE,
                                "sent_at": body["data"]["sent_at"], "organization_id": org["organization_id"]}
        assert body["data"]["sent_at"].endswith("Z") and b["data"] == body["data"]
        assert rx.hits[0].headers["x-service-delivery"] == d["id"]
        await outboxes_settled(node)
        assert len(rx.hits) == 1 and statuses(node, bystander["id"]) == []
        log = (await j(await node.call("GET", f"/v1/webhooks/{hook['id']}/deliveries", key)))["deliveries"]
        assert [(x["event"], x["status"], x["status_code"]) for x in log] == [("webhook.test", "delivered", 200)]


async def test_test_endpoint_reports_a_non_2xx(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], rx.url("/status/500"), ["member.joined"])
        r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", org["api_key"])
        assert r.status_code == 201
        d = (await j(r))["delivery"]
        assert (d["is_delivered"], d["status_code"], d["error"]) == (False, 500, "500 Internal Server Error")
        r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", org["api_key"])
        assert len(rx.hits) == 2  # each test call sends once


async def test_test_endpoint_reports_a_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(account_webhooks, "TIMEOUT", 0.5)
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], rx.url("/hang"), ["member.joined"])
        r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", org["api_key"])
        assert r.status_code == 201  # answered, and (below) with the outcome of the 0.5 s limit
        d = (await j(r))["delivery"]
        assert (d["is_delivered"], d["status_code"]) == (False, None)
        assert d["error"] == "timed out after 0.5 s" and d["duration_ms"] >= 500
        log = (await j(await node.call("GET", f"/v1/webhooks/{hook['id']}/deliveries", org["api_key"])))
        assert log["deliveries"][0]["error_class"] == "timeout"


# -- the delivery log ----------------------------------------------------------------------------------
async def test_delivery_log_is_newest_first_with_limit(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        hook = await make_hook(node, key, rx.url("/ok"), ["member.joined", "member.removed"])
        m = await node.add_member(org["organization_id"], "member")
        await rx.wait_for(1)
        await node.op("DELETE", f"/organizations/{org['organization_id']}/members/{m['user_id']}")
        await rx.wait_for(2)
        await outboxes_settled(node)
        r = await node.call("GET", f"/v1/webhooks/{hook['id']}/deliveries", key)
        log = (await j(r))["deliveries"]
        assert [x["event"] for x in log] == ["member.removed", "member.joined"]
        assert set(log[0]) == {"id", "event", "status", "created_at", "sent_at", "completed_at", "is_delivered",
                               "status_code", "error", "error_class", "duration_ms"}
        assert log[0]["status"] == "delivered" and log[0]["is_delivered"] is True
        assert log[0]["error"] is None and log[0]["error_class"] is None
        assert {x["id"] for x in log} == {h.headers["x-service-delivery"] for h in rx.hits}
        r = await node.call("GET", f"/v1/webhooks/{hook['id']}/deliveries?limit=1", key)
        assert [x["event"] for x in (await j(r))["deliveries"]] == ["member.removed"]


# -- fairness ---------------------------------------------------------------------------------------
async def test_a_slow_organization_does_not_delay_another(tmp_path):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        slow = await node.create_org("Slow", "s@slow.test")
        fast = await node.create_org("Fast", "f@fast.test")
        slow_hooks = [await make_hook(node, slow["api_key"], rx.url(f"/gate/slow?h={i}"), ["member.joined"])
                      for i in range(10)]
        await make_hook(node, fast["api_key"], rx.url("/ok"), ["member.joined"])
        for i in range(5):  # 50 deliveries that hang
            await node.add_member(slow["organization_id"], "member", f"m{i}@slow.test")
        await rx.wait_for(account_webhooks.PER_ORG, "/gate/slow")
        await node.add_member(fast["organization_id"], "member", "m@fast.test")
        [hit] = await rx.wait_for(1, "/ok")
        # delivered while every slow delivery was still held at its gate (opened only below)
        assert {s["status"] for h in slow_hooks for s in statuses(node, h["id"])} <= {"pending", "sending"}
        assert len(rx.seen("/gate/slow")) == account_webhooks.PER_ORG  # capped per organization
        rx.release("slow")
        hits = await rx.wait_for(50, "/gate/slow", timeout=10)
        await outboxes_settled(node)
        assert len(rx.seen("/gate/slow")) == 50
        assert len({h.headers["x-service-delivery"] for h in hits}) == 50


def test_fair_queue_round_robin_and_caps():
    q = account_webhooks.FairQueue(total=5, per_org=3, per_webhook=2)
    for i in range(6):
        q.push("a", "a1", f"a1-{i}")
    for i in range(2):
        q.push("a", "a2", f"a2-{i}")
    q.push("b", "b1", "b1-0")
    q.push("c", "c1", "c1-0")
    first = q.take()
    # round-robin over organizations, then webhooks; a: 3 at most, a1: 2 at most
    assert first == ["a1-0", "b1-0", "c1-0", "a2-0", "a1-1"]
    assert q.take() == []
    q.done("b1-0")
    assert q.take() == []  # a is at its organization cap
    q.done("a1-0")
    assert q.take() == ["a2-1"]
    q.done("unknown-id")  # a send started by a previous actor: ignored
    q.done("a1-1")
    q.done("a2-0")
    assert q.take() == ["a1-2", "a1-3"]
    assert q.queued == 2


# -- restart: the outbox and deliveries survive, nothing is sent twice ----------------------------------
async def test_restart_sends_pending_once_and_records_sending_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(account_webhooks, "PER_WEBHOOK", 1)
    async with receiver(tmp_path) as rx:
        async with running_node(tmp_path, rx) as node:
            org = await node.create_org()
            org_id, key = org["organization_id"], org["api_key"]
            hook = await make_hook(node, key, rx.url("/gate/g"), ["api_key.created", "member.joined"])
            for i in range(3):
                await node.call("POST", "/v1/api-keys", key, json={"name": f"k{i}"})
            await rx.wait_for(1)
            await until(lambda: len(statuses(node, hook["id"])) == 3)
            before = statuses(node, hook["id"])
            assert [s["status"] for s in before] == ["sending", "pending", "pending"]
        # node down: one more event lands in the outbox (as another writer would leave it)
        conn = sqlite3.connect(tmp_path / "genservice.db", isolation_level=None)
        emit(conn, org_id, "member.joined", {"member_id": "m-1", "member_email": "late@acme.test",
                                             "role": "member"}, "2026-01-01T00:00:00.000000Z")
        conn.close()
        rx.release("g")
        async with running_node(tmp_path, rx) as node:
            hits = await rx.wait_for(4)
            await outboxes_settled(node)
            after = statuses(node, hook["id"])
        assert len(rx.hits) == 4
        sent_ids = [h.headers["x-service-delivery"] for h in rx.hits]
        assert len(set(sent_ids)) == 4
        assert sent_ids[0] == before[0]["id"]
        assert set(sent_ids[1:3]) == {before[1]["id"], before[2]["id"]}
        assert [s["status"] for s in after] == ["unknown", "delivered", "delivered", "delivered"]
        assert "not re-sent" in after[0]["error"]
        assert hits[3].json["data"]["member_email"] == "late@acme.test"
        for h in rx.hits:
            verify(h, hook["secret"])


async def test_restart_after_everything_was_sent_sends_nothing(tmp_path):
    async with receiver(tmp_path) as rx:
        async with running_node(tmp_path, rx) as node:
            org = await node.create_org()
            await make_hook(node, org["api_key"], rx.url("/ok"), ["member.joined"])
            await node.add_member(org["organization_id"], "member")
            await rx.wait_for(1)
            await outboxes_settled(node)
        async with running_node(tmp_path, rx) as node:
            await outboxes_settled(node)
        assert len(rx.hits) == 1


@pytest.mark.parametrize("inline", [True, False])
async def test_delivery_works_with_either_writer(tmp_path, inline):
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx, inline=inline) as node:
        org = await node.create_org()
        await make_hook(node, org["api_key"], rx.url("/ok"), ["member.joined"])
        await node.add_member(org["organization_id"], "member")
        [hit] = await rx.wait_for(1)
        assert hit.json["event"] == "member.joined"


async def test_billing_credits_low_carries_the_spec_fields(tmp_path):
    from decimal import Decimal

    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()  # approved: 200 signup credits
        key = org["api_key"]
        hook = await make_hook(node, key, rx.url("/ok"), ["billing.credits_low"])
        r = await node.call("PUT", "/v1/billing/settings", key, json={"low_balance_threshold": "500"})
        assert r.status_code == 200, await r.get_data(as_text=True)
        [hit] = await rx.wait_for(1)
        body = verify(hit, hook["secret"])
        assert body["event"] == "billing.credits_low"
        data = body["data"]
        assert set(data) == {"available", "threshold", "organization_id"}
        assert data["organization_id"] == org["organization_id"]
        assert isinstance(data["available"], str) and isinstance(data["threshold"], str)
        assert (Decimal(data["available"]), Decimal(data["threshold"])) == (Decimal(200), Decimal(500))
        await outboxes_settled(node)
        assert len(rx.hits) == 1  # once per crossing


async def test_events_during_shutdown_stay_pending_for_the_next_start(tmp_path):
    async with receiver(tmp_path) as rx:
        async with running_node(tmp_path, rx) as node:
            org = await node.create_org()
            hook = await make_hook(node, org["api_key"], rx.url("/ok"), ["member.joined"])
            await node.parts.aclose()  # what serve() does once HTTP has drained
            d = node.parts.account_webhooks
            looks = d.looks
            await node.add_member(org["organization_id"], "member")
            await until(lambda: d.looks > looks)  # the commit woke the dispatcher; closed, it sent nothing
            assert rx.hits == []
            assert [s["status"] for s in statuses(node, hook["id"])] in ([], ["pending"])
        async with running_node(tmp_path, rx) as node:
            [hit] = await rx.wait_for(1)
            await outboxes_settled(node)
            assert len(rx.hits) == 1 and hit.json["event"] == "member.joined"
            assert [s["status"] for s in statuses(node, hook["id"])] == ["delivered"]


async def test_a_failed_claim_restarts_the_dispatcher_which_still_sends(tmp_path, monkeypatch):
    from service.storage import webhooks as wsql

    real = wsql.start_sending
    crashes = []

    def flaky(conn, ids, now):
        if not crashes:
            crashes.append(ids)
            raise RuntimeError("disk hiccup")
        return real(conn, ids, now)

    monkeypatch.setattr(wsql, "start_sending", flaky)
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        hook = await make_hook(node, org["api_key"], rx.url("/ok"), ["member.joined"])
        await node.add_member(org["organization_id"], "member")
        [hit] = await rx.wait_for(1)
        await outboxes_settled(node)
        assert crashes and node.parts.account_webhooks.restarts == 1
        assert len(rx.hits) == 1
        assert [s["status"] for s in statuses(node, hook["id"])] == ["delivered"]
        # the actor is still serving requests
        r = await node.call("POST", f"/v1/webhooks/{hook['id']}/test", org["api_key"])
        assert (await j(r))["delivery"]["is_delivered"] is True


async def test_the_outbox_has_no_timer_to_step_the_autojump_clock(node, autojump_clock, monkeypatch):
    """The dispatcher sleeps until the store wakes it: an hour of virtual time costs no look
    at the outbox, and the event committed before it is still delivered (here refused: a
    private address)."""
    source = node.parts.account_webhooks.source
    claims = []
    real = type(source).claim

    async def counting(self, *args):
        claims.append(trio.current_time())
        return await real(self, *args)

    monkeypatch.setattr(type(source), "claim", counting)
    org = await node.create_org()
    hook = await make_hook(node, org["api_key"], "https://127.0.0.1:9/x", ["member.joined"])
    await node.add_member(org["organization_id"], "member")
    await trio.sleep(3600)  # an hour of virtual time
    assert [s["status"] for s in statuses(node, hook["id"])] == ["failed"]
    assert node.store.scalar("SELECT COUNT(*) FROM events WHERE dispatched = 0") == 0
    assert claims and max(claims) - min(claims) < 60  # every look came right after a commit
    assert len(claims) < 20

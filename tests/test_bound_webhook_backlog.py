"""One account webhook's backlog is capped (service/senders/account_webhooks.py, `MAX_PENDING`):
past the cap its new deliveries are logged `skipped` with a clear error, never queued, never
lost from the log; what already waits keeps its place and is sent."""

from __future__ import annotations

import logging

from conftest import j, outboxes_settled, until
from test_delivery import make_hook, statuses
from test_delivery_storage import NOW, conn, event, hook  # noqa: F401 - `conn` is a fixture
from test_webhooks_receiver import receiver, running_node

from service.senders import account_webhooks
from service.senders.fair_queue import FairQueue
from service.storage import webhooks as sql

FULL = "not sent: 3 deliveries of this webhook were already waiting"


def test_fan_out_skips_past_the_cap_within_one_batch(conn):  # noqa: F811
    a, b = hook(conn), hook(conn)
    for i in range(4):
        event(conn, member_id=str(i))
    over: dict[str, int] = {"stale": 9}
    n, new = sql.fan_out(conn, NOW, waiting={a: 1}, cap=3, over_cap=over)
    assert n == 4
    assert [d["webhook_id"] for d in new] == [a, b, a, b, b]  # only the pending ones are queued
    rows = conn.execute("SELECT webhook_id, status, completed_at, error, error_class, status_code "
                        "FROM webhook_deliveries ORDER BY seq").fetchall()
    got = [(r["webhook_id"], r["status"], r["completed_at"], r["error"], r["error_class"], r["status_code"])
           for r in rows]
    pending = (None, None, None, None)
    assert got == [
        (a, "pending", *pending), (b, "pending", *pending),
        (a, "pending", *pending), (b, "pending", *pending),
        (a, "skipped", NOW, FULL, None, None), (b, "pending", *pending),
        (a, "skipped", NOW, FULL, None, None), (b, "skipped", NOW, FULL, None, None),
    ]
    assert over == {a: 2, b: 1}
    assert conn.execute("SELECT count(*) AS n FROM events WHERE dispatched = 0").fetchone()["n"] == 0
    # skipped rows are final: recovery does not queue them, start_sending does not send them
    assert sorted(r["id"] for r in sql.recover(conn, NOW)) == sorted(d["id"] for d in new)


def test_fair_queue_counts_queued_and_in_flight_per_webhook():
    q = FairQueue(total=10, per_org=10, per_webhook=1)
    for i in range(3):
        q.push("o", "h1", f"h1-{i}")
    q.push("o", "h2", "h2-0")
    assert q.waiting() == {"h1": 3, "h2": 1}
    assert q.take() == ["h1-0", "h2-0"]
    assert q.waiting() == {"h1": 3, "h2": 1}  # in flight still waits for its outcome
    q.done("h2-0")
    q.done("h1-0")
    assert q.waiting() == {"h1": 2}


async def test_a_stuck_receiver_holds_at_most_the_cap(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(account_webhooks, "MAX_PENDING", 3)
    monkeypatch.setattr(account_webhooks, "PER_WEBHOOK", 1)
    caplog.set_level(logging.WARNING, "service.senders.account_webhooks")
    async with receiver(tmp_path) as rx, running_node(tmp_path, rx) as node:
        org = await node.create_org()
        key = org["api_key"]
        stuck = await make_hook(node, key, rx.url("/gate/g"), ["api_key.created"])
        for i in range(6):
            r = await node.call("POST", "/v1/api-keys", key, json={"name": f"k{i}"})
            assert r.status_code == 201
        await until(lambda: [s["status"] for s in statuses(node, stuck["id"])]
                    == ["sending", "pending", "pending", "skipped", "skipped", "skipped"])
        assert node.parts.account_webhooks.source.queue.waiting().get(stuck["id"]) == 3
        r = await node.call("GET", f"/v1/webhooks/{stuck['id']}/deliveries", key)
        log = (await j(r))["deliveries"]  # newest first
        assert [(d["event"], d["status"], d["is_delivered"], d["status_code"], d["error"], d["error_class"],
                 d["sent_at"], d["duration_ms"]) for d in log[:3]] == [
            ("api_key.created", "skipped", False, None, FULL, None, None, None)] * 3
        assert all(d["completed_at"] == d["created_at"] for d in log[:3])
        rx.release("g")
        await outboxes_settled(node)
        assert [s["status"] for s in statuses(node, stuck["id"])] == ["delivered"] * 3 + ["skipped"] * 3
        # below the cap again: the next event is sent
        await node.call("POST", "/v1/api-keys", key, json={"name": "after"})
        await outboxes_settled(node)
        assert [s["status"] for s in statuses(node, stuck["id"])][-1] == "delivered"
        assert len(rx.seen("/gate/g")) == 4
    warned = [rec.getMessage() for rec in caplog.records if "skipped" in rec.getMessage()]
    assert sum(int(m.split(": ")[1].split()[0]) for m in warned) == 3
    assert all(m.startswith(f"webhook {stuck['id']}: ") and m.endswith(" deliveries skipped, 3 already waiting")
               for m in warned)

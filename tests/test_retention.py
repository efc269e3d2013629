"""The retention sweep (service/actors/retention.py): finished rows past their age go,
rows in flight stay, idempotency keys go after 24 hours; on the mock clock. And content
files no asset names (a stop between placing a file and committing its row) are removed at
start."""

from __future__ import annotations

import trio

from conftest import start_node, stop_node
from test_generation_support import submit, wait_status
from waiting import wait_until

DAY = 86400


def count(node, table: str) -> int:
    return node.store.scalar(f"SELECT COUNT(*) FROM {table}")


async def advance(node, seconds: float) -> None:
    """The test clock (service time): the retention actor's deadline passes at once."""
    r = await node.op("POST", "/test/clock", {"advance_seconds": seconds})
    assert r.status_code == 200


async def until(check, timeout: float = 10.0) -> None:
    await wait_until(check, timeout, every=0.02)


async def test_finished_rows_go_after_the_retention_age_and_in_flight_rows_stay(node):
    org = await node.create_org()
    key = org["api_key"]
    r = await node.call("POST", "/v1/webhooks", key, json={"url": "https://127.0.0.1:9/h", "events": ["api_key.created"]})
    assert r.status_code == 201
    assert (await node.call("POST", "/v1/api-keys", key, json={"name": "k"})).status_code == 201
    rid = (await submit(node, key, {"prompt": "x [[fail:internal]]", "webhook_url": "https://127.0.0.1:9/j"},
                        headers={"Idempotency-Key": "once"}))["request_id"]
    await wait_status(node, key, rid)
    await wait_until(lambda: node.store.scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed'") >= 1
                     and node.store.scalar("SELECT COUNT(*) FROM job_webhooks WHERE state = 'failed'") >= 1,
                     60, every=0.5)
    # a delivery still in flight, as old as the rest: it must stay
    await node.store.write(lambda c: c.execute(
        "INSERT INTO webhook_deliveries (id, webhook_id, organization_id, event, body, status, created_at) "
        "VALUES ('inflight', 'w', ?, 'api_key.created', '{}', 'pending', '2020-01-01T00:00:00.000000Z')",
        (org["organization_id"],)))
    before = {t: count(node, t) for t in ("events", "webhook_deliveries", "job_webhooks", "idempotency_keys")}
    assert all(before.values()), before

    await advance(node, 2 * DAY)  # past 24 hours: idempotency keys go, the rest stays
    await until(lambda: count(node, "idempotency_keys") == 0)
    assert count(node, "events") == before["events"] and count(node, "job_webhooks") == before["job_webhooks"]

    await advance(node, 29 * DAY)  # past 30 days: finished rows go
    await until(lambda: count(node, "events") == 0 and count(node, "job_webhooks") == 0)
    await until(lambda: [r["id"] for r in node.store.all("SELECT id FROM webhook_deliveries")] == ["inflight"])
    r = await node.call("GET", f"/v1/generation/requests/{rid}/status", key)  # the job itself stays
    assert (await r.get_json())["status"] == "failed"


async def test_a_shorter_retention_age_is_a_setting(nursery, tmp_path, autojump_clock):
    node = await start_node(nursery, tmp_path, test_mode=True, retention_days=1)
    org = await node.create_org()
    assert (await node.call("POST", "/v1/api-keys", org["api_key"], json={"name": "k"})).status_code == 201
    assert count(node, "events") >= 1
    await trio.sleep(DAY + 3600 + 1)
    assert count(node, "events") == 0
    await stop_node(node)


async def test_content_files_no_asset_names_are_removed_at_start(nursery, tmp_path):
    node = await start_node(nursery, tmp_path, test_mode=True)
    files = node.parts.generation.files
    kept = files.path("a" * 64)
    orphan = files.path("b" * 64)
    for path in (kept, orphan):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    await node.store.write(lambda c: c.execute(
        "INSERT INTO assets (id, organization_id, project_id, job_id, position, source, kind, content_type, "
        "width, height, duration_s, size_bytes, sha256, created_at) VALUES "
        "('a1', 'o', 'p', NULL, 0, 'upload', 'image', 'image/png', 1, 1, NULL, 1, ?, '2026-01-01T00:00:00.000000Z')",
        ("a" * 64,)))
    await stop_node(node)
    node = await start_node(nursery, tmp_path, test_mode=True)
    assert kept.exists() and not orphan.exists()
    await stop_node(node)

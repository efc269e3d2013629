"""The delivery tables at the storage level: fan-out from the outbox, the skip rules, restart
recovery and late outcomes (no event loop, one connection on a migrated temp database)."""

from __future__ import annotations

import json

import pytest

from service.net.client import Outcome
from service.storage import webhooks as sql
from service.storage.db import connect
from service.storage.events import emit
from service.storage.migrate import apply_all

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def conn(tmp_path):
    path = tmp_path / "db.sqlite"
    apply_all(path)
    c = connect(path)
    yield c
    c.close()


def hook(conn, org="o1", events=("member.joined",), **over) -> str:
    row = dict(id=sql.new_id(), organization_id=org, url="https://example.com/h", events=list(events),
               description=None, secret="whsec_x", is_active=1, created_at=NOW, updated_at=NOW) | over
    sql.insert_webhook(conn, row)
    return row["id"]


def event(conn, org="o1", name="member.joined", **data) -> None:
    emit(conn, org, name, data or {"member_id": "m"}, NOW)


def deliveries(conn) -> list[dict]:
    return conn.execute("SELECT webhook_id, event, status, body FROM webhook_deliveries ORDER BY seq").fetchall()


def test_fan_out_to_active_subscribed_hooks_of_the_organization(conn):
    a = hook(conn)
    b = hook(conn, events=("member.joined", "api_key.created"))
    hook(conn, events=("member.removed",))            # not subscribed
    hook(conn, org="o2")                               # another organization
    hook(conn, is_active=0)                            # paused
    event(conn)
    n, new = sql.fan_out(conn, NOW)
    assert n == 1 and [d["webhook_id"] for d in new] == [a, b]
    assert {d["organization_id"] for d in new} == {"o1"}
    rows = deliveries(conn)
    assert [r["status"] for r in rows] == ["pending", "pending"]
    assert rows[0]["body"] == '{"event":"member.joined","data":{"member_id":"m","organization_id":"o1"}}'
    assert json.loads(rows[0]["body"]) == {"event": "member.joined", "data": {"member_id": "m", "organization_id": "o1"}}
    assert conn.execute("SELECT dispatched FROM events").fetchone()["dispatched"] == 1
    assert sql.fan_out(conn, NOW) == (0, [])


def test_a_hook_gets_only_events_committed_after_it_was_created_or_resumed(conn):
    event(conn, member_id="before")
    h = hook(conn)
    event(conn, member_id="after")
    _, new = sql.fan_out(conn, NOW)
    assert len(new) == 1
    assert json.loads(deliveries(conn)[0]["body"])["data"]["member_id"] == "after"
    sql.update_webhook(conn, h, {"is_active": 0})
    event(conn, member_id="while paused")
    sql.update_webhook(conn, h, {"is_active": 1})
    event(conn, member_id="resumed")
    sql.update_webhook(conn, h, {"is_active": 1})      # already active: no new start point
    _, new = sql.fan_out(conn, NOW)
    assert [json.loads(r["body"])["data"]["member_id"] for r in deliveries(conn)] == ["after", "resumed"]


def test_fan_out_in_batches(conn):
    hook(conn)
    conn.execute("BEGIN")
    for i in range(sql.FAN_OUT_BATCH + 3):
        event(conn, member_id=str(i))
    conn.execute("COMMIT")
    n1, new1 = sql.fan_out(conn, NOW)
    n2, new2 = sql.fan_out(conn, NOW)
    assert (n1, len(new1), n2, len(new2)) == (sql.FAN_OUT_BATCH, sql.FAN_OUT_BATCH, 3, 3)


def test_start_sending_skips_paused_and_deleted_hooks(conn):
    live, paused, gone = hook(conn), hook(conn), hook(conn)
    event(conn)
    _, new = sql.fan_out(conn, NOW)
    by_hook = {d["webhook_id"]: d["id"] for d in new}
    sql.update_webhook(conn, paused, {"is_active": 0})
    sql.delete_webhook(conn, gone, NOW)
    send, dropped = sql.start_sending(conn, [d["id"] for d in new] + ["nope"], NOW)
    assert [r["id"] for r in send] == [by_hook[live]] and send[0]["secret"] == "whsec_x"
    assert set(dropped) == {by_hook[paused], by_hook[gone], "nope"}
    assert [r["status"] for r in deliveries(conn)] == ["sending", "skipped", "skipped"]
    # a second call sends nothing again
    assert sql.start_sending(conn, [by_hook[live]], NOW) == ([], [by_hook[live]])


def test_recover_marks_sending_unknown_and_returns_pending(conn):
    hook(conn)
    event(conn)
    event(conn)
    _, new = sql.fan_out(conn, NOW)
    sql.start_sending(conn, [new[0]["id"]], NOW)
    pending = sql.recover(conn, NOW)
    assert [p["id"] for p in pending] == [new[1]["id"]]
    assert [r["status"] for r in deliveries(conn)] == ["unknown", "pending"]
    # a send that was still running reports late: its real outcome wins over unknown
    sql.record_outcomes(conn, [(new[0]["id"], NOW, Outcome(True, 204, None, None, 12))])
    assert deliveries(conn)[0]["status"] == "delivered"
    # an outcome never resurrects a pending or skipped row
    sql.record_outcomes(conn, [(new[1]["id"], NOW, Outcome(False, 500, "500 Internal Server Error", "non_2xx", 3))])
    assert deliveries(conn)[1]["status"] == "pending"
    sql.start_sending(conn, [new[1]["id"]], NOW)
    sql.unsend(conn, new[1]["id"])
    assert deliveries(conn)[1]["status"] == "pending"

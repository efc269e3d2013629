"""The job actor's end under failing commits: what it publishes and makes due only once the
database has it."""

from __future__ import annotations

import sqlite3

from test_generation_support import balance, job_row, submit, wait_hold, wait_status
from waiting import wait_until

from service.storage import generation as gsql


def record_final_publishes(monkeypatch, node) -> list[tuple[str, str | None]]:
    """(status published, the job row's committed status at that moment) for every final
    status a job publishes."""
    hub = node.parts.streams
    real, seen = hub.publish, []

    def publish(keys, name, data, *, source=None):
        job = next((k[4:] for k in keys if k.startswith("job:")), None)
        if job is not None and name == "status":
            st = data()["status"]
            if st in ("completed", "failed", "nsfw", "canceled"):
                row = node.store.one("SELECT status FROM jobs WHERE id = ?", (job,))
                seen.append((st, row and row["status"]))
        return real(keys, name, data, source=source)

    monkeypatch.setattr(hub, "publish", publish)
    return seen


async def test_a_final_status_whose_commit_fails_is_not_published(node, org, autojump_clock, monkeypatch):
    """The disk is full when a job ends: the balance's commit of capture + final state fails
    (Unavailable), then the job's own commit of its final state fails too. Nothing is final
    in the database, so no stream may hear `completed`; the actor restarts from the row
    (rendering), renders again and ends once, charged once."""
    real_update, full = gsql.update_job, [2]

    def update_job(conn, job_id, fields):
        if fields.get("status") == "completed" and full[0]:
            full[0] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return real_update(conn, job_id, fields)

    monkeypatch.setattr(gsql, "update_job", update_job)
    seen = record_final_publishes(monkeypatch, node)
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    await wait_until(lambda: job_row(node, rid)["hold_settled"] == 1)
    assert full == [0]
    assert seen == [("completed", "completed")]  # published once, after its commit
    assert (await wait_hold(node, key, rid, "captured"))["captured"] == "1.00"
    assert (await balance(node, key))["available"] == "199.00"
    assert len(node.store.all("SELECT id FROM assets WHERE job_id = ?", (rid,))) == 1


async def test_a_job_webhook_is_made_due_only_once_its_hold_is_settled(node, org, autojump_clock, monkeypatch):
    """The capture's commit fails once: the job commits its final state alone and settles
    SETTLE_RETRY_S later. Its webhook row stays `waiting` until then (a receiver that reads
    the balance on the webhook sees the charge), and is due from the retry's commit on."""
    from service.actors.jobs.effects import SETTLE_RETRY_S
    from service.storage import billing as bsql
    real_persist, failed = bsql.persist, []

    def persist_failing_a_capture_once(conn, org_id, w):
        real_persist(conn, org_id, w)
        if not failed and any(u[0] == "captured" for u in w.hold_updates):
            failed.append(1)
            raise sqlite3.OperationalError("database or disk is full")

    seen = []  # (hold status, webhook state) each time the dispatcher looks for due rows

    def claim_nothing(conn, now_iso, limit):
        for r in conn.execute("SELECT h.status AS hold, w.state AS hook FROM job_webhooks w "
                              "JOIN jobs j ON j.id = w.job_id JOIN credit_holds h ON h.id = j.hold_id").fetchall():
            seen.append((r["hold"], r["hook"]))
        return []

    monkeypatch.setattr(bsql, "persist", persist_failing_a_capture_once)
    monkeypatch.setattr(gsql, "claim_webhooks", claim_nothing)
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill", "webhook_url": "https://hooks.test/h"}))["request_id"]
    assert (await wait_status(node, key, rid))["status"] == "completed"
    assert failed == [1] and job_row(node, rid)["hold_settled"] == 0
    assert gsql.webhook_of_job(node.store, rid)["state"] == "waiting"
    await wait_hold(node, key, rid, "captured", timeout=SETTLE_RETRY_S + 5)
    await wait_until(lambda: gsql.webhook_of_job(node.store, rid)["state"] == "pending")
    assert job_row(node, rid)["hold_settled"] == 1
    assert ("held", "pending") not in seen and ("captured", "pending") in seen

"""SQL of account webhooks and their deliveries. Write functions take the batch's
connection (they run inside `Store.write`); read functions take the Store.

Delivery lifecycle (one row per event per subscribed webhook):

    pending --(committed before the POST)--> sending --> delivered | failed
    pending --(webhook paused or deleted meanwhile)--> skipped
    (fan-out with the webhook's cap of waiting deliveries reached) --> skipped, never queued
    sending --(node restarted before the outcome was committed)--> unknown (never re-sent)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.storage.rows import Row, Source

from .rows import new_id as new_id  # the actors name it through this module
from .rows import one, scalar

if TYPE_CHECKING:
    from service.storage.db import Store


WEBHOOK_COLUMNS = "id, organization_id, url, events, description, is_active, created_at, updated_at"
DELIVERY_COLUMNS = ("id, webhook_id, event, status, created_at, sent_at, completed_at, status_code, "
                    "error, error_class, duration_ms")
FAN_OUT_BATCH = 500


def body_text(event: str, data_json: str) -> str:
    """The compact body `{"event": name, "data": {...}}`, reusing the outbox's JSON text as is."""
    return '{"event":' + json.dumps(event) + ',"data":' + data_json + "}"


# -- webhooks ----------------------------------------------------------------------------------
def last_event_seq(conn: sqlite3.Connection) -> int:
    return int(scalar(conn, "SELECT COALESCE(MAX(seq), 0) FROM events"))


def insert_webhook(conn: sqlite3.Connection, row: Row) -> None:
    """A new webhook receives the events committed after it (not those still in the outbox)."""
    row = dict(row, events=json.dumps(row["events"]), active_since_seq=last_event_seq(conn))
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO webhooks ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))


def get_webhook(conn_or_store: Source, org_id: str, webhook_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ? AND organization_id = ? "
                "AND deleted_at IS NULL", (webhook_id, org_id))


def webhook_ever_existed(conn: sqlite3.Connection, org_id: str, webhook_id: str) -> Row | None:
    return one(conn, "SELECT id, deleted_at FROM webhooks WHERE id = ? AND organization_id = ?",
                        (webhook_id, org_id))


def webhook_secret(conn: sqlite3.Connection, webhook_id: str) -> Row | None:
    return one(conn, "SELECT id, organization_id, url, secret, is_active, deleted_at FROM webhooks "
                        "WHERE id = ?", (webhook_id,))


def reseal_secrets(conn: sqlite3.Connection, reseal: Callable[[str], str]) -> int:
    """Every stored webhook secret (deleted webhooks' too) through `reseal(sealed) -> sealed`."""
    rows = conn.execute("SELECT id, secret FROM webhooks").fetchall()
    conn.executemany("UPDATE webhooks SET secret = ? WHERE id = ?", [(reseal(r["secret"]), r["id"]) for r in rows])
    return len(rows)


def list_webhooks(store: Store, org_id: str, limit: int, offset: int) -> tuple[list[Row], int]:
    total = store.scalar("SELECT COUNT(*) FROM webhooks WHERE organization_id = ? AND deleted_at IS NULL",
                         (org_id,))
    rows = store.all(f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE organization_id = ? AND deleted_at IS NULL "
                     "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?", (org_id, limit, offset))
    return rows, total


def update_webhook(conn: sqlite3.Connection, webhook_id: str, fields: Row) -> None:
    """Resuming a paused webhook starts it at the current end of the outbox: events committed
    while it was paused are not delivered later."""
    fields = dict(fields)
    if fields.get("is_active"):
        was = conn.execute("SELECT is_active FROM webhooks WHERE id = ?", (webhook_id,)).fetchone()
        if was is not None and not was["is_active"]:
            fields["active_since_seq"] = last_event_seq(conn)
    if "events" in fields:
        fields["events"] = json.dumps(fields["events"])
    sets = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE webhooks SET {sets} WHERE id = ?", (*fields.values(), webhook_id))


def delete_webhook(conn: sqlite3.Connection, webhook_id: str, now: str) -> None:
    conn.execute("UPDATE webhooks SET deleted_at = ?, is_active = 0 WHERE id = ? AND deleted_at IS NULL",
                 (now, webhook_id))


# -- the outbox -> deliveries ----------------------------------------------------------------------
def has_undispatched(store: Store) -> bool:
    return store.one("SELECT 1 AS x FROM events WHERE dispatched = 0 LIMIT 1") is not None


def over_cap_error(cap: int) -> str:
    return f"not sent: {cap} deliveries of this webhook were already waiting"


def fan_out(conn: sqlite3.Connection, now: str, limit: int = FAN_OUT_BATCH, *,
            waiting: dict[str, int] | None = None, cap: int | None = None,
            over_cap: dict[str, int] | None = None) -> tuple[int, list[Row]]:
    """Turn undispatched events into `pending` deliveries, one per active subscribed webhook,
    and mark the events dispatched, in the caller's transaction. Returns (events handled,
    new deliveries as {id, organization_id, webhook_id} in event order).

    With `cap`, a webhook with `cap` deliveries already waiting (`waiting`, counted by the
    caller) gets its new ones written `skipped` (`over_cap_error`), not returned: a receiver
    that is down must not grow its backlog without bound, yet the log shows every event.
    `over_cap` (cleared first) gets the skipped count per webhook.
    """
    counts = dict(waiting or {})
    if over_cap is not None:
        over_cap.clear()
    events = conn.execute("SELECT seq, organization_id, event, data FROM events WHERE dispatched = 0 "
                          "ORDER BY seq LIMIT ?", (limit,)).fetchall()
    if not events:
        return 0, []
    hooks_of: dict[str, list[Row]] = {}
    out: list[Row] = []
    rows: list[tuple[Any, ...]] = []
    for ev in events:
        org = ev["organization_id"]
        hooks = hooks_of.get(org)
        if hooks is None:
            hooks = conn.execute("SELECT id, events, active_since_seq FROM webhooks "
                                 "WHERE organization_id = ? AND is_active = 1 "
                                 "AND deleted_at IS NULL ORDER BY created_at, rowid", (org,)).fetchall()
            for h in hooks:
                h["events"] = set(json.loads(h["events"]))
            hooks_of[org] = hooks
        body = None
        for h in hooks:
            if ev["event"] not in h["events"] or ev["seq"] <= h["active_since_seq"]:
                continue
            if body is None:
                body = body_text(ev["event"], ev["data"])
            d = {"id": new_id(), "organization_id": org, "webhook_id": h["id"]}
            row = (d["id"], h["id"], org, ev["seq"], ev["event"], body, now)
            if cap is not None and counts.get(h["id"], 0) >= cap:
                rows.append(row + ("skipped", now, over_cap_error(cap)))
                if over_cap is not None:
                    over_cap[h["id"]] = over_cap.get(h["id"], 0) + 1
                continue
            counts[h["id"]] = counts.get(h["id"], 0) + 1
            rows.append(row + ("pending", None, None))
            out.append(d)
    conn.executemany("INSERT INTO webhook_deliveries (id, webhook_id, organization_id, event_seq, event, body, "
                     "created_at, status, completed_at, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    first, last = events[0]["seq"], events[-1]["seq"]
    conn.execute("UPDATE events SET dispatched = 1 WHERE dispatched = 0 AND seq BETWEEN ? AND ?", (first, last))
    return len(events), out


def start_sending(conn: sqlite3.Connection, ids: list[str], now: str) -> tuple[list[Row], list[str]]:
    """Mark `pending` deliveries `sending` (the caller sends them only after this commits).
    A delivery whose webhook was paused or deleted meanwhile becomes `skipped`.
    Returns (sendable rows with url, secret and body; ids not to send)."""
    send, dropped = [], []
    for delivery_id in ids:
        row = conn.execute(
            "SELECT d.id, d.organization_id, d.webhook_id, d.event, d.body, d.status, w.url, w.secret, "
            "w.is_active, w.deleted_at FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id "
            "WHERE d.id = ?", (delivery_id,)).fetchone()
        if row is None or row["status"] != "pending":
            dropped.append(delivery_id)
            continue
        if not row["is_active"] or row["deleted_at"] is not None:
            conn.execute("UPDATE webhook_deliveries SET status = 'skipped', completed_at = ?, "
                         "error = ? WHERE id = ?",
                         (now, "webhook paused or deleted before sending", delivery_id))
            dropped.append(delivery_id)
            continue
        conn.execute("UPDATE webhook_deliveries SET status = 'sending', sent_at = ? WHERE id = ?",
                     (now, delivery_id))
        send.append(row)
    return send, dropped


def insert_test_delivery(conn: sqlite3.Connection, row: Row) -> None:
    """A webhook.test delivery: written `sending` at once (it is sent right after the commit)."""
    conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, organization_id, event_seq, event, body, "
                 "status, created_at, sent_at) VALUES (?, ?, ?, NULL, ?, ?, 'sending', ?, ?)",
                 (row["id"], row["webhook_id"], row["organization_id"], row["event"], row["body"],
                  row["created_at"], row["created_at"]))


def record_outcomes(conn: sqlite3.Connection, outcomes: list[tuple[str, str, Any]]) -> None:
    """(delivery id, completed_at iso, Outcome). A late outcome also overwrites `unknown`
    (the dispatcher restarted in place while the send was still running)."""
    conn.executemany(
        "UPDATE webhook_deliveries SET status = ?, completed_at = ?, status_code = ?, error = ?, "
        "error_class = ?, duration_ms = ? WHERE id = ? AND status IN ('sending', 'unknown')",
        [("delivered" if o.is_delivered else "failed", at, o.status_code, o.error, o.error_class,
          o.duration_ms, did) for did, at, o in outcomes])


def unsend(conn: sqlite3.Connection, delivery_id: str) -> None:
    """A send that never started (the node's sender closed at shutdown) is pending again."""
    conn.execute("UPDATE webhook_deliveries SET status = 'pending', sent_at = NULL "
                 "WHERE id = ? AND status = 'sending'", (delivery_id,))


def recover(conn: sqlite3.Connection, now: str) -> list[Row]:
    """After a restart: a `sending` delivery may or may not have reached its receiver, so it is
    recorded `unknown` and never re-sent; `pending` ones are returned to be sent (oldest first)."""
    conn.execute("UPDATE webhook_deliveries SET status = 'unknown', completed_at = ?, "
                 "error = 'interrupted by a restart before the outcome was recorded; not re-sent' "
                 "WHERE status = 'sending'", (now,))
    return conn.execute("SELECT id, organization_id, webhook_id FROM webhook_deliveries "
                        "WHERE status = 'pending' ORDER BY seq").fetchall()


def list_deliveries(store: Store, webhook_id: str, limit: int) -> list[Row]:
    return store.all(f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = ? "
                     "ORDER BY seq DESC LIMIT ?", (webhook_id, limit))

"""The event outbox: account-webhook events written in the caller's transaction."""

from __future__ import annotations

import json
import sqlite3
import uuid

from service.storage.rows import Row


def emit(conn: sqlite3.Connection, org_id: str, event: str, data: Row, now_iso: str) -> None:
    """Queue `event` for the organization's webhooks; `organization_id` is added to data."""
    body = {**data, "organization_id": org_id}
    conn.execute(
        "INSERT INTO events (organization_id, event, data, created_at) VALUES (?, ?, ?, ?)",
        (org_id, event, json.dumps(body, separators=(",", ":")), now_iso),
    )


def email(conn: sqlite3.Connection, org_id: str, to: str, subject: str, body: str, now_iso: str) -> None:
    conn.execute(
        "INSERT INTO emails (id, organization_id, to_address, subject, body, created_at) VALUES (?,?,?,?,?,?)",
        (str(uuid.uuid4()), org_id, to, subject, body, now_iso),
    )

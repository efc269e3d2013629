"""SQL of generation jobs, assets, the job-webhook outbox and idempotency keys.

Write functions take the batch's connection (they run inside `Store.write`); read
functions take the Store (or a connection, where noted). Lists are newest first; ties on
`created_at` fall back to insertion order (rowid).
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Iterable

from service.storage.rows import Row, Source, insert, one, rows_in

if TYPE_CHECKING:
    from service.storage.db import Store


JOB_COLUMNS = ("id, organization_id, project_id, capability, model, backend, source, workflow_run_id, "
               "status, prompt, params, price_uc, actual_uc, hold_id, hold_settled, webhook_url, error, "
               "created_at, started_at, finished_at, usage")
ASSET_COLUMNS = ("id, organization_id, project_id, job_id, position, source, kind, content_type, width, "
                 "height, duration_s, frames, size_bytes, sha256, created_at, shared_object")
OPEN = ("queued", "rendering")


def _update(conn: sqlite3.Connection, table: str, key: str, value: object, fields: Row) -> int:
    sets = ", ".join(f"{k} = ?" for k in fields)
    return conn.execute(f"UPDATE {table} SET {sets} WHERE {key} = ?", (*fields.values(), value)).rowcount


# -- jobs ------------------------------------------------------------------------------------
def insert_job(conn: sqlite3.Connection, row: Row) -> None:
    row = dict(row)
    if not isinstance(row.get("params"), str):
        row["params"] = json.dumps(row["params"], separators=(",", ":"))
    insert(conn, "jobs", row)


def update_job(conn: sqlite3.Connection, job_id: str, fields: Row) -> None:
    _update(conn, "jobs", "id", job_id, fields)


def job_is_final(conn: sqlite3.Connection, job_id: str) -> bool:
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row is not None and row["status"] not in ("queued", "rendering")


def get_job(conn_or_store: Source, job_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))


def job_in_org(store: Store, org_id: str, job_id: str) -> Row | None:
    return one(store, f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ? AND organization_id = ?",
                (job_id, org_id))


def list_jobs(store: Store, project_id: str, limit: int) -> list[Row]:
    return store.all(f"SELECT {JOB_COLUMNS} FROM jobs WHERE project_id = ? "
                     "ORDER BY created_at DESC, rowid DESC LIMIT ?", (project_id, limit))


def jobs_to_recover(store: Store) -> list[Row]:
    """Open jobs (rendering first, then queued, each oldest first) and final jobs whose hold
    is not settled yet."""
    return store.all(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE status IN ('queued', 'rendering') OR hold_settled = 0 "
        "ORDER BY CASE status WHEN 'rendering' THEN 0 WHEN 'queued' THEN 1 ELSE 2 END, created_at, rowid")


def params_of(job: Row) -> Row:
    params: Row = json.loads(job["params"]) if isinstance(job["params"], str) else job["params"]
    return params


# -- assets ----------------------------------------------------------------------------------
def insert_asset(conn: sqlite3.Connection, row: Row) -> None:
    insert(conn, "assets", row)


def get_asset(conn_or_store: Source, asset_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {ASSET_COLUMNS} FROM assets WHERE id = ?", (asset_id,))


def asset_in_org(store: Store, org_id: str, asset_id: str) -> Row | None:
    return one(store, f"SELECT {ASSET_COLUMNS} FROM assets WHERE id = ? AND organization_id = ?",
                (asset_id, org_id))


def list_assets(store: Store, project_id: str, limit: int) -> list[Row]:
    return store.all(f"SELECT {ASSET_COLUMNS} FROM assets WHERE project_id = ? "
                     "ORDER BY created_at DESC, rowid DESC LIMIT ?", (project_id, limit))


def assets_in_org(store: Store, org_id: str, ids: Iterable[str]) -> list[Row]:
    ids = list(ids)
    if not ids:
        return []
    marks = ", ".join("?" * len(ids))
    return store.all(f"SELECT {ASSET_COLUMNS} FROM assets WHERE organization_id = ? AND id IN ({marks})",
                     (org_id, *ids))


def assets_by_ids(store: Store, ids: Iterable[str]) -> list[Row]:
    return rows_in(store, f"SELECT {ASSET_COLUMNS} FROM assets WHERE id IN ({{marks}})", ids)


def assets_of_jobs(store: Store, job_ids: Iterable[str]) -> dict[str, list[Row]]:
    """Outputs per job, in output order."""
    ids = list(job_ids)
    out: dict[str, list[Row]] = {i: [] for i in ids}
    for row in rows_in(store, f"SELECT {ASSET_COLUMNS} FROM assets WHERE job_id IN ({{marks}}) "
                       "ORDER BY job_id, position", ids):
        out[row["job_id"]].append(row)
    return out


def orphan_holds(store: Store) -> list[Row]:
    """Holds still `held` for a job id that has no job row: the node stopped between placing
    the hold and committing the job (the hold is placed first). Reads the billing table."""
    try:
        return store.all("SELECT h.id, h.organization_id FROM credit_holds h WHERE h.status = 'held' "
                         "AND h.job_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = h.job_id)")
    except sqlite3.OperationalError:  # billing not installed on this node
        return []


# -- job webhooks (outbox) -------------------------------------------------------------------
def insert_webhook(conn: sqlite3.Connection, row: Row) -> None:
    insert(conn, "job_webhooks", row)


def update_webhook(conn: sqlite3.Connection, webhook_id: str, fields: Row) -> None:
    _update(conn, "job_webhooks", "id", webhook_id, fields)


def webhook_of_job(conn_or_store: Source, job_id: str) -> Row | None:
    return one(conn_or_store, "SELECT * FROM job_webhooks WHERE job_id = ?", (job_id,))


def release_waiting_webhook(conn: sqlite3.Connection, job_id: str) -> int:
    """The render of a job canceled while rendering has ended: its webhook may go."""
    return conn.execute("UPDATE job_webhooks SET state = 'pending' WHERE job_id = ? AND state = 'waiting'",
                        (job_id,)).rowcount


def claim_webhooks(conn: sqlite3.Connection, now_iso: str, limit: int) -> list[Row]:
    """Up to `limit` pending rows, oldest first, marked `sending` in this transaction."""
    rows = conn.execute("SELECT * FROM job_webhooks WHERE state = 'pending' ORDER BY created_at, rowid LIMIT ?",
                        (limit,)).fetchall()
    for row in rows:
        update_webhook(conn, row["id"], {"state": "sending", "sent_at": now_iso})
    return rows


def recover_webhooks(conn: sqlite3.Connection, now_iso: str) -> tuple[int, int]:
    """At start: `sending` -> `unknown` (may have arrived; never re-sent); `waiting` ->
    `pending` (no render survives a restart, so every waiting render has ended)."""
    unknown = conn.execute(
        "UPDATE job_webhooks SET state = 'unknown', sent_at = COALESCE(sent_at, ?), "
        "error = 'node stopped during delivery; outcome unknown', error_class = 'unknown' "
        "WHERE state = 'sending'", (now_iso,)).rowcount
    released = conn.execute("UPDATE job_webhooks SET state = 'pending' WHERE state = 'waiting'").rowcount
    return unknown, released


def active_jobs(store: Store, org_id: str) -> int:
    """Jobs of the organization queued or rendering, submitted through the API or the
    dashboard (a product run's steps are not counted)."""
    return int(store.scalar("SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'rendering') "
                        "AND organization_id = ? AND source != 'workflow'", (org_id,)))

"""SQL of product runs, their steps, run-start idempotency keys, and the merged runs feed.

Write functions take the batch's connection (they run inside `Store.write`); read
functions take the Store (or a connection, where noted). Lists are newest first; ties on
`created_at` fall back to the id (a total order the feed's cursor relies on).
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any, Iterable

from service.storage.rows import Row, Source, all_rows, insert, one, rows_in

if TYPE_CHECKING:
    from service.storage.db import Store


RUN_COLUMNS = ("id, organization_id, project_id, product, product_version, status, inputs, run_values, "
               "outputs, estimate_uc, actual_uc, error, created_by, created_at, started_at, finished_at, api_key_id")
STEP_COLUMNS = ("run_id, key, position, capability, op, model, status, request_id, outputs, cost_uc, error, "
                "started_at, finished_at")
OPEN = ("queued", "running")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


# -- runs and steps --------------------------------------------------------------------------
def insert_run(conn: sqlite3.Connection, run: Row, steps: Iterable[Row]) -> None:
    row = dict(run)
    for k in ("inputs", "run_values", "outputs"):
        if row.get(k) is not None and not isinstance(row[k], str):
            row[k] = _json(row[k])
    insert(conn, "product_runs", row)
    for s in steps:
        s = dict(s)
        if not isinstance(s.get("outputs", "[]"), str):
            s["outputs"] = _json(s["outputs"])
        insert(conn, "product_run_steps", s)


def update_run(conn: sqlite3.Connection, run_id: str, fields: Row) -> None:
    fields = {k: (_json(v) if k in ("outputs", "inputs", "run_values") and v is not None
                  and not isinstance(v, str) else v) for k, v in fields.items()}
    sets = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE product_runs SET {sets} WHERE id = ?", (*fields.values(), run_id))


def update_step(conn: sqlite3.Connection, run_id: str, key: str, fields: Row) -> None:
    fields = {k: (_json(v) if k == "outputs" and not isinstance(v, str) else v) for k, v in fields.items()}
    sets = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE product_run_steps SET {sets} WHERE run_id = ? AND key = ?",
                 (*fields.values(), run_id, key))


def open_runs(store: Store, org_id: str) -> int:
    """The organization's runs queued or running."""
    return int(store.scalar("SELECT count(*) FROM product_runs WHERE organization_id = ? "
                            "AND status IN ('queued', 'running')", (org_id,)))


def get_run(conn_or_store: Source, run_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {RUN_COLUMNS} FROM product_runs WHERE id = ?", (run_id,))


def run_in_org(store: Store, org_id: str, run_id: str) -> Row | None:
    return one(store, f"SELECT {RUN_COLUMNS} FROM product_runs WHERE id = ? AND organization_id = ?",
                (run_id, org_id))


def steps_of(conn_or_store: Source, run_id: str) -> list[Row]:
    return all_rows(conn_or_store, f"SELECT {STEP_COLUMNS} FROM product_run_steps WHERE run_id = ? ORDER BY position",
                (run_id,))


def steps_of_runs(store: Store, run_ids: Iterable[str]) -> dict[str, list[Row]]:
    ids = list(run_ids)
    out: dict[str, list[Row]] = {i: [] for i in ids}
    for row in rows_in(store, f"SELECT {STEP_COLUMNS} FROM product_run_steps WHERE run_id IN ({{marks}}) "
                       "ORDER BY run_id, position", ids):
        out[row["run_id"]].append(row)
    return out


def runs_by_ids(store: Store, run_ids: Iterable[str]) -> dict[str, Row]:
    return {row["id"]: row for row in rows_in(store, f"SELECT {RUN_COLUMNS} FROM product_runs WHERE id IN ({{marks}})",
                                              run_ids)}


def list_runs(store: Store, project_id: str, limit: int, product: str | None = None) -> list[Row]:
    if product is None:
        return store.all(f"SELECT {RUN_COLUMNS} FROM product_runs WHERE project_id = ? "
                         "ORDER BY created_at DESC, id DESC LIMIT ?", (project_id, limit))
    return store.all(f"SELECT {RUN_COLUMNS} FROM product_runs WHERE project_id = ? AND product = ? "
                     "ORDER BY created_at DESC, id DESC LIMIT ?", (project_id, product, limit))


def open_run_ids(store: Store) -> list[str]:
    """Runs not final, oldest first (recovery)."""
    return [r["id"] for r in store.all("SELECT id FROM product_runs WHERE status IN ('queued', 'running') "
                                       "ORDER BY created_at, id")]


def open_jobs_of_final_runs(store: Store) -> list[Row]:
    """Step jobs still queued or rendering under a run that is already final (a stop came
    between the run's final commit and the cancel of its jobs)."""
    return store.all("SELECT j.id, j.organization_id, j.workflow_run_id FROM jobs j "
                     "JOIN product_runs r ON r.id = j.workflow_run_id "
                     "WHERE j.status IN ('queued', 'rendering') AND r.status NOT IN ('queued', 'running')")


def jobs_by_ids(store: Store, job_ids: Iterable[str]) -> dict[str, Row]:
    from service.storage.generation import JOB_COLUMNS

    return {row["id"]: row for row in rows_in(store, f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({{marks}})", job_ids)}


def loads(text: str | None, default: Any = None) -> Any:
    return default if text is None else json.loads(text)


# -- the merged feed of GET /v1/runs ------------------------------------------------------------
# Rows: standalone jobs (workflow_run_id IS NULL) and product runs of one project, ordered by
# (created_at, type, id) descending. The cursor is the last row's (created_at, type, id).
def _feed_parts(project_id: str, source: str | None) -> tuple[list[str], list[Any]]:
    parts: list[str] = []
    params: list[Any] = []
    if source in (None, "api", "studio"):
        sql = ("SELECT 'job' AS type, id, created_at FROM jobs "
               "WHERE project_id = ? AND workflow_run_id IS NULL")
        params.append(project_id)
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        parts.append(sql)
    if source in (None, "workflow"):
        parts.append("SELECT 'run' AS type, id, created_at FROM product_runs WHERE project_id = ?")
        params.append(project_id)
    return parts, params


def feed(store: Store, project_id: str, source: str | None, limit: int,
         after: tuple[str, str, str] | None) -> tuple[list[Row], int]:
    """One page of `{type, id, created_at}` rows after the cursor position, and the total
    number of rows matching `source` (all pages), read in one snapshot."""
    parts, params = _feed_parts(project_id, source)
    union = " UNION ALL ".join(parts)
    page_sql = f"SELECT type, id, created_at FROM ({union})"
    page_params = list(params)
    if after is not None:
        page_sql += " WHERE (created_at, type, id) < (?, ?, ?)"
        page_params.extend(after)
    page_sql += " ORDER BY created_at DESC, type DESC, id DESC LIMIT ?"
    page_params.append(limit)
    reader = store.reader
    reader.execute("BEGIN")
    try:
        total = reader.execute(f"SELECT COUNT(*) AS n FROM ({union})", params).fetchone()["n"]
        rows = reader.execute(page_sql, page_params).fetchall()
    finally:
        reader.execute("COMMIT")
    return rows, total

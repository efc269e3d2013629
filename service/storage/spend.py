"""SQL of spend limits (tables in `schema_spend`): the balance actor's writes and loads, and
the figures the routes show.

The balance actor is the only writer: `persist` applies a batch's changed limits and figures
(absolute values from memory) and its warnings' events (`billing.spend_limit_reached`) in
the batch's transaction; their mails to the owners and admins are queued in the same
transaction by service/mail/notices.py. A project's figure is per UTC
month (`period` `YYYY-MM`), a key's for its life (`period` '').
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from service.money import fmt
from service.storage.events import emit
from service.storage.rows import Row, one

if TYPE_CHECKING:
    from service.storage.db import Store


SQL_LIMIT_UPSERT = ("INSERT INTO spend_limits (organization_id, scope, scope_id, limit_uc, notified_at) "
                    "VALUES (?,?,?,?,?) ON CONFLICT (scope, scope_id) DO UPDATE SET "
                    "limit_uc = excluded.limit_uc, notified_at = excluded.notified_at")
SQL_FIGURE_UPSERT = ("INSERT INTO spend_figures (organization_id, scope, scope_id, period, spent_uc) "
                     "VALUES (?,?,?,?,?) ON CONFLICT (scope, scope_id, period) DO UPDATE SET "
                     "spent_uc = excluded.spent_uc")


def persist(conn: sqlite3.Connection, org_id: str, limits: list[tuple[Any, ...]], figures: list[tuple[Any, ...]],
            warnings: list[tuple[Any, ...]]) -> None:
    """limits: (scope, id, limit_uc, notified_at); figures: (scope, id, period, spent_uc);
    warnings: (scope, id, limit, spent, now_iso) with decimal strings."""
    if limits:
        conn.executemany(SQL_LIMIT_UPSERT, [(org_id, *r) for r in limits])
    if figures:
        conn.executemany(SQL_FIGURE_UPSERT, [(org_id, *r) for r in figures])
    for scope, scope_id, limit, spent, now_iso in warnings:
        emit(conn, org_id, "billing.spend_limit_reached",
             {"scope": scope, "id": scope_id, "limit": limit, "spent": spent}, now_iso)


def scope_name(conn: sqlite3.Connection, scope: str, scope_id: str) -> str | None:
    """The name of a limit's project or API key (None when it is gone)."""
    table = "projects" if scope == "project" else "api_keys"
    row = one(conn, f"SELECT name FROM {table} WHERE id = ?", (scope_id,))
    return None if row is None else str(row["name"])


def load(store: Store, org_id: str, month: str) -> tuple[list[Row], list[Row]]:
    """The organization's limit rows and its figures of `month` (projects) and of its keys."""
    limits = store.all("SELECT scope, scope_id, limit_uc, notified_at FROM spend_limits WHERE organization_id = ?",
                       (org_id,))
    figures = store.all("SELECT scope, scope_id, period, spent_uc FROM spend_figures WHERE organization_id = ? "
                        "AND period IN (?, '')", (org_id, month))
    return limits, figures


# -- reads of the routes -------------------------------------------------------------------------
def project_fields(store: Store, org_id: str, month: str) -> dict[str, Row]:
    """project id -> {monthly_spend_limit, month_spent} for projects with a limit or a figure."""
    out: dict[str, Row] = {}
    for r in store.all("SELECT scope_id, limit_uc FROM spend_limits WHERE organization_id = ? "
                       "AND scope = 'project'", (org_id,)):
        out[r["scope_id"]] = {"monthly_spend_limit": fmt(r["limit_uc"]), "month_spent": "0.00"}
    for r in store.all("SELECT scope_id, spent_uc FROM spend_figures WHERE organization_id = ? "
                       "AND scope = 'project' AND period = ?", (org_id, month)):
        out.setdefault(r["scope_id"], {"monthly_spend_limit": None})["month_spent"] = fmt(r["spent_uc"])
    return out


def key_fields(store: Store, org_id: str) -> dict[str, Row]:
    """key id -> {spend_limit, spent} for keys with a limit or a figure."""
    out: dict[str, Row] = {}
    for r in store.all("SELECT scope_id, limit_uc FROM spend_limits WHERE organization_id = ? "
                       "AND scope = 'api_key'", (org_id,)):
        out[r["scope_id"]] = {"spend_limit": fmt(r["limit_uc"]), "spent": "0.00"}
    for r in store.all("SELECT scope_id, spent_uc FROM spend_figures WHERE organization_id = ? "
                       "AND scope = 'api_key' AND period = ''", (org_id,)):
        out.setdefault(r["scope_id"], {"spend_limit": None})["spent"] = fmt(r["spent_uc"])
    return out


PROJECT_NONE = {"monthly_spend_limit": None, "month_spent": "0.00"}
KEY_NONE = {"spend_limit": None, "spent": "0.00"}

"""SQL of the operator console: its sessions and audit log (writes take the batch's
connection), and the cross-organization reads its pages show (reads take the Store).

Lists are paged (`PAGE` rows) so a page stays small with thousands of organizations; each
read is one indexed query or a few, never one query per organization."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from typing import TYPE_CHECKING

from service.storage.mail import STATUS_WHERE, org_status
from service.storage.rows import Row

if TYPE_CHECKING:
    from service.storage.db import Store


PAGE = 25


def digest(token: str, key: str) -> str:
    """A console session's stored digest, keyed with the operator token it was signed in
    with: once that token is rotated, no session of the old one is found."""
    return hmac.new(key.encode(), token.encode(), hashlib.sha256).hexdigest()


# -- sessions and audit (writes) --------------------------------------------------------------
def insert_session(conn: sqlite3.Connection, row: Row) -> None:
    conn.execute("INSERT INTO operator_sessions (id, token_hash, who, address, created_at, last_seen_at, "
                 "expires_at) VALUES (:id, :token_hash, :who, :address, :created_at, :last_seen_at, "
                 ":expires_at)", row)
    conn.execute("DELETE FROM operator_sessions WHERE expires_at <= ?", (row["created_at"],))


def delete_session(conn: sqlite3.Connection, token_hash: str) -> None:
    conn.execute("DELETE FROM operator_sessions WHERE token_hash = ?", (token_hash,))


def touch_session(conn: sqlite3.Connection, session_id: str, at: float) -> None:
    conn.execute("UPDATE operator_sessions SET last_seen_at = max(last_seen_at, ?) WHERE id = ?", (at, session_id))


def session(store: Store, token_hash: str) -> Row | None:
    return store.one("SELECT * FROM operator_sessions WHERE token_hash = ?", (token_hash,))


def insert_audit(conn: sqlite3.Connection, at: str, who: str, address: str, action: str, target: str | None,
                 detail: str | None) -> None:
    conn.execute("INSERT INTO operator_audit (at, who, address, action, target, detail) VALUES (?,?,?,?,?,?)",
                 (at, who, address, action, target, detail))


def audit_page(store: Store, before: int | None, limit: int = PAGE) -> list[Row]:
    """Newest first; `before` is the `seq` the previous page ended at."""
    if before is None:
        return store.all("SELECT * FROM operator_audit ORDER BY seq DESC LIMIT ?", (limit,))
    return store.all("SELECT * FROM operator_audit WHERE seq < ? ORDER BY seq DESC LIMIT ?", (before, limit))


# -- mail (writes) -------------------------------------------------------------------------------
def retry_mail(conn: sqlite3.Connection, mail_id: str, now: float) -> bool:
    """A failed mail due again now (the outbox's watch wakes its sender after the commit)."""
    cur = conn.execute("UPDATE emails SET state = 'pending', next_attempt_at = ?, attempts = 0, finished_at = NULL "
                       "WHERE id = ? AND state IN ('failed', 'unknown')", (now, mail_id))
    return cur.rowcount == 1


# -- overview -----------------------------------------------------------------------------------
def counts(store: Store) -> Row:
    return store.one(
        "SELECT (SELECT COUNT(*) FROM organizations o WHERE " + STATUS_WHERE["pending"] + ") AS pending, "
        "(SELECT COUNT(*) FROM organizations) AS organizations, "
        "(SELECT COUNT(*) FROM jobs WHERE status = 'queued') AS queued, "
        "(SELECT COUNT(*) FROM jobs WHERE status = 'rendering') AS rendering, "
        "(SELECT COUNT(*) FROM emails WHERE state IN ('pending', 'sending')) AS mail_waiting, "
        "(SELECT COUNT(*) FROM emails WHERE state IN ('failed', 'unknown')) AS mail_failed, "
        "(SELECT COUNT(*) FROM support_tickets WHERE state NOT IN ('resolved', 'closed')) AS open_tickets") or {}


# -- organizations ------------------------------------------------------------------------------
def org_page(store: Store, *, search: str, status: str | None, offset: int, now: float) -> tuple[list[Row], int]:
    """Organizations (newest first) with status, owner, live credits and credits used."""
    where, params = ["1"], []
    if status:
        where.append(STATUS_WHERE[status])
    if search:
        where.append("(o.name LIKE ? ESCAPE '\\' OR o.id = ? OR EXISTS (SELECT 1 FROM users s WHERE "
                     "s.organization_id = o.id AND s.email LIKE ? ESCAPE '\\'))")
        like = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        params += [like, search, like]
    cond = " AND ".join(where)
    total = store.scalar(f"SELECT COUNT(*) FROM organizations o WHERE {cond}", params)
    rows = store.all(
        "SELECT o.id, o.name, o.created_at, o.approved_at, o.unconfirmed, "
        "(SELECT email FROM users u WHERE u.organization_id = o.id AND u.role = 'owner' AND u.is_active = 1 "
        " ORDER BY u.created_at LIMIT 1) AS owner_email, "
        # `available` of service.credits.rules: the free part of the lots live at `now`
        "(SELECT COALESCE(SUM(l.remaining_uc - l.reserved_uc), 0) FROM credit_lots l "
        " WHERE l.organization_id = o.id AND l.remaining_uc > 0 AND l.expired_at IS NULL "
        " AND (l.expires_ts IS NULL OR l.expires_ts > ?)) AS available_uc, "
        "(SELECT COALESCE(SUM(h.captured_uc), 0) FROM credit_holds h WHERE h.organization_id = o.id "
        " AND h.status = 'captured') AS used_uc "
        f"FROM (SELECT * FROM organizations o WHERE {cond} ORDER BY o.created_at DESC, o.id LIMIT ? OFFSET ?) o "
        "ORDER BY o.created_at DESC, o.id",  # the page's rows first: the sums run for those only
        [now, *params, PAGE, offset])
    for r in rows:
        r["status"] = org_status(r)
    return rows, total


def org(store: Store, org_id: str) -> Row | None:
    row = store.one("SELECT * FROM organizations WHERE id = ?", (org_id,))
    if row is not None:
        row["status"] = org_status(row)
    return row


def members(store: Store, org_id: str) -> list[Row]:
    return store.all("SELECT id, email, role, is_active, created_at, removed_at FROM users "
                     "WHERE organization_id = ? ORDER BY is_active DESC, created_at", (org_id,))


def invitations(store: Store, org_id: str) -> list[Row]:
    return store.all("SELECT id, email, role, expires_at, created_at FROM invitations WHERE organization_id = ? "
                     "AND accepted_at IS NULL ORDER BY created_at DESC", (org_id,))


def daily_usage(store: Store, org_id: str, since: str) -> list[Row]:
    """Credits captured per UTC day since `since`, oldest first (the usage chart)."""
    return store.all("SELECT substr(settled_at, 1, 10) AS day, SUM(captured_uc) AS uc FROM credit_holds "
                     "WHERE organization_id = ? AND status = 'captured' AND settled_at >= ? "
                     "GROUP BY day ORDER BY day", (org_id, since))


# -- jobs ---------------------------------------------------------------------------------------
def open_jobs(store: Store, limit: int = 200) -> list[Row]:
    """Queued and rendering jobs of every organization, oldest first."""
    return store.all("SELECT j.id, j.organization_id, o.name AS org_name, j.model, j.status, j.source, j.price_uc, "
                     "j.created_at, j.started_at FROM jobs j JOIN organizations o ON o.id = j.organization_id "
                     "WHERE j.status IN ('queued', 'rendering') ORDER BY j.created_at LIMIT ?", (limit,))


def open_job_models(store: Store) -> list[Row]:
    return store.all("SELECT id, model FROM jobs WHERE status IN ('queued', 'rendering')")


def open_jobs_by_model(store: Store) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in store.all("SELECT model, status, COUNT(*) AS n FROM jobs WHERE status IN ('queued', 'rendering') "
                       "GROUP BY model, status"):
        out.setdefault(r["model"], {"queued": 0, "rendering": 0})[r["status"]] = r["n"]
    return out


def start_times(store: Store, since: str) -> dict[str, float]:
    """Mean seconds from submit to render start per model, over jobs started since `since`."""
    rows = store.all("SELECT model, AVG((julianday(started_at) - julianday(created_at)) * 86400.0) AS s FROM jobs "
                     "WHERE started_at IS NOT NULL AND started_at >= ? GROUP BY model", (since,))
    return {r["model"]: r["s"] for r in rows}


def job(store: Store, job_id: str) -> Row | None:
    return store.one("SELECT id, organization_id, status, model FROM jobs WHERE id = ?", (job_id,))


# -- mail ---------------------------------------------------------------------------------------
def mail_page(store: Store, state: str | None, offset: int) -> tuple[list[Row], int]:
    """The outbox, newest first (`state`: waiting, failed, sent or every mail)."""
    states = {"waiting": ("pending", "sending"), "failed": ("failed", "unknown"), "sent": ("sent",)}.get(state or "")
    cond, params = ("state IN (" + ",".join("?" * len(states)) + ")", list(states)) if states else ("1", [])
    total = store.scalar(f"SELECT COUNT(*) FROM emails WHERE {cond}", params)
    rows = store.all("SELECT id, organization_id, to_address, kind, subject, state, attempts, error, created_at, "
                     "finished_at, (link IS NOT NULL) AS has_link, (instr(body, ?) > 0) AS needs_link "
                     f"FROM emails WHERE {cond} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
                     ["\u27e6link\u27e7", *params, PAGE, offset])
    return rows, total


def mail(store: Store, mail_id: str) -> Row | None:
    return store.one("SELECT id, state, (link IS NOT NULL) AS has_link, (instr(body, ?) > 0) AS needs_link "
                     "FROM emails WHERE id = ?", ("\u27e6link\u27e7", mail_id))


# -- support ------------------------------------------------------------------------------------
def tickets(store: Store, offset: int) -> tuple[list[Row], int]:
    """Every ticket, open ones first (oldest update first), then the rest newest first."""
    total = store.scalar("SELECT COUNT(*) FROM support_tickets")
    rows = store.all("SELECT t.*, o.name AS org_name, (t.state IN ('resolved', 'closed')) AS done "
                     "FROM support_tickets t JOIN organizations o ON o.id = t.organization_id "
                     "ORDER BY done, CASE WHEN t.state IN ('resolved', 'closed') THEN NULL "
                     "ELSE COALESCE(t.updated_at, t.created_at) END, t.created_at DESC LIMIT ? OFFSET ?",
                     (PAGE, offset))
    return rows, total

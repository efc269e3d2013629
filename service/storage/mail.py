"""SQL of the mail outbox (`emails`) and of one-time mail links (`mail_tokens`).

`enqueue` runs in the caller's transaction, beside the change that causes the mail; the
store wakes the dispatcher after that commit (`Store.watch` on a `pending` row). No polling.

States: `pending` (due at `next_attempt_at`) -> `sending` (claimed, committed before the
SMTP conversation) -> `sent` | `pending` again (temporary failure, later) | `failed`
(permanent failure, or out of attempts) | `unknown` (found `sending` at a start: it may have
gone, so it is never sent again).
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import TYPE_CHECKING

from service.storage.rows import Row, Source, new_id, one

if TYPE_CHECKING:
    from service.storage.db import Store


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def enqueue(conn: sqlite3.Connection, org_id: str | None, to: str, kind: str, subject: str, text: str, html: str | None,
            now_iso: str, link: str | None = None) -> str:
    """Queue one mail. `link`, when given, is already sealed; `text`/`html` carry the
    placeholder `LINK` where it goes (service.mail.messages)."""
    mail_id = new_id()
    conn.execute("INSERT INTO emails (id, organization_id, to_address, subject, body, created_at, kind, html, "
                 "link) VALUES (?,?,?,?,?,?,?,?,?)",
                 (mail_id, org_id or "", to, subject, text, now_iso, kind, html, link))
    return mail_id


# -- the dispatcher -------------------------------------------------------------------------
def recover(conn: sqlite3.Connection, now_iso: str) -> int:
    """At start: mails left `sending` become `unknown` (never sent twice). Returns how many."""
    cur = conn.execute("UPDATE emails SET state = 'unknown', link = NULL, finished_at = ?, error = 'The node "
                       "stopped while this mail was being sent; it may have been delivered, so it is not sent "
                       "again.' WHERE state = 'sending'", (now_iso,))
    return cur.rowcount


def claim_due(conn: sqlite3.Connection, now: float, limit: int) -> list[Row]:
    """Up to `limit` due pending mails, marked `sending` (attempts + 1) in this transaction."""
    rows = conn.execute("SELECT * FROM emails WHERE state = 'pending' AND next_attempt_at <= ? "
                        "ORDER BY next_attempt_at, created_at LIMIT ?", (now, limit)).fetchall()
    for r in rows:
        conn.execute("UPDATE emails SET state = 'sending', attempts = attempts + 1 WHERE id = ?", (r["id"],))
        r["attempts"] += 1
    return rows


def next_due(store: Store) -> float | None:
    due: float | None = store.scalar("SELECT min(next_attempt_at) FROM emails WHERE state = 'pending'")
    return due


def mark_sent(conn: sqlite3.Connection, mail_id: str, now_iso: str) -> None:
    conn.execute("UPDATE emails SET state = 'sent', sent_at = ?, finished_at = ?, link = NULL, error = NULL "
                 "WHERE id = ?", (now_iso, now_iso, mail_id))


def mark_retry(conn: sqlite3.Connection, mail_id: str, at: float, error: str) -> None:
    conn.execute("UPDATE emails SET state = 'pending', next_attempt_at = ?, error = ? WHERE id = ?",
                 (at, error, mail_id))


def mark_failed(conn: sqlite3.Connection, mail_id: str, now_iso: str, error: str) -> None:
    conn.execute("UPDATE emails SET state = 'failed', finished_at = ?, link = NULL, error = ? WHERE id = ?",
                 (now_iso, error, mail_id))


# -- one-time links -----------------------------------------------------------------------
def insert_token(conn: sqlite3.Connection, token: str, purpose: str, email: str, org_id: str | None, now_iso: str,
                 expires_iso: str) -> None:
    conn.execute("INSERT INTO mail_tokens (token_hash, purpose, email, organization_id, created_at, expires_at) "
                 "VALUES (?,?,?,?,?,?)", (digest(token), purpose, email, org_id, now_iso, expires_iso))


def get_token(conn_or_store: Source, token_hash: str, purpose: str) -> Row | None:
    return one(conn_or_store, "SELECT * FROM mail_tokens WHERE token_hash = ? AND purpose = ?", (token_hash, purpose))


# -- organizations by sign-up state ---------------------------------------------------------
STATUS_WHERE = {
    "unconfirmed": "o.approved_at IS NULL AND o.unconfirmed = 1",
    "pending": "o.approved_at IS NULL AND o.unconfirmed = 0",
    "approved": "o.approved_at IS NOT NULL",
}


def org_status(row: Row) -> str:
    if row["approved_at"]:
        return "approved"
    return "unconfirmed" if row["unconfirmed"] else "pending"


def list_orgs(store: Store, status: str | None) -> list[Row]:
    where = STATUS_WHERE[status] if status else "1"
    rows = store.all(
        "SELECT o.id, o.name, o.created_at, o.confirmed_at, o.approved_at, o.unconfirmed, "
        "(SELECT email FROM users u WHERE u.organization_id = o.id AND u.role = 'owner' AND u.is_active = 1 "
        " ORDER BY u.created_at LIMIT 1) AS owner_email "
        f"FROM organizations o WHERE {where} ORDER BY o.created_at, o.id")
    return [{"organization_id": r["id"], "name": r["name"], "owner_email": r["owner_email"],
             "status": org_status(r), "created_at": r["created_at"], "confirmed_at": r["confirmed_at"],
             "approved_at": r["approved_at"]} for r in rows]


def managers(conn: sqlite3.Connection, org_id: str) -> list[str]:
    """Addresses of the organization's active owners and admins (low-balance warnings)."""
    rows = conn.execute("SELECT DISTINCT email FROM users WHERE organization_id = ? AND is_active = 1 "
                        "AND role IN ('owner', 'admin') ORDER BY email", (org_id,)).fetchall()
    return [r["email"] for r in rows]


# -- sign-up state -------------------------------------------------------------------------
def mark_unconfirmed(conn: sqlite3.Connection, org_id: str) -> None:
    conn.execute("UPDATE organizations SET unconfirmed = 1 WHERE id = ?", (org_id,))


def confirm_org(conn: sqlite3.Connection, org_id: str, now_iso: str) -> bool:
    """True when this call confirmed it (it was waiting for the confirmation)."""
    cur = conn.execute("UPDATE organizations SET unconfirmed = 0, confirmed_at = ? WHERE id = ? AND unconfirmed = 1",
                       (now_iso, org_id))
    return cur.rowcount == 1


def email_known(conn: sqlite3.Connection, email: str) -> bool:
    """An active member (not of an unconfirmed sign-up) or a password has this address."""
    return conn.execute("SELECT 1 FROM users u JOIN organizations o ON o.id = u.organization_id "
                        "WHERE u.email = ? COLLATE NOCASE AND u.is_active = 1 AND o.unconfirmed = 0 UNION ALL "
                        "SELECT 1 FROM passwords WHERE email = ? COLLATE NOCASE LIMIT 1",
                        (email, email)).fetchone() is not None


def first_membership(conn: sqlite3.Connection, email: str) -> Row | None:
    return one(conn, "SELECT id AS user_id, organization_id FROM users WHERE email = ? COLLATE NOCASE "
                        "AND is_active = 1 ORDER BY created_at, id LIMIT 1", (email,))


def org_row(conn: sqlite3.Connection, org_id: str) -> Row | None:
    return one(conn, "SELECT * FROM organizations WHERE id = ?", (org_id,))


def org_name(conn: sqlite3.Connection, org_id: str) -> str:
    """The organization's name ("" when it is gone), for a mail about it."""
    row = one(conn, "SELECT name FROM organizations WHERE id = ?", (org_id,))
    return str(row["name"]) if row else ""

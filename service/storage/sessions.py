"""SQL of browser sessions, provider sign-in flows and linked identities. Write functions
take the batch's connection (inside `Store.write`); read functions take the Store.

`delete_for_user` (member removal) and `set_password` (password change) are called
inside the transaction of the change that ends a person's sessions, so the session cannot
outlive the change even by one request.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import TYPE_CHECKING

from service.storage.rows import Row, Source, one

if TYPE_CHECKING:
    from service.storage.db import Store


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# -- sessions ------------------------------------------------------------------------------
def insert_session(conn: sqlite3.Connection, row: Row) -> None:
    conn.execute("INSERT INTO sessions (id, token_hash, user_id, organization_id, created_at, last_seen_at, "
                 "expires_at, org_chosen) VALUES (:id, :token_hash, :user_id, :organization_id, :created_at, "
                 ":last_seen_at, :expires_at, :org_chosen)", {"org_chosen": 1, **row})


def delete_session(conn: sqlite3.Connection, token_hash: str) -> None:
    conn.execute("DELETE FROM sessions WHERE token_hash = ?", (token_hash,))


def delete_for_user(conn: sqlite3.Connection, user_id: str) -> None:
    conn.execute("DELETE FROM sessions WHERE user_id = ?", (user_id,))


def delete_expired(conn: sqlite3.Connection, now: float, idle: float) -> None:
    conn.execute("DELETE FROM sessions WHERE expires_at <= ? OR last_seen_at <= ?", (now, now - idle))


def touch_session(conn: sqlite3.Connection, session_id: str, at: float) -> None:
    conn.execute("UPDATE sessions SET last_seen_at = max(last_seen_at, ?) WHERE id = ?", (at, session_id))


def session_for_auth(store: Store, token_hash: str) -> Row | None:
    """The session with its member and organization, in one indexed read."""
    return store.one(
        "SELECT s.id, s.user_id, s.organization_id, s.created_at, s.last_seen_at, s.expires_at, s.org_chosen, "
        "u.email, u.role, u.is_active AS user_active, o.name AS org_name, o.approved_at, o.unconfirmed "
        "FROM sessions s JOIN users u ON u.id = s.user_id JOIN organizations o ON o.id = s.organization_id "
        "WHERE s.token_hash = ?", (token_hash,))


# -- provider sign-in flows ----------------------------------------------------------------
def insert_flow(conn: sqlite3.Connection, row: Row) -> None:
    conn.execute("INSERT INTO login_flows (state_hash, provider, nonce_hash, next_path, invitation_hash, "
                 "link_user_id, created_at, expires_at) VALUES (:state_hash, :provider, :nonce_hash, "
                 ":next_path, :invitation_hash, :link_user_id, :created_at, :expires_at)", row)


def delete_expired_flows(conn: sqlite3.Connection, now: float) -> None:
    conn.execute("DELETE FROM login_flows WHERE expires_at <= ?", (now,))


def take_flow(conn: sqlite3.Connection, state_hash: str, now: float) -> Row | None:
    """The flow, removed (single use); None when unknown or expired. Expired flows go too."""
    row = one(conn, "SELECT * FROM login_flows WHERE state_hash = ?", (state_hash,))
    conn.execute("DELETE FROM login_flows WHERE state_hash = ? OR expires_at <= ?", (state_hash, now))
    if row is None or row["expires_at"] <= now:
        return None
    return row


# -- identities ----------------------------------------------------------------------------
def identity(conn_or_store: Source, issuer: str, subject: str) -> Row | None:
    sql = ("SELECT i.issuer, i.subject, i.user_id, i.email, u.organization_id, u.is_active "
           "FROM identities i JOIN users u ON u.id = i.user_id WHERE i.issuer = ? AND i.subject = ?")
    return one(conn_or_store, sql, (issuer, subject))


def insert_identity(conn: sqlite3.Connection, issuer: str, subject: str, user_id: str, email: str | None,
                    now_iso: str) -> None:
    conn.execute("INSERT INTO identities (issuer, subject, user_id, email, created_at) VALUES (?,?,?,?,?)",
                 (issuer, subject, user_id, email, now_iso))


def identities_of_user(store: Store, user_id: str) -> list[Row]:
    return store.all("SELECT issuer, subject, email, created_at FROM identities WHERE user_id = ?", (user_id,))


# -- passwords -----------------------------------------------------------------------------
def password_hash(conn_or_store: Source, email: str) -> str | None:
    sql = "SELECT password_hash FROM passwords WHERE email = ? COLLATE NOCASE"
    row = conn_or_store.one(sql, (email,)) if hasattr(conn_or_store, "one") else \
        conn_or_store.execute(sql, (email,)).fetchone()
    return row["password_hash"] if row else None


def set_password(conn: sqlite3.Connection, email: str, hashed: str, now_iso: str) -> None:
    """Store the hash and end every session of the person (all memberships of the email)."""
    conn.execute("INSERT INTO passwords (email, password_hash, updated_at) VALUES (?,?,?) ON CONFLICT(email) "
                 "DO UPDATE SET password_hash = excluded.password_hash, updated_at = excluded.updated_at",
                 (email, hashed, now_iso))
    conn.execute("DELETE FROM sessions WHERE user_id IN (SELECT id FROM users WHERE email = ? COLLATE NOCASE)",
                 (email,))


def rehash_password(conn: sqlite3.Connection, email: str, old_hash: str, new_hash: str) -> None:
    """The same password under the current parameters (sessions stay); only if unchanged since."""
    conn.execute("UPDATE passwords SET password_hash = ? WHERE email = ? COLLATE NOCASE AND password_hash = ?",
                 (new_hash, email, old_hash))

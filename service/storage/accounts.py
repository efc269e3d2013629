"""SQL of organizations, users, API keys and projects. Write functions take the batch's
connection (they run inside `Store.write`); read functions take the Store."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import TYPE_CHECKING

from service.errors import Conflict
from service.storage.rows import Row, Source, all_rows, insert, one, scalar
from service.storage.rows import new_id as new_id  # the actors name it through this module

if TYPE_CHECKING:
    from service.storage.db import Store


KEY_COLUMNS = "id, name, key_prefix, user_id, role_id, expires_at, is_active, created_at, last_used_at"
PROJECT_COLUMNS = ("id, organization_id, name, slug, description, is_default, is_archived, "
                   "created_by, created_at, updated_at, archived_at")


# -- organizations and users -------------------------------------------------------------
def insert_org(conn: sqlite3.Connection, org_id: str, name: str, now: str, approved: bool) -> None:
    conn.execute("INSERT INTO organizations (id, name, created_at, approved_at) VALUES (?,?,?,?)",
                 (org_id, name, now, now if approved else None))


def approve_org(conn: sqlite3.Connection, org_id: str, now: str) -> str:
    """Set approved_at once; returns the approval time (the first one on repeats)."""
    conn.execute("UPDATE organizations SET approved_at = ? WHERE id = ? AND approved_at IS NULL",
                 (now, org_id))
    return str(scalar(conn, "SELECT approved_at FROM organizations WHERE id = ?", (org_id,)))


def rename_org(conn: sqlite3.Connection, org_id: str, name: str) -> bool:
    return conn.execute("UPDATE organizations SET name = ? WHERE id = ?", (name, org_id)).rowcount == 1


def insert_user(conn: sqlite3.Connection, user_id: str, org_id: str, email: str, role: str, now: str) -> None:
    conn.execute("INSERT INTO users (id, organization_id, email, role, created_at) VALUES (?,?,?,?,?)",
                 (user_id, org_id, email, role, now))


def get_user(conn: sqlite3.Connection, org_id: str, user_id: str) -> Row | None:
    return one(conn, "SELECT * FROM users WHERE id = ? AND organization_id = ?",
                        (user_id, org_id))


def user_email(conn: sqlite3.Connection, user_id: str) -> str | None:
    row = conn.execute("SELECT email FROM users WHERE id = ?", (user_id,)).fetchone()
    return row["email"] if row else None


def set_user_role(conn: sqlite3.Connection, user_id: str, role: str) -> None:
    conn.execute("UPDATE users SET role = ? WHERE id = ?", (role, user_id))


def deactivate_user(conn: sqlite3.Connection, user_id: str, now: str) -> None:
    conn.execute("UPDATE users SET is_active = 0, removed_at = ? WHERE id = ?", (now, user_id))


def get_org(conn_or_store: Source, org_id: str) -> Row | None:
    return one(conn_or_store, "SELECT id, name, created_at, approved_at FROM organizations WHERE id = ?", (org_id,))


def active_owners(conn: sqlite3.Connection, org_id: str) -> int:
    return int(scalar(conn, "SELECT count(*) FROM users WHERE organization_id = ? AND role = 'owner' "
                      "AND is_active = 1", (org_id,)))


def is_active_member(conn: sqlite3.Connection, org_id: str, email: str) -> bool:
    """Whether the address (any case) is an active member of the organization."""
    return one(conn, "SELECT 1 FROM users WHERE organization_id = ? AND lower(email) = lower(?) "
                     "AND is_active = 1", (org_id, email)) is not None


def invitation_mail_times(conn: sqlite3.Connection, org_id: str, email: str, since: str) -> list[str]:
    """When the organization's invitation mails to the address (any case) were queued after
    `since`, oldest first."""
    return [r["created_at"] for r in all_rows(
        conn, "SELECT created_at FROM emails WHERE organization_id = ? AND kind = 'invitation' AND "
              "lower(to_address) = lower(?) AND created_at > ? ORDER BY created_at", (org_id, email, since))]


def active_members(store: Store, org_id: str) -> list[Row]:
    return store.all("SELECT id, email, role, created_at FROM users WHERE organization_id = ? "
                     "AND is_active = 1 ORDER BY created_at, id", (org_id,))


def membership(store: Store, user_id: str) -> Row | None:
    """{organization_id, is_active} of a user, whatever the organization."""
    return store.one("SELECT organization_id, is_active FROM users WHERE id = ?", (user_id,))


def owner_email(conn: sqlite3.Connection, org_id: str) -> str | None:
    row = conn.execute("SELECT email FROM users WHERE organization_id = ? AND role = 'owner' "
                       "AND is_active = 1 ORDER BY created_at LIMIT 1", (org_id,)).fetchone()
    return row["email"] if row else None


# -- invitations ---------------------------------------------------------------------------
def insert_invitation(conn: sqlite3.Connection, row: Row) -> None:
    insert(conn, "invitations", row)


def get_invitation(conn_or_store: Source, org_id: str, invitation_id: str) -> Row | None:
    return one(conn_or_store, "SELECT * FROM invitations WHERE id = ? AND organization_id = ?",
               (invitation_id, org_id))


def invitation_by_token(conn: sqlite3.Connection, token_hash: str) -> Row | None:
    return one(conn, "SELECT * FROM invitations WHERE token_hash = ?", (token_hash,))


def set_invitation_link(conn: sqlite3.Connection, invitation_id: str, token_hash: str, expires_at: str) -> None:
    conn.execute("UPDATE invitations SET token_hash = ?, expires_at = ? WHERE id = ?",
                 (token_hash, expires_at, invitation_id))


def accept_invitation(conn: sqlite3.Connection, invitation_id: str, now: str) -> None:
    conn.execute("UPDATE invitations SET accepted_at = ? WHERE id = ?", (now, invitation_id))


def pending_invitations(store: Store, org_id: str) -> list[Row]:
    return store.all("SELECT id, email, role, created_at, expires_at FROM invitations WHERE organization_id = ? "
                     "AND accepted_at IS NULL ORDER BY created_at DESC", (org_id,))


# -- API keys ------------------------------------------------------------------------------
def insert_key(conn: sqlite3.Connection, row: Row) -> None:
    insert(conn, "api_keys", row)


def get_key(conn_or_store: Source, org_id: str, key_id: str) -> Row | None:
    sql = f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ? AND organization_id = ? AND revoked_at IS NULL"
    return one(conn_or_store, sql, (key_id, org_id))


def key_row(conn: sqlite3.Connection, org_id: str, key_id: str) -> Row | None:
    """The whole row, revoked or not."""
    return one(conn, "SELECT * FROM api_keys WHERE id = ? AND organization_id = ?", (key_id, org_id))


def list_keys(store: Store, org_id: str) -> list[Row]:
    return store.all(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE organization_id = ? AND revoked_at IS NULL "
                     "ORDER BY created_at DESC, id DESC", (org_id,))


def update_key(conn: sqlite3.Connection, key_id: str, fields: Row) -> None:
    sets = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE api_keys SET {sets} WHERE id = ?", (*fields.values(), key_id))


def revoke_key(conn: sqlite3.Connection, key_id: str, now: str) -> None:
    conn.execute("UPDATE api_keys SET revoked_at = ?, is_active = 0 WHERE id = ?", (now, key_id))


def touch_keys(conn: sqlite3.Connection, touches: dict[str, str]) -> None:
    conn.executemany("UPDATE api_keys SET last_used_at = ? WHERE id = ?",
                     [(ts, kid) for kid, ts in touches.items()])


def key_digest(key: str) -> bytes:
    """How a key is kept: the raw 32 bytes of its SHA-256, never text. A hex digest stored
    right after the key's prefix column reads, in the file, as `aak_` and 48 hex digits:
    a secret scanner run over a backup takes it for a live key."""
    return hashlib.sha256(key.encode()).digest()


def key_for_auth(store: Store, key_hash: bytes) -> Row | None:
    """Everything the authenticator needs in one indexed read (`key_hash`: `key_digest`)."""
    return store.one(
        "SELECT k.id, k.organization_id, k.user_id, k.role_id, k.expires_at, k.is_active, "
        "k.revoked_at, k.last_used_at, u.role AS user_role, u.is_active AS user_active, "
        "o.approved_at FROM api_keys k JOIN users u ON u.id = k.user_id "
        "JOIN organizations o ON o.id = k.organization_id WHERE k.key_hash = ?",
        (key_hash,),
    )


# -- projects ------------------------------------------------------------------------------
def insert_project(conn: sqlite3.Connection, row: Row) -> None:
    try:
        insert(conn, "projects", row)
    except sqlite3.IntegrityError:
        raise Conflict("The slug is already taken.", {"slug": row["slug"]}) from None


def slug_taken(conn: sqlite3.Connection, org_id: str, slug: str) -> bool:
    return conn.execute("SELECT 1 FROM projects WHERE organization_id = ? AND slug = ?",
                        (org_id, slug)).fetchone() is not None


def update_project(conn: sqlite3.Connection, project_id: str, fields: Row) -> None:
    sets = ", ".join(f"{k} = ?" for k in fields)
    try:
        conn.execute(f"UPDATE projects SET {sets} WHERE id = ?", (*fields.values(), project_id))
    except sqlite3.IntegrityError:
        raise Conflict("The slug is already taken.", {"slug": fields.get("slug")}) from None


def get_project(conn_or_store: Source, org_id: str, ref: str) -> Row | None:
    """A project by id or slug within the organization."""
    return one(conn_or_store, f"SELECT {PROJECT_COLUMNS} FROM projects WHERE organization_id = ? "
                "AND (id = ? OR slug = ?)", (org_id, ref, ref))


def default_project(conn_or_store: Source, org_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {PROJECT_COLUMNS} FROM projects WHERE organization_id = ? "
                "AND is_default = 1", (org_id,))


def list_projects(store: Store, org_id: str) -> list[Row]:
    return store.all(f"SELECT {PROJECT_COLUMNS} FROM projects WHERE organization_id = ? "
                     "ORDER BY created_at DESC, id DESC", (org_id,))


def role_users(store: Store, org_id: str, role: str) -> list[Row]:
    return store.all("SELECT id, email, role, created_at FROM users WHERE organization_id = ? AND role = ? "
                     "AND is_active = 1 ORDER BY created_at DESC", (org_id, role))

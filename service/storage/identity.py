"""SQL of a person across organizations: their memberships, whether an address already
belongs to someone, their credentials' side effects (reset links spent, keys revoked) and
the password a sign-up holds until its confirmation. Write functions take the batch's
connection; reads take either (`rows.one` / `rows.all_rows`)."""

from __future__ import annotations

import sqlite3

from service.storage.rows import Row, Source, all_rows, one

MEMBERSHIP_COLUMNS = ("u.id AS user_id, u.organization_id, u.role, o.name AS org_name, o.approved_at, "
                      "u.created_at")


def memberships(conn_or_store: Source, email: str) -> list[Row]:
    """The person's active memberships a login may open, oldest first. A membership of a
    sign-up whose own link was never followed is not one: the address was not proved."""
    return all_rows(conn_or_store, f"SELECT {MEMBERSHIP_COLUMNS} FROM users u JOIN organizations o "
                    "ON o.id = u.organization_id WHERE u.email = ? COLLATE NOCASE AND u.is_active = 1 "
                    "AND o.unconfirmed = 0 ORDER BY u.created_at, u.id", (email,))


def membership_in(conn_or_store: Source, email: str, org_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {MEMBERSHIP_COLUMNS} FROM users u JOIN organizations o "
               "ON o.id = u.organization_id WHERE u.email = ? COLLATE NOCASE AND u.is_active = 1 "
               "AND o.unconfirmed = 0 AND u.organization_id = ?", (email, org_id))


def person_known(conn_or_store: Source, email: str) -> bool:
    """Whether the address is already someone's: a membership of a confirmed organization
    (active or removed: identities hang on them) or a password. A sign-up whose own link was
    never followed proves nothing and makes nobody: it must not block the address."""
    return one(conn_or_store, "SELECT 1 FROM users u JOIN organizations o ON o.id = u.organization_id "
               "WHERE u.email = ? COLLATE NOCASE AND o.unconfirmed = 0 UNION ALL "
               "SELECT 1 FROM passwords WHERE email = ? COLLATE NOCASE LIMIT 1", (email, email)) is not None


def has_confirmed_membership(conn_or_store: Source, email: str) -> bool:
    return one(conn_or_store, "SELECT 1 FROM users u JOIN organizations o ON o.id = u.organization_id "
               "WHERE u.email = ? COLLATE NOCASE AND u.is_active = 1 AND o.unconfirmed = 0 LIMIT 1",
               (email,)) is not None


def identity_person(conn_or_store: Source, issuer: str, subject: str) -> Row | None:
    """The linked identity with its person's email (whatever became of that membership)."""
    return one(conn_or_store, "SELECT i.user_id, u.email FROM identities i JOIN users u ON u.id = i.user_id "
               "WHERE i.issuer = ? AND i.subject = ?", (issuer, subject))


def identities_of_person(conn_or_store: Source, email: str) -> list[Row]:
    return all_rows(conn_or_store, "SELECT i.issuer, i.subject, i.email, i.created_at FROM identities i "
                    "JOIN users u ON u.id = i.user_id WHERE u.email = ? COLLATE NOCASE", (email,))


def delete_identities(conn: sqlite3.Connection, email: str, issuer: str) -> None:
    conn.execute("DELETE FROM identities WHERE issuer = ? AND user_id IN "
                 "(SELECT id FROM users WHERE email = ? COLLATE NOCASE)", (issuer, email))


def spend_reset_links(conn: sqlite3.Connection, email: str, now_iso: str) -> None:
    """A credential changed: every reset link issued before stops working."""
    conn.execute("UPDATE mail_tokens SET used_at = ? WHERE email = ? AND purpose = 'reset' AND used_at IS NULL",
                 (now_iso, email))


def live_keys_of(conn: sqlite3.Connection, email: str) -> list[Row]:
    """Every unrevoked API key the person created, in every organization."""
    return conn.execute("SELECT k.* FROM api_keys k JOIN users u ON u.id = k.user_id "
                        "WHERE u.email = ? COLLATE NOCASE AND k.revoked_at IS NULL", (email,)).fetchall()


# -- a sign-up's password, until its confirmation -----------------------------------------
def hold_signup_password(conn: sqlite3.Connection, org_id: str, email: str, password_hash: str, now_iso: str) -> None:
    conn.execute("INSERT INTO signup_passwords (organization_id, email, password_hash, created_at) "
                 "VALUES (?,?,?,?)", (org_id, email, password_hash, now_iso))


def drop_stale_signup_passwords(conn: sqlite3.Connection, before_iso: str) -> None:
    """Held passwords of sign-ups whose confirmation link has expired: nothing can use them."""
    conn.execute("DELETE FROM signup_passwords WHERE created_at < ?", (before_iso,))


def take_signup_password(conn: sqlite3.Connection, org_id: str) -> Row | None:
    row = one(conn, "SELECT * FROM signup_passwords WHERE organization_id = ?", (org_id,))
    conn.execute("DELETE FROM signup_passwords WHERE organization_id = ?", (org_id,))
    return row


def use_token(conn: sqlite3.Connection, token_hash: str, now_iso: str) -> None:
    conn.execute("UPDATE mail_tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL",
                 (now_iso, token_hash))

"""Reads of the login pages: a login's password and membership, is an email taken, an invitation
by its link digest."""

from __future__ import annotations


def email_taken(store, email: str) -> bool:
    return store.one("SELECT 1 FROM users WHERE email = ? COLLATE NOCASE AND is_active = 1 LIMIT 1",
                     (email,)) is not None


def login_row(store, email: str) -> dict | None:
    """The password of `email` and the membership a login opens: the person's earliest active
    one (user_id None when they have none left)."""
    return store.one(
        "SELECT p.password_hash, u.id AS user_id, u.organization_id FROM passwords p "
        "LEFT JOIN users u ON u.email = p.email COLLATE NOCASE AND u.is_active = 1 "
        "WHERE p.email = ? COLLATE NOCASE ORDER BY u.created_at, u.id LIMIT 1", (email,))


def invitation_by_hash(store, token_hash: str, now_iso: str) -> dict | None:
    """A pending, unexpired invitation with its organization's name; None otherwise."""
    return store.one("SELECT i.id, i.organization_id, i.email, i.role, i.expires_at, o.name AS org_name "
                     "FROM invitations i JOIN organizations o ON o.id = i.organization_id "
                     "WHERE i.token_hash = ? AND i.accepted_at IS NULL AND i.expires_at > ?",
                     (token_hash, now_iso))

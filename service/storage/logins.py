"""Reads of the login pages: an invitation by its link digest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.storage.rows import Row

if TYPE_CHECKING:
    from service.storage.db import Store


def invitation_by_hash(store: Store, token_hash: str, now_iso: str) -> Row | None:
    """A pending, unexpired invitation with its organization's name; None otherwise."""
    return store.one("SELECT i.id, i.organization_id, i.email, i.role, i.expires_at, o.name AS org_name "
                     "FROM invitations i JOIN organizations o ON o.id = i.organization_id "
                     "WHERE i.token_hash = ? AND i.accepted_at IS NULL AND i.expires_at > ?",
                     (token_hash, now_iso))

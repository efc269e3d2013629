"""Rules of members shared by the operator API and the pages: who may change whom, the last
owner, and linking an identity-provider account (on issuer and subject only)."""

from __future__ import annotations


from dataclasses import dataclass

from service.errors import Conflict, Forbidden
from service.roles import within
from service.storage import accounts as accounts_sql
from service.storage import sessions as sessions_sql
from service.storage.rows import Connection

IDENTITY_TAKEN = "This identity provider account is already linked to another person."


@dataclass
class Identity:
    """An account at an identity provider, linked on (issuer, subject) only."""
    issuer: str
    subject: str
    email: str | None


def check_caller(caller_role: str | None, current: str, new: str | None) -> None:
    """The API's rule: nobody hands out more than they hold. An admin cannot make anyone
    owner, nor change or remove an owner (the operator, caller None, may)."""
    if caller_role is None:
        return
    if new is not None and not within(new, caller_role):
        raise Forbidden("You cannot grant a broader role than your own.", {"role": new})
    if current == "owner" and caller_role != "owner":
        raise Forbidden("Only an owner can change or remove an owner.", {"role": current})


def not_last_owner(conn: Connection, org_id: str, verb: str) -> None:
    if accounts_sql.active_owners(conn, org_id) <= 1:
        raise Conflict(f"The last owner cannot be {verb}.")


def link_identity(conn: Connection, user_id: str, identity: Identity, now_iso: str) -> None:
    if sessions_sql.identity(conn, identity.issuer, identity.subject) is not None:
        raise Conflict(IDENTITY_TAKEN)
    sessions_sql.insert_identity(conn, identity.issuer, identity.subject, user_id, identity.email, now_iso)

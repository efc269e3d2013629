"""Rules of invitations and members checked inside the accounts actor's transaction: one
active membership per address and organization (two would give one person two roles), and a
bound on invitation mails to one mailbox (an inviter with a resend button must not be able to
flood someone's inbox). docs/security-identity.md, "Invitations and members"."""

from __future__ import annotations

import math

from service.clock import iso, parse_iso
from service.errors import Conflict, RateLimited
from service.storage import accounts as sql
from service.storage.rows import Connection

ALREADY_MEMBER = "This email address is already a member of the organization."
INVITE_MAILS_PER_DAY = 5
MAIL_WINDOW = 86400.0
TOO_MANY_INVITES = (f"Too many invitation mails to this address: at most {INVITE_MAILS_PER_DAY} a day from one "
                    "organization. Try again later.")


def not_a_member(conn: Connection, org_id: str, email: str) -> None:
    if sql.is_active_member(conn, org_id, email):
        raise Conflict(ALREADY_MEMBER, {"email": email})


def mail_allowed(conn: Connection, org_id: str, email: str, now: float) -> None:
    """429 once the organization has queued INVITE_MAILS_PER_DAY invitation mails to the
    address within the last day (service clock); retry_after is when the oldest leaves."""
    sent = sql.invitation_mail_times(conn, org_id, email, iso(now - MAIL_WINDOW))
    if len(sent) >= INVITE_MAILS_PER_DAY:
        wait = max(1, math.ceil(parse_iso(sent[0]) + MAIL_WINDOW - now))
        raise RateLimited(TOO_MANY_INVITES, wait, {"email": email})

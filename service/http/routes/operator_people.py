"""Operator API for people: organizations by sign-up state, and password reset links.

    GET  /operator/v1/organizations?status=pending|unconfirmed|approved
         {data: [{organization_id, name, owner_email, status, created_at, confirmed_at,
         approved_at}]}; no status: every organization. `pending` = confirmed, waiting for
         approval (`genservice admin pending`); approve with .../approve.
    POST /operator/v1/password-resets {email}
         201 {data: {email, reset_url, expires_at}}: a one-hour, single-use link answered to the
         operator instead of mailed (`genservice admin reset-password EMAIL`), for nodes
         without SMTP only (with SMTP: 409, the link goes to the mailbox alone); 404 for an
         address nobody has.
"""

from __future__ import annotations

from quart import Blueprint, request

from service.errors import Conflict, Unprocessable
from service.http.auth import node
from service.http.routes.operator import operator
from service.http.schemas import Body, body
from service.storage import mail as mail_sql

bp = Blueprint("operator_people", __name__)
MAILS_RESETS = ("This node sends mail: the person asks for a reset link at /forgot-password, and the link "
                "goes only to their mailbox.")


class ResetBody(Body):
    email: str


@bp.get("/operator/v1/organizations")
@operator
async def list_organizations():
    status = request.args.get("status") or None
    if status is not None and status not in mail_sql.STATUS_WHERE:
        raise Unprocessable(f"status must be one of {', '.join(mail_sql.STATUS_WHERE)}.",
                            {"status": status, "allowed": list(mail_sql.STATUS_WHERE)})
    return {"data": mail_sql.list_orgs(node().store, status)}


@bp.post("/operator/v1/password-resets")
@operator
@body(ResetBody)
async def password_reset(data: ResetBody):
    if node().settings.smtp_host is not None:  # a link that sets a password goes to the mailbox only
        raise Conflict(MAILS_RESETS)
    return {"data": await node().accounts.operator_reset(data.email.strip())}, 201

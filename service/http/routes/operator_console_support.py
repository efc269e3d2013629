"""The console's support desk: every ticket (open ones first, oldest waiting first), one
ticket's thread with "Reply" / "Send reply", and its state.

A reply goes through the tickets actor as the operator API's does: the ticket moves to
awaiting_customer, `support.ticket.replied` fires and the person who opened it gets the
reply by mail.
"""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.actors.tickets import STATES
from service.http.auth import node
from service.http.operator_session import audit, console_page, show
from service.http.pages import PageError
from service.http.routes.operator_console_orgs import offset_arg
from service.storage import console as sql
from service.storage import support as support_sql

bp = Blueprint("operator_console_support", __name__)

NOTES = {"replied": "Reply sent.", "state": "State changed."}
REPLY_ERROR = "Reply: write the answer (up to 20000 characters)."
AUTHOR = "Support"


@bp.get("/operator/support")
@hide
@console_page
async def tickets():
    offset = offset_arg()
    rows, total = sql.tickets(node().store, offset)
    return show("operator_support.html", title="Support", rows=rows, total=total, offset=offset, page=sql.PAGE)


def _ticket(ticket_id: str) -> dict:
    row = support_sql.get_ticket(node().store, None, ticket_id)
    if row is None:
        raise PageError(404, "Not found", "There is no ticket with this id.")
    return row


def _thread(ticket_id: str, status: int = 200, **ctx):
    t = _ticket(ticket_id)
    org = sql.org(node().store, t["organization_id"])
    return show("operator_ticket.html", status, title=f"Ticket {t['number']}", t=t, org=org,
                replies=support_sql.replies(node().store, ticket_id), states=STATES,
                note=NOTES.get(request.args.get("note", "")), **ctx)


@bp.get("/operator/support/<ticket_id>")
@hide
@console_page
async def ticket(ticket_id: str):
    return _thread(ticket_id)


@bp.post("/operator/support/<ticket_id>/replies")
@hide
@console_page
async def reply(ticket_id: str):
    t = _ticket(ticket_id)
    body = (await request.form).get("body", "").strip()
    if not body or len(body) > 20_000:
        return _thread(ticket_id, 400, reply_error=REPLY_ERROR, draft=body[:20_000])
    await node().tickets.support_reply(t["organization_id"], ticket_id, AUTHOR, body)
    await audit("ticket.reply", ticket_id, f"ticket {t['number']} of {t['organization_id']}")
    return redirect(f"/operator/support/{ticket_id}?note=replied", 303)


@bp.post("/operator/support/<ticket_id>/state")
@hide
@console_page
async def set_state(ticket_id: str):
    t = _ticket(ticket_id)
    state = (await request.form).get("state", "")
    if state not in STATES:
        return _thread(ticket_id, 400, state_error=f"State: choose one of {', '.join(STATES)}.")
    await node().tickets.set_state(t["organization_id"], ticket_id, state)
    await audit("ticket.state", ticket_id, f"{t['state']} -> {state}")
    return redirect(f"/operator/support/{ticket_id}?note=state", 303)

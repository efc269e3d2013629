"""Support page (`/support`): open a ticket, see the organization's tickets and their
replies, reply; through the same tickets actor, rules and permissions as
`/v1/support/tickets` (reading and replying: `users:read`)."""

from __future__ import annotations

from quart import Blueprint, redirect, request
from quart_schema import hide

from service.actors.tickets import PRIORITIES, TYPES
from service.errors import ApiError, NotFound
from service.http import forms
from service.http.auth import node, principal
from service.http.browser import csrf_protected, page
from service.http.dashboard import show
from service.http.routes.support import one_line_subject, ticket_view, ticket_with_replies
from service.storage import support as sql

bp = Blueprint("dash_support", __name__)


def support_page(status: int = 200, **ctx):
    rows = sql.list_tickets(node().store, principal().org_id, 100, None) if _can_read() else []
    return show("support.html", status, title="Support", tickets=[ticket_view(r) for r in rows], types=TYPES,
                priorities=PRIORITIES, **ctx)


def _can_read() -> bool:
    from service.roles import allows
    return allows(principal().role, "users:read")


@bp.get("/support")
@hide
@page()
async def support():
    return support_page()


@bp.post("/support")
@hide
@page()
@csrf_protected
async def open_ticket():
    form = await request.form
    return await forms.once(form, lambda: open_with(form), "/support")


async def open_with(form):
    p = principal()
    try:
        row = await node().tickets.open_ticket(
            p.org_id, p.user_id, one_line_subject(form.get("subject_line", "")), form.get("type", "question"),
            form.get("priority", "P3"), form.get("body", "").strip())
    except ApiError as e:
        return support_page(e.status, error=e.message, values=form)
    forms.notify(f"Ticket {row['number']} opened.")
    return redirect(f"/support/{row['id']}", 303)


def ticket_page(ticket_id: str, status: int = 200, **ctx):
    store = node().store
    row = sql.get_ticket(store, principal().org_id, ticket_id)
    if row is None:
        raise NotFound("Ticket not found.")
    return show("ticket.html", status, title=f"Ticket {row['number']}",
                ticket=ticket_with_replies(row, sql.replies(store, ticket_id)), **ctx)


@bp.get("/support/<ticket_id>")
@hide
@page("users:read")
async def ticket(ticket_id: str):
    return ticket_page(ticket_id)


@bp.post("/support/<ticket_id>/replies")
@hide
@page("users:read")  # as reading the ticket: the answer is the ticket page
@csrf_protected
async def reply(ticket_id: str):
    form = await request.form
    return await forms.once(form, lambda: send_reply(ticket_id, form), f"/support/{ticket_id}")


async def send_reply(ticket_id: str, form):
    p = principal()
    try:
        await node().tickets.customer_reply(p.org_id, ticket_id, p.user_id, form.get("body", "").strip())
    except ApiError as e:
        return ticket_page(ticket_id, e.status, error=e.message)
    forms.notify("Reply sent.")
    return redirect(f"/support/{ticket_id}", 303)

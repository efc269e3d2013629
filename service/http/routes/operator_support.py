"""Support's side of tickets, in the operator API (operator token; `{data: ...}`):

    GET  /operator/v1/support/tickets              query organization_id, state, limit
    GET  /operator/v1/support/tickets/{id}         with `replies`
    POST /operator/v1/support/tickets/{id}/replies body `body`, `author` (default "Support"):
         201; emits support.ticket.replied (recipient_email: who opened the ticket) and moves
         the ticket to awaiting_customer (support.ticket.state_changed when it moved)
    POST /operator/v1/support/tickets/{id}/state   body `state`: 200; emits
         support.ticket.state_changed unless unchanged; 409 once closed; 422 unknown state
"""

from __future__ import annotations

from pydantic import Field
from quart import Blueprint

from service.actors.tickets import STATES
from service.errors import NotFound
from service.http.auth import node
from service.http.routes.operator import operator
from service.http.routes.support import check_state_filter, ticket_view, ticket_with_replies
from service.http.schemas import Body, Query, body, clamp, query
from service.storage import support as sql

bp = Blueprint("operator_support", __name__)


class SupportReplyBody(Body):
    body: str
    author: str = "Support"


class StateBody(Body):
    state: str = Field(description=f"One of {', '.join(STATES)}.")


class OperatorList(Query):
    organization_id: str | None = None
    state: str | None = None
    limit: int | None = None


def _ticket(ticket_id: str) -> dict:
    row = sql.get_ticket(node().store, None, ticket_id)
    if row is None:
        raise NotFound("Ticket not found.")
    return row


@bp.get("/operator/v1/support/tickets")
@operator
@query(OperatorList)
async def list_tickets(q: OperatorList):
    check_state_filter(q.state)
    rows = sql.list_tickets(node().store, q.organization_id, clamp(q.limit, 50, 1, 500), q.state)
    return {"data": [ticket_view(r) for r in rows]}


@bp.get("/operator/v1/support/tickets/<ticket_id>")
@operator
async def get_ticket(ticket_id: str):
    row = _ticket(ticket_id)
    return {"data": ticket_with_replies(row, sql.replies(node().store, ticket_id))}


@bp.post("/operator/v1/support/tickets/<ticket_id>/replies")
@operator
@body(SupportReplyBody)
async def support_reply(ticket_id: str, data: SupportReplyBody):
    t = _ticket(ticket_id)
    row = await node().tickets.support_reply(t["organization_id"], ticket_id, data.author, data.body)
    return {"data": ticket_with_replies(row, row["replies"])}, 201


@bp.post("/operator/v1/support/tickets/<ticket_id>/state")
@operator
@body(StateBody)
async def set_state(ticket_id: str, data: StateBody):
    t = _ticket(ticket_id)
    row = await node().tickets.set_state(t["organization_id"], ticket_id, data.state)
    return {"data": ticket_with_replies(row, row["replies"])}

"""Support tickets (beyond the spec's endpoints; states and events as the spec's "Support
ticket" and "Events"). Answers use `{data: ...}`.

    GET  /v1/support/tickets               users:read   newest first; query `limit`, `state`
    GET  /v1/support/tickets/{id}          users:read   the ticket with its `replies`
    POST /v1/support/tickets               any valid key   201; emits support.ticket.opened
    POST /v1/support/tickets/{id}/replies  users:read   201; reopens a ticket awaiting the
                                                        customer (support.ticket.state_changed)

Permissions, decided here: tickets belong to the organization, so every member may read
them (`users:read`, held by all four roles, like viewing members). Replying needs the same:
its answer is the whole ticket with every reply, so a weaker check would read through it.
Opening needs only a valid key of the organization: it answers only what the caller wrote,
and a `read_only` member is exactly who may need to ask for access. Support's side
(replies as support, state changes) is the operator API (`operator_support`).

`subject_line` is kept on one line: its line breaks (CR, LF, U+2028, ...) become spaces, as
the Subject header of the support-reply mail needs them to (service/mail/messages.one_line);
a subject the OpenAPI document allows is never refused for them.
"""

from __future__ import annotations

from quart import Blueprint

from service.actors.tickets import MAX_BODY, MAX_SUBJECT, PRIORITIES, STATES, TYPES
from service.errors import BadRequest, NotFound
from service.http import responses as R
from service.http.auth import principal, requires, node
from service.http.schemas import LIMIT, Body, Query, body, clamp, documented, non_blank, query
from service.mail.messages import one_line
from service.storage import support as sql

bp = Blueprint("support", __name__)

DEFAULT_PAGE, MAX_PAGE = 50, 200


class TicketOpen(Body):
    subject_line: str = documented(non_blank(MAX_SUBJECT))
    type: str = documented({"enum": list(TYPES)}, "question", f"One of {', '.join(TYPES)}.")
    priority: str = documented({"enum": list(PRIORITIES)}, "P3", f"One of {', '.join(PRIORITIES)}.")
    body: str = documented(non_blank(MAX_BODY))


class ReplyCreate(Body):
    body: str = documented(non_blank(MAX_BODY))


class TicketList(Query):
    limit: int | None = documented(LIMIT, None)
    state: str | None = documented({"enum": list(STATES)}, None, f"One of {', '.join(STATES)}.")


def reply_view(row: dict) -> R.TicketReply:
    return {"id": row["id"], "author_kind": row["author_kind"], "author": row["author"],
            "user_id": row["user_id"], "body": row["body"], "created_at": row["created_at"]}


def ticket_view(row: dict) -> R.Ticket:
    return {
        "id": row["id"], "organization_id": row["organization_id"], "number": row["number"],
        "subject_line": row["subject_line"], "type": row["type"], "priority": row["priority"],
        "state": row["state"], "body": row["body"], "opened_by": row["opened_by"],
        "opened_by_email": row["opened_by_email"], "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def ticket_with_replies(row: dict, replies: list[dict]) -> R.TicketWithReplies:
    """One ticket as read alone (and as the ticket actor answers): with its replies."""
    return {**ticket_view(row), "replies": [reply_view(r) for r in replies]}


def one_line_subject(subject: str) -> str:
    """The subject on one line (module docstring)."""
    return one_line(subject).strip()


def check_state_filter(state: str | None) -> None:
    if state is not None and state not in STATES:
        raise BadRequest(f"state must be one of {', '.join(STATES)}.", {"state": state, "allowed": list(STATES)})


@bp.get("/v1/support/tickets")
@requires("users:read")
@query(TicketList)
async def list_tickets(q: TicketList) -> R.Data[list[R.Ticket]]:
    check_state_filter(q.state)
    rows = sql.list_tickets(node().store, principal().org_id, clamp(q.limit, DEFAULT_PAGE, 1, MAX_PAGE),
                            q.state)
    return {"data": [ticket_view(r) for r in rows]}


@bp.get("/v1/support/tickets/<ticket_id>")
@requires("users:read")
async def get_ticket(ticket_id: str) -> R.Data[R.TicketWithReplies]:
    store = node().store
    row = sql.get_ticket(store, principal().org_id, ticket_id)
    if row is None:
        raise NotFound("Ticket not found.")
    return {"data": ticket_with_replies(row, sql.replies(store, ticket_id))}


@bp.post("/v1/support/tickets")
@requires(None)
@body(TicketOpen)
async def open_ticket(data: TicketOpen) -> tuple[R.Data[R.TicketWithReplies], int]:
    p = principal()
    row = await node().tickets.open_ticket(p.org_id, p.user_id, one_line_subject(data.subject_line), data.type,
                                           data.priority, data.body)
    return {"data": ticket_with_replies(row, row["replies"])}, 201


@bp.post("/v1/support/tickets/<ticket_id>/replies")
@requires("users:read")
@body(ReplyCreate)
async def reply(ticket_id: str, data: ReplyCreate) -> tuple[R.Data[R.TicketWithReplies], int]:
    p = principal()
    row = await node().tickets.customer_reply(p.org_id, ticket_id, p.user_id, data.body)
    return {"data": ticket_with_replies(row, row["replies"])}, 201

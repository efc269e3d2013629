"""Support tickets: one actor per organization, the owner of its tickets and their numbers.

Every change follows `machines.TICKET` (open, triaging, awaiting_customer, resolved, closed):
a customer reply reopens a ticket waiting on the customer (or resolved) and emits
`support.ticket.state_changed`; a support reply emits `support.ticket.replied` and moves the
ticket to `awaiting_customer` (with `state_changed` when it moved); an explicit move emits
`state_changed` unless the state stays the same; a closed ticket takes nothing (409).
Events go into the `events` outbox in the same transaction as the change; after the commit
the actor tells the delivery actor (`wake`) so the webhooks go out at once.

The actor stops when its mailbox is empty (`done`); the registry spawns it again on demand.
"""

from __future__ import annotations


from dataclasses import dataclass
from typing import Any

from service import machines
from service.effects import EffectHandlers, Step
from service.actors.runtime import Actor, on
from service.clock import Clock
from service.errors import Conflict, NotFound, Unprocessable
from service.machines import TICKET, IllegalTransition
from service.mail import messages
from service.storage import accounts as accounts_sql
from service.storage import mail as mail_sql
from service.storage import support as sql
from service.storage.db import Store
from service.storage.events import emit
from service.storage.rows import Connection

TYPES = ("question", "bug", "access", "billing", "account")
PRIORITIES = ("P1", "P2", "P3", "P4")
STATES = ("open", "triaging", "awaiting_customer", "resolved", "closed")
MAX_SUBJECT = 200
MAX_BODY = 20_000


@dataclass
class OpenTicket:
    org_id: str
    user_id: str
    subject_line: str
    type: str
    priority: str
    body: str


@dataclass
class CustomerReply:
    org_id: str
    ticket_id: str
    user_id: str
    body: str


@dataclass
class SupportReply:
    org_id: str
    ticket_id: str
    author: str
    body: str


@dataclass
class SetState:
    org_id: str
    ticket_id: str
    state: str


def _text(value: str, field: str, limit: int) -> str:
    value = (value or "").strip()
    if not value:
        raise Unprocessable(f"{field} is required.", {"field": field})
    if len(value) > limit:
        raise Unprocessable(f"{field} is longer than {limit} characters.", {"field": field, "max": limit})
    return value


def _not_found() -> NotFound:
    return NotFound("Ticket not found.")


def _closed(ticket: dict[str, Any]) -> Conflict:
    return Conflict("The ticket is closed.", {"ticket_id": ticket["id"], "state": ticket["state"]})


def _state_changed(conn: Connection, t: dict[str, Any], new: str, now: str) -> None:
    emit(conn, t["organization_id"], "support.ticket.state_changed",
         {"ticket_id": t["id"], "ticket_number": t["number"], "subject_line": t["subject_line"],
          "state": new, "previous_state": t["state"]}, now)


@dataclass(frozen=True)
class TicketFacts:
    """What the TICKET effects are told about a move (they run inside its transaction); a
    support reply names its author and body."""

    conn: Connection
    ticket: dict[str, Any]
    now: str
    author: str | None = None
    body: str | None = None


def _moved(conn: Any, org_id: str, ticket_id: str, event: str, now: str, author: str | None = None,
           body: str | None = None) -> tuple[dict[str, Any], Step[TicketFacts]]:
    """The ticket and its TICKET transition on `event` (effects not run yet): 404 for an
    unknown ticket, 409 for a move the table refuses (a closed ticket)."""
    t = sql.get_ticket(conn, org_id, ticket_id)
    if t is None:
        raise _not_found()
    try:
        step = TICKET_EFFECTS.step(t["state"], event, TicketFacts(conn, t, now, author, body))
    except IllegalTransition:
        raise _closed(t) from None
    return t, step


def _add_reply(conn: Connection, t: dict[str, Any], new: str, now: str, **reply: Any) -> None:
    """Store a reply and move the ticket to `new` (or just mark it updated)."""
    sql.insert_reply(conn, dict(id=sql.new_id(), ticket_id=t["id"], created_at=now, **reply))
    if new != t["state"]:
        sql.set_state(conn, t["id"], new, now)
    else:
        sql.touch(conn, t["id"], now)


class TicketsActor(Actor):
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def handle(self, msg: Any) -> Any:
        self.done = True  # nothing kept in memory: stop once the mailbox is empty
        return await super().handle(msg)

    @on(OpenTicket)
    async def on_OpenTicket(self, m: OpenTicket) -> dict[str, Any]:
        subject = _text(m.subject_line, "subject_line", MAX_SUBJECT)
        body = _text(m.body, "body", MAX_BODY)
        if m.type not in TYPES:
            raise Unprocessable(f"type must be one of {', '.join(TYPES)}.", {"type": m.type, "allowed": list(TYPES)})
        if m.priority not in PRIORITIES:
            raise Unprocessable(f"priority must be one of {', '.join(PRIORITIES)}.",
                                {"priority": m.priority, "allowed": list(PRIORITIES)})
        now = self.clock.iso_now()
        ticket_id = sql.new_id()

        def tx(conn: Any) -> Any:
            user = accounts_sql.get_user(conn, m.org_id, m.user_id)
            if user is None:
                raise NotFound("Member not found.")
            number = sql.next_number(conn, m.org_id)
            sql.insert_ticket(conn, dict(id=ticket_id, organization_id=m.org_id, number=number,
                                         subject_line=subject, type=m.type, priority=m.priority, state="open",
                                         body=body, opened_by=m.user_id, opened_by_email=user["email"],
                                         created_at=now, updated_at=now))
            emit(conn, m.org_id, "support.ticket.opened",
                 {"ticket_id": ticket_id, "ticket_number": number, "subject_line": subject,
                  "type": m.type, "priority": m.priority, "state": "open"}, now)
            return _detail(conn, m.org_id, ticket_id)

        return await self.store.write(tx)

    @on(CustomerReply)
    async def on_CustomerReply(self, m: CustomerReply) -> dict[str, Any]:
        body = _text(m.body, "body", MAX_BODY)
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            t, step = _moved(conn, m.org_id, m.ticket_id, "customer_reply", now=now)
            user = accounts_sql.get_user(conn, m.org_id, m.user_id)
            _add_reply(conn, t, step.new, now, author_kind="customer", author=user["email"] if user else m.user_id,
                       user_id=m.user_id, body=body)
            TICKET_EFFECTS.run(self, step)
            return _detail(conn, m.org_id, t["id"])

        return await self.store.write(tx)

    @on(SupportReply)
    async def on_SupportReply(self, m: SupportReply) -> dict[str, Any]:
        body = _text(m.body, "body", MAX_BODY)
        author = _text(m.author, "author", MAX_SUBJECT)
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            t, step = _moved(conn, m.org_id, m.ticket_id, "support_reply", now=now, author=author, body=body)
            _add_reply(conn, t, step.new, now, author_kind="support", author=author, user_id=None, body=body)
            TICKET_EFFECTS.run(self, step)
            return _detail(conn, m.org_id, t["id"])

        return await self.store.write(tx)

    @on(SetState)
    async def on_SetState(self, m: SetState) -> dict[str, Any]:
        if m.state not in STATES:
            raise Unprocessable(f"state must be one of {', '.join(STATES)}.",
                                {"state": m.state, "allowed": list(STATES)})
        now = self.clock.iso_now()

        def tx(conn: Any) -> Any:
            t, step = _moved(conn, m.org_id, m.ticket_id, machines.SET_STATE + m.state, now=now)
            if step.new != t["state"]:
                sql.set_state(conn, t["id"], step.new, now)
            TICKET_EFFECTS.run(self, step)
            return _detail(conn, m.org_id, t["id"])

        return await self.store.write(tx)


    # effects of machines.TICKET, run inside the transaction that moves the ticket -----------
    def _on_state_changed(self, step: Step[TicketFacts]) -> None:
        f = step.facts
        _state_changed(f.conn, f.ticket, step.new, f.now)

    def _on_replied(self, step: Step[TicketFacts]) -> None:
        """The customer hears of a support reply: an event and a mail, with the reply."""
        f = step.facts
        conn, t, now, author, body = f.conn, f.ticket, f.now, f.author, f.body
        assert author is not None and body is not None  # only a support reply is `replied`
        emit(conn, t["organization_id"], "support.ticket.replied",
             {"ticket_id": t["id"], "ticket_number": t["number"], "subject_line": t["subject_line"],
              "author": author, "body": body, "recipient_email": t["opened_by_email"]}, now)
        mail = messages.support_reply(t["number"], t["subject_line"], author, body)
        mail_sql.enqueue(conn, t["organization_id"], t["opened_by_email"], mail.kind, mail.subject, mail.text,
                         mail.html, now)


TICKET_EFFECTS: EffectHandlers[TicketFacts] = EffectHandlers(
    TICKET, TicketsActor, {"state_changed": "_on_state_changed", "replied": "_on_replied"})


def _detail(conn: Connection, org_id: str, ticket_id: str) -> dict[str, Any]:
    t = sql.get_ticket(conn, org_id, ticket_id)
    assert t is not None  # read in the transaction that found it
    return t | {"replies": sql.replies(conn, ticket_id)}


assert set(STATES) == set(machines.TICKET.states)

"""Tables of support tickets and their replies. Ticket numbers count per organization."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("support")


@migrations()
def m001_support(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE support_tickets (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            number INTEGER NOT NULL,
            subject_line TEXT NOT NULL,
            type TEXT NOT NULL,
            priority TEXT NOT NULL,
            state TEXT NOT NULL,
            body TEXT NOT NULL,
            opened_by TEXT NOT NULL,       -- users.id
            opened_by_email TEXT NOT NULL, -- the recipient of support replies
            created_at TEXT NOT NULL,
            updated_at TEXT,
            UNIQUE (organization_id, number)
        );
        CREATE INDEX support_tickets_org ON support_tickets(organization_id, number);
        CREATE TABLE support_replies (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            ticket_id TEXT NOT NULL REFERENCES support_tickets(id),
            author_kind TEXT NOT NULL,     -- customer or support
            author TEXT NOT NULL,          -- a member's email, or the support agent's name
            user_id TEXT,                  -- the member, for customer replies
            body TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX support_replies_ticket ON support_replies(ticket_id, seq);
        """
    )

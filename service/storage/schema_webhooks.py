"""Tables of account webhooks and their deliveries (one row per event per webhook).

A delivery row is written `pending` in the same transaction that marks its event
dispatched, becomes `sending` (committed) before its POST and gets its outcome after:
`delivered`, `failed`, `skipped` (webhook paused or deleted before the send) or
`unknown` (the node stopped mid-send; never re-sent).
"""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("webhooks")


@migrations()
def m001_webhooks(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE webhooks (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            url TEXT NOT NULL,
            events TEXT NOT NULL,          -- JSON array of event names
            description TEXT,
            secret TEXT NOT NULL,          -- kept to sign; shown only in the create answer
            is_active INTEGER NOT NULL DEFAULT 1,
            created_at TEXT NOT NULL,
            updated_at TEXT,
            deleted_at TEXT
        );
        CREATE INDEX webhooks_org ON webhooks(organization_id, deleted_at, created_at);
        CREATE TABLE webhook_deliveries (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            webhook_id TEXT NOT NULL,
            organization_id TEXT NOT NULL,
            event_seq INTEGER,             -- events.seq; NULL for webhook.test
            event TEXT NOT NULL,
            body TEXT NOT NULL,            -- the exact bytes sent (UTF-8) and signed
            status TEXT NOT NULL,          -- pending, sending, delivered, failed, skipped, unknown
            created_at TEXT NOT NULL,
            sent_at TEXT,
            completed_at TEXT,
            status_code INTEGER,
            error TEXT,
            error_class TEXT,
            duration_ms INTEGER
        );
        CREATE INDEX webhook_deliveries_status ON webhook_deliveries(status, seq);
        CREATE INDEX webhook_deliveries_hook ON webhook_deliveries(webhook_id, seq);
        """
    )


@migrations()
def m002_active_since(db: Database) -> None:
    """A webhook receives only events committed after it was created or last resumed: the
    outbox's highest `seq` at that moment is kept here and fan-out compares against it."""
    db.executescript("ALTER TABLE webhooks ADD COLUMN active_since_seq INTEGER NOT NULL DEFAULT 0;")

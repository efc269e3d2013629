"""Tables of organizations, users, API keys, projects, and the event/email outboxes."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("accounts")


@migrations()
def m001_accounts(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE organizations (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            created_at TEXT NOT NULL,
            approved_at TEXT
        );
        CREATE TABLE users (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            email TEXT NOT NULL,
            role TEXT NOT NULL,
            is_active INTEGER NOT NULL DEFAULT 1,
            created_at TEXT NOT NULL,
            removed_at TEXT
        );
        CREATE INDEX users_org ON users(organization_id);
        CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            user_id TEXT NOT NULL REFERENCES users(id),
            name TEXT NOT NULL,
            key_prefix TEXT NOT NULL,
            key_hash TEXT NOT NULL UNIQUE,
            role_id TEXT,
            expires_at TEXT,
            is_active INTEGER NOT NULL DEFAULT 1,
            revoked_at TEXT,
            created_at TEXT NOT NULL,
            last_used_at TEXT
        );
        CREATE INDEX api_keys_org ON api_keys(organization_id, created_at);
        CREATE TABLE projects (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            name TEXT NOT NULL,
            slug TEXT NOT NULL,
            description TEXT,
            is_default INTEGER NOT NULL DEFAULT 0,
            is_archived INTEGER NOT NULL DEFAULT 0,
            created_by TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT,
            archived_at TEXT,
            UNIQUE (organization_id, slug)
        );
        -- Account-webhook events, written in the same transaction as the change that fires
        -- them; the delivery actor fans them out to the organization's webhooks.
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            organization_id TEXT NOT NULL,
            event TEXT NOT NULL,
            data TEXT NOT NULL,
            created_at TEXT NOT NULL,
            dispatched INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX events_pending ON events(dispatched, seq);
        -- Outgoing email (low-balance warnings, ...). SMTP delivery reads this table.
        CREATE TABLE emails (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            to_address TEXT NOT NULL,
            subject TEXT NOT NULL,
            body TEXT NOT NULL,
            created_at TEXT NOT NULL,
            sent_at TEXT
        );
        """
    )


@migrations()
def m002_invitations(db: Database) -> None:
    db.executescript(
        """
        -- A pending member: the link's token is kept only as a SHA-256 digest; a resend
        -- replaces it (the previous link stops working). member_id becomes the user's id.
        CREATE TABLE invitations (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            member_id TEXT NOT NULL UNIQUE,
            email TEXT NOT NULL,
            role TEXT NOT NULL,
            token_hash TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            accepted_at TEXT
        );
        """
    )


@migrations()
def m003_key_digests_as_bytes(db: Database) -> None:
    """Key digests from hex text to raw bytes (see storage.accounts.key_digest). The old text
    stays in free pages until `apply_all` vacuums after a migration."""
    rows = db.execute("SELECT id, key_hash FROM api_keys WHERE typeof(key_hash) = 'text'").fetchall()
    db.conn.executemany("UPDATE api_keys SET key_hash = ? WHERE id = ?",
                        [(bytes.fromhex(h), kid) for kid, h in rows])


@migrations()
def m004_people_mail(db: Database) -> None:
    """Sign-up confirmation, one-time mail links, and the mail outbox's delivery state."""
    db.executescript(
        """
        -- 1 while a self-service sign-up waits for its email confirmation
        ALTER TABLE organizations ADD COLUMN unconfirmed INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE organizations ADD COLUMN confirmed_at TEXT;
        -- One-time links sent by mail (sign-up confirmation, password reset): only the
        -- SHA-256 digest of the token is kept; `used_at` makes them single-use.
        CREATE TABLE mail_tokens (
            token_hash TEXT PRIMARY KEY,
            purpose TEXT NOT NULL,
            email TEXT NOT NULL COLLATE NOCASE,
            organization_id TEXT,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            used_at TEXT
        );
        CREATE INDEX mail_tokens_email ON mail_tokens(email, purpose);
        -- The outbox's delivery state (service/mail/outbox.py). `link` holds the mail's one
        -- secret link sealed with the node key until the mail has gone, then NULL.
        ALTER TABLE emails ADD COLUMN kind TEXT NOT NULL DEFAULT 'notice';
        ALTER TABLE emails ADD COLUMN html TEXT;
        ALTER TABLE emails ADD COLUMN link TEXT;
        ALTER TABLE emails ADD COLUMN state TEXT NOT NULL DEFAULT 'pending';
        ALTER TABLE emails ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE emails ADD COLUMN next_attempt_at REAL NOT NULL DEFAULT 0;
        ALTER TABLE emails ADD COLUMN error TEXT;
        ALTER TABLE emails ADD COLUMN finished_at TEXT;
        UPDATE emails SET state = 'sent' WHERE sent_at IS NOT NULL;
        CREATE INDEX emails_due ON emails(state, next_attempt_at);
        """
    )

"""Tables of the operator console: its sign-in sessions (separate from the organizations'
browser sessions) and the audit log of every operator action."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("operator")


@migrations()
def m001_operator_console(db: Database) -> None:
    db.executescript(
        """
        -- Signed in with the operator token; only the token's SHA-256 digest is kept.
        CREATE TABLE operator_sessions (
            id TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL UNIQUE,
            who TEXT NOT NULL,
            address TEXT NOT NULL,
            created_at REAL NOT NULL,
            last_seen_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        -- Every operator action: who, what, on what, when, from which address. Never updated.
        CREATE TABLE operator_audit (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            who TEXT NOT NULL,
            address TEXT NOT NULL,
            action TEXT NOT NULL,
            target TEXT,
            detail TEXT
        );
        CREATE INDEX operator_audit_target ON operator_audit(target, seq);
        CREATE TRIGGER operator_audit_no_update BEFORE UPDATE ON operator_audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        """
    )

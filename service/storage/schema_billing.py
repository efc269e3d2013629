"""Tables of credits: lots, holds (with their lot slices), the append-only ledger, settings.

Amounts are integer micro-credits (`*_uc`, 1 credit = 1_000_000). CHECK constraints are
the last line of defence behind the balance actor: a lot can never go below zero or above
its amount, a hold never captures more than it holds, and the ledger refuses UPDATE and
DELETE. See `service/storage/billing.py` for the meaning of every column and the ledger
rule (Σ ledger amounts of an organization = its `available`).
"""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("billing")


@migrations()
def m001_billing(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE credit_lots (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            grant_id TEXT NOT NULL,
            source TEXT NOT NULL,
            amount_uc INTEGER NOT NULL CHECK (amount_uc > 0),
            remaining_uc INTEGER NOT NULL CHECK (remaining_uc >= 0 AND remaining_uc <= amount_uc),
            reserved_uc INTEGER NOT NULL DEFAULT 0
                CHECK (reserved_uc >= 0 AND reserved_uc <= remaining_uc),
            expired_uc INTEGER NOT NULL DEFAULT 0
                CHECK (expired_uc >= 0 AND expired_uc <= remaining_uc - reserved_uc),
            expires_at TEXT,
            expires_ts REAL,
            expired_at TEXT,
            reason TEXT,
            created_at TEXT NOT NULL,
            UNIQUE (organization_id, grant_id)
        );
        CREATE TABLE credit_holds (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL,
            job_id TEXT,
            workflow_run_id TEXT,
            project_id TEXT,
            description TEXT,
            status TEXT NOT NULL CHECK (status IN ('held', 'captured', 'released')),
            amount_uc INTEGER NOT NULL CHECK (amount_uc >= 0),
            captured_uc INTEGER CHECK (captured_uc IS NULL OR (captured_uc >= 0 AND captured_uc <= amount_uc)),
            slices TEXT NOT NULL,
            created_at TEXT NOT NULL,
            settled_at TEXT
        );
        CREATE INDEX credit_holds_org ON credit_holds(organization_id, created_at);
        CREATE INDEX credit_holds_held ON credit_holds(organization_id) WHERE status = 'held';
        CREATE INDEX credit_holds_usage ON credit_holds(organization_id, settled_at)
            WHERE status = 'captured' AND job_id IS NOT NULL;
        CREATE TABLE credit_ledger (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL,
            organization_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('grant', 'hold', 'capture', 'release', 'expiry')),
            amount_uc INTEGER NOT NULL,
            source TEXT,
            lot_id TEXT,
            hold_id TEXT,
            project_id TEXT,
            job_id TEXT,
            workflow_run_id TEXT,
            description TEXT
        );
        CREATE INDEX credit_ledger_org ON credit_ledger(organization_id, created_at);
        CREATE TRIGGER credit_ledger_no_update BEFORE UPDATE ON credit_ledger
            BEGIN SELECT RAISE(ABORT, 'the credit ledger is append-only'); END;
        CREATE TRIGGER credit_ledger_no_delete BEFORE DELETE ON credit_ledger
            BEGIN SELECT RAISE(ABORT, 'the credit ledger is append-only'); END;
        CREATE TABLE billing_settings (
            organization_id TEXT PRIMARY KEY,
            low_balance_threshold_uc INTEGER CHECK (low_balance_threshold_uc IS NULL
                                                    OR low_balance_threshold_uc >= 0),
            low_balance_notified_at TEXT
        );
        """
    )

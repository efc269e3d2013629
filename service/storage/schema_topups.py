"""The top-ups table. Status follows `machines.TOPUP`; the credits themselves are a lot of
the balance ledger (grant id = top-up id), written by the balance actor."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("topups")


@migrations()
def m001_topups(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE topups (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            created_by TEXT,                 -- user whose key asked for it
            credits_uc INTEGER NOT NULL,     -- micro-credits (service.money)
            amount_cents INTEGER NOT NULL,
            currency TEXT NOT NULL,
            usd_per_credit TEXT NOT NULL,    -- the quote's price when it was made
            expiry_days INTEGER NOT NULL,    -- the quote's expiry_days when it was made
            status TEXT NOT NULL,            -- pending, paid, expired
            provider TEXT NOT NULL,          -- test, stripe
            provider_ref TEXT,               -- Stripe checkout session id
            checkout_url TEXT,
            success_url TEXT NOT NULL,
            cancel_url TEXT NOT NULL,
            failure TEXT,                    -- why checkout could not start
            created_at TEXT NOT NULL,
            paid_at TEXT,
            expired_at TEXT,
            lot_id TEXT                      -- set once the balance actor granted the lot
        );
        CREATE INDEX topups_org ON topups(organization_id, created_at);
        CREATE INDEX topups_ungranted ON topups(organization_id) WHERE status = 'paid' AND lot_id IS NULL;
        CREATE UNIQUE INDEX topups_provider_ref ON topups(provider, provider_ref)
            WHERE provider_ref IS NOT NULL;
        """
    )

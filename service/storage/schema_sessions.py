"""Tables of browser sessions, sign-in flows with identity providers, linked identities and passwords."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("sessions")


@migrations()
def m001_sessions(db: Database) -> None:
    db.executescript(
        """
        -- A browser session: the cookie carries a random token, the row only its SHA-256
        -- digest. Idle and absolute expiry are service-clock epochs.
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            organization_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            last_seen_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        CREATE INDEX sessions_user ON sessions(user_id);
        CREATE INDEX sessions_org ON sessions(organization_id);
        -- A sign-in with an identity provider between the redirect and the callback. The
        -- key is the digest of `state`; the nonce is kept as a digest too; the PKCE verifier
        -- is derived from `state` with the node's secret, never stored.
        CREATE TABLE login_flows (
            state_hash TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            nonce_hash TEXT NOT NULL,
            next_path TEXT NOT NULL,
            invitation_hash TEXT,
            link_user_id TEXT,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        -- A person's account at an identity provider, linked on (issuer, subject) only.
        CREATE TABLE identities (
            issuer TEXT NOT NULL,
            subject TEXT NOT NULL,
            user_id TEXT NOT NULL,
            email TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (issuer, subject)
        );
        CREATE INDEX identities_user ON identities(user_id);
        """
    )


@migrations()
def m002_passwords(db: Database) -> None:
    db.executescript(
        """
        -- A person's password, one per email (shared by their memberships): argon2id only.
        CREATE TABLE passwords (
            email TEXT PRIMARY KEY COLLATE NOCASE,
            password_hash TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX users_email ON users(email COLLATE NOCASE);
        """
    )


@migrations()
def m003_identity(db: Database) -> None:
    """A person is one identity across organizations (docs/security-identity.md)."""
    db.executescript(
        """
        -- 0 while a person with several memberships has not picked one after login: the
        -- pages send them to the organization switcher first (never into one by accident).
        ALTER TABLE sessions ADD COLUMN org_chosen INTEGER NOT NULL DEFAULT 1;
        -- The password a self-service sign-up chose, held until its own confirmation link
        -- proves the mailbox: an unconfirmed sign-up sets no credential of the address.
        CREATE TABLE signup_passwords (
            organization_id TEXT PRIMARY KEY,
            email TEXT NOT NULL COLLATE NOCASE,
            password_hash TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        """
    )

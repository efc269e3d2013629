"""SQL of top-ups. Write functions take the batch's connection (they run inside
`Store.write`, called only by the top-up actor); read functions take a Store or a
connection."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from service.storage.rows import Row, Source

from .rows import all_rows, one

if TYPE_CHECKING:
    from service.storage.db import Store


COLUMNS = ("id, organization_id, created_by, credits_uc, amount_cents, currency, usd_per_credit, "
           "expiry_days, status, provider, provider_ref, checkout_url, success_url, cancel_url, failure, "
           "created_at, paid_at, expired_at, lot_id")


# -- writes --------------------------------------------------------------------------------
def insert(conn: sqlite3.Connection, row: Row) -> None:
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO topups ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))


def set_paid(conn: sqlite3.Connection, topup_id: str, paid_at: str) -> bool:
    """pending -> paid; False when the row was not pending (nothing changed)."""
    cur = conn.execute("UPDATE topups SET status = 'paid', paid_at = ? WHERE id = ? AND status = 'pending'",
                       (paid_at, topup_id))
    return cur.rowcount == 1


def set_expired(conn: sqlite3.Connection, topup_id: str, expired_at: str) -> bool:
    """pending -> expired; False when the row was not pending."""
    cur = conn.execute("UPDATE topups SET status = 'expired', expired_at = ? WHERE id = ? AND status = 'pending'",
                       (expired_at, topup_id))
    return cur.rowcount == 1


def set_lot(conn: sqlite3.Connection, topup_id: str, lot_id: str) -> None:
    conn.execute("UPDATE topups SET lot_id = ? WHERE id = ? AND lot_id IS NULL", (lot_id, topup_id))


# -- reads ---------------------------------------------------------------------------------
def get(conn_or_store: Source, topup_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {COLUMNS} FROM topups WHERE id = ?", (topup_id,))


def get_in_org(conn_or_store: Source, org_id: str, topup_id: str) -> Row | None:
    return one(conn_or_store, f"SELECT {COLUMNS} FROM topups WHERE id = ? AND organization_id = ?",
                (topup_id, org_id))


def list_for_org(store: Store, org_id: str, limit: int) -> list[Row]:
    """Newest first (insertion order breaks ties of equal timestamps)."""
    return store.all(f"SELECT {COLUMNS} FROM topups WHERE organization_id = ? "
                     "ORDER BY created_at DESC, rowid DESC LIMIT ?", (org_id, limit))


def ungranted(conn_or_store: Source, org_id: str) -> list[Row]:
    """Paid top-ups whose lot is not granted yet (a crash or a balance outage in between)."""
    sql = f"SELECT {COLUMNS} FROM topups WHERE organization_id = ? AND status = 'paid' AND lot_id IS NULL"
    return all_rows(conn_or_store, sql, (org_id,))


def orgs_with_ungranted(store: Store) -> list[str]:
    return [r["organization_id"] for r in
            store.all("SELECT DISTINCT organization_id FROM topups WHERE status = 'paid' AND lot_id IS NULL")]

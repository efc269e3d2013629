"""Idempotency-Key rows (see `service/idempotency.py`). Job submits and run starts keep them
in tables of their own (`idempotency_keys`, `product_run_keys`) with the same columns but the
created resource's id."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from service.storage.rows import Row, insert

if TYPE_CHECKING:
    from service.storage.db import Store


TABLES = {"idempotency_keys", "product_run_keys"}


def get(store: Store, table: str, org_id: str, key: str) -> Row | None:
    assert table in TABLES
    return store.one(f"SELECT * FROM {table} WHERE organization_id = ? AND key = ?", (org_id, key))


def put(conn: sqlite3.Connection, table: str, row: Row, *, older_than: float) -> None:
    """Insert the key's row, replacing one that expired (created before `older_than`).

    A live row with the same key makes this raise sqlite3.IntegrityError.
    """
    assert table in TABLES
    conn.execute(f"DELETE FROM {table} WHERE organization_id = ? AND key = ? AND created_at < ?",
                 (row["organization_id"], row["key"], older_than))
    insert(conn, table, row)


def purge(conn: sqlite3.Connection, table: str, older_than: float) -> int:
    assert table in TABLES
    return conn.execute(f"DELETE FROM {table} WHERE created_at < ?", (older_than,)).rowcount

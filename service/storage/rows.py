"""The one generic row insert every storage module uses."""

from __future__ import annotations

import sqlite3


def insert(conn: sqlite3.Connection, table: str, row: dict) -> None:
    """INSERT `row` (column -> value) into `table`; table names come from code, never input."""
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))

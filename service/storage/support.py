"""SQL of support tickets and replies. Write functions take the batch's connection (they run
inside `Store.write`); read functions take the Store (or a connection)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from service.storage.rows import Row, Source

from .rows import all_rows, one, scalar
from .rows import new_id as new_id  # the actors name it through this module

if TYPE_CHECKING:
    from service.storage.db import Store


TICKET_COLUMNS = ("id, organization_id, number, subject_line, type, priority, state, body, opened_by, "
                  "opened_by_email, created_at, updated_at")
REPLY_COLUMNS = "id, ticket_id, author_kind, author, user_id, body, created_at"


def next_number(conn: sqlite3.Connection, org_id: str) -> int:
    return int(scalar(conn, "SELECT COALESCE(MAX(number), 0) + 1 FROM support_tickets WHERE organization_id = ?",
                      (org_id,)))


def insert_ticket(conn: sqlite3.Connection, row: Row) -> None:
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO support_tickets ({cols}) VALUES ({', '.join('?' * len(row))})",
                 tuple(row.values()))


def insert_reply(conn: sqlite3.Connection, row: Row) -> None:
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO support_replies ({cols}) VALUES ({', '.join('?' * len(row))})",
                 tuple(row.values()))


def set_state(conn: sqlite3.Connection, ticket_id: str, state: str, now: str) -> None:
    conn.execute("UPDATE support_tickets SET state = ?, updated_at = ? WHERE id = ?", (state, now, ticket_id))


def touch(conn: sqlite3.Connection, ticket_id: str, now: str) -> None:
    conn.execute("UPDATE support_tickets SET updated_at = ? WHERE id = ?", (now, ticket_id))


def get_ticket(conn_or_store: Source, org_id: str | None, ticket_id: str) -> Row | None:
    """A ticket by id, within the organization (any organization when `org_id` is None)."""
    if org_id is None:
        return one(conn_or_store, f"SELECT {TICKET_COLUMNS} FROM support_tickets WHERE id = ?", (ticket_id,))
    return one(conn_or_store, f"SELECT {TICKET_COLUMNS} FROM support_tickets WHERE id = ? "
                "AND organization_id = ?", (ticket_id, org_id))


def list_tickets(store: Store, org_id: str | None, limit: int, state: str | None = None) -> list[Row]:
    where, params = [], []
    if org_id is not None:
        where.append("organization_id = ?")
        params.append(org_id)
    if state is not None:
        where.append("state = ?")
        params.append(state)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    return store.all(f"SELECT {TICKET_COLUMNS} FROM support_tickets {clause} "
                     "ORDER BY created_at DESC, rowid DESC LIMIT ?", (*params, limit))


def replies(conn_or_store: Source, ticket_id: str) -> list[Row]:
    sql = f"SELECT {REPLY_COLUMNS} FROM support_replies WHERE ticket_id = ? ORDER BY seq"
    return all_rows(conn_or_store, sql, (ticket_id,))



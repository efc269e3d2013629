"""The small helpers every storage module shares: one row, all rows, a new id, an insert,
and a read of many ids in chunks. Table and column names come from code, never input.

A function of a storage module takes either the writer's connection (inside a write) or
the Store (a read on a reader connection); `one` and `all_rows` accept both.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypeAlias, cast

if TYPE_CHECKING:
    from service.storage.db import Store


Connection: TypeAlias = sqlite3.Connection  # the writer's, inside `Store.write`: named for layers above
Row: TypeAlias = dict[str, Any]  # a row as the connections' row factory builds it (column -> value)
Params: TypeAlias = Sequence[Any] | dict[str, Any]
Source: TypeAlias = "sqlite3.Connection | Store"  # where a read runs: the writer's connection or the Store

IN_CHUNK = 500  # ids per `IN (...)`: well under SQLite's variable limit


def new_id() -> str:
    """A random (version 4) UUID string."""
    return str(uuid.uuid4())


def one(conn_or_store: Source, sql: str, params: Params = ()) -> Row | None:
    if isinstance(conn_or_store, sqlite3.Connection):
        return cast("Row | None", conn_or_store.execute(sql, params).fetchone())
    return conn_or_store.one(sql, params)


def all_rows(conn_or_store: Source, sql: str, params: Params = ()) -> list[Row]:
    if isinstance(conn_or_store, sqlite3.Connection):
        return cast("list[Row]", conn_or_store.execute(sql, params).fetchall())
    return conn_or_store.all(sql, params)


def scalar(conn: sqlite3.Connection, sql: str, params: Params = ()) -> Any:
    """The first column of the first row, or None (the writer's side of `Store.scalar`)."""
    row = one(conn, sql, params)
    return None if row is None else next(iter(row.values()))


def rows_in(conn_or_store: Source, sql: str, ids: Iterable[str]) -> list[Row]:
    """Rows of `sql`, whose `{marks}` stands for the placeholders of `IN ({marks})`, for
    every id, read `IN_CHUNK` ids at a time (each chunk in the query's own order)."""
    ids = list(ids)
    out: list[Row] = []
    for start in range(0, len(ids), IN_CHUNK):
        part = ids[start:start + IN_CHUNK]
        out += all_rows(conn_or_store, sql.format(marks=", ".join("?" * len(part))), part)
    return out


def insert(conn: sqlite3.Connection, table: str, row: Row) -> None:
    """INSERT `row` (column -> value) into `table`."""
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))

"""Apply every migration set before anything runs. Each feature owns one set (schema_*.py)."""

from __future__ import annotations

import importlib
import pkgutil
import sqlite3
from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

import service.storage as pkg


def migration_sets() -> list[Migrations]:
    """Every `schema_*` module's `migrations`, in module-name order (accounts first)."""
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("schema_"))
    names.sort(key=lambda n: (n != "schema_accounts", n))
    return [importlib.import_module(f"service.storage.{n}").migrations for n in names]


def apply_all(path: Path | str) -> None:
    """Migrate on a plain connection of its own (sqlite-utils expects tuple rows). After a
    migration of an existing database, VACUUM: a migration that rewrites stored values (key
    digests, sealed secrets) leaves the old bytes in free pages otherwise."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        db = Database(conn)
        before = _applied(db)
        for m in migration_sets():
            m.apply(db)
        if before and _applied(db) != before:
            vacuum(conn)
    finally:
        conn.close()


def vacuum(conn: sqlite3.Connection) -> None:
    """Rewrite the file without free pages, and empty the WAL."""
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _applied(db: Database) -> set[tuple[str, str]]:
    if "_sqlite_migrations" not in db.table_names():
        return set()
    return {(r[0], r[1]) for r in db.execute("SELECT migration_set, name FROM _sqlite_migrations").fetchall()}

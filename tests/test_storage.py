"""The group-commit writer: batching, per-write rollback, read-only readers, migrations."""

import sqlite3

import pytest
import trio

from service.storage.db import Store
from service.storage.migrate import apply_all


@pytest.fixture
async def store(nursery, tmp_path):
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    conn.close()
    s = Store(path, inline=False)
    await nursery.start(s.run)
    yield s
    s.close()


async def test_concurrent_writes_share_batches(store):
    async with trio.open_nursery() as n:
        for i in range(200):
            n.start_soon(store.write, lambda c, i=i: c.execute("INSERT INTO t (v) VALUES (?)", (str(i),)))
    assert store.scalar("SELECT count(*) FROM t") == 200
    assert store.writes == 200
    assert store.batches < 200


async def test_failing_write_rolls_back_alone(store):
    def ok(c):
        c.execute("INSERT INTO t (v) VALUES ('a')")
        return "done"

    def bad(c):
        c.execute("INSERT INTO t (v) VALUES ('b')")
        raise ValueError("nope")

    results = {}

    async def run(name, fn):
        try:
            results[name] = await store.write(fn)
        except ValueError as e:
            results[name] = e

    async with trio.open_nursery() as n:
        n.start_soon(run, "ok", ok)
        n.start_soon(run, "bad", bad)
    assert results["ok"] == "done" and isinstance(results["bad"], ValueError)
    assert [r["v"] for r in store.all("SELECT v FROM t")] == ["a"]


async def test_integrity_error_reaches_the_caller(store):
    await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('x')"))
    with pytest.raises(sqlite3.IntegrityError):
        await store.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('x')"))


async def test_reader_is_read_only(store):
    with pytest.raises(sqlite3.OperationalError):
        store.reader.execute("INSERT INTO t (v) VALUES ('z')")


def test_wal_and_full_sync(tmp_path):
    s = Store(tmp_path / "w.db")
    try:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"] == "wal"
        assert s.conn.execute("PRAGMA synchronous").fetchone()["synchronous"] == 2
    finally:
        s.close()


def test_migrations_apply_once(tmp_path):
    path = tmp_path / "m.db"
    apply_all(path)
    apply_all(path)
    conn = sqlite3.connect(path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"organizations", "users", "api_keys", "projects", "events", "emails"} <= names
    applied = conn.execute("SELECT count(*) FROM _sqlite_migrations WHERE name = 'm001_accounts'").fetchone()[0]
    assert applied == 1


async def test_write_after_writer_stopped_fails_cleanly(tmp_path):
    from service.storage.db import StorageClosed

    path = tmp_path / "c.db"
    sqlite3.connect(path).execute("CREATE TABLE t (v TEXT)").connection.close()
    s = Store(path, inline=False)
    async with trio.open_nursery() as n:
        await n.start(s.run)
        await s.write(lambda c: c.execute("INSERT INTO t VALUES ('a')"))
        n.cancel_scope.cancel()
    with pytest.raises(StorageClosed):
        await s.write(lambda c: c.execute("INSERT INTO t VALUES ('b')"))
    with trio.CancelScope() as scope:  # a task being torn down sees Cancelled, not an error
        scope.cancel()
        await s.write(lambda c: c.execute("INSERT INTO t VALUES ('c')"))
    assert scope.cancelled_caught
    s.close()


async def test_a_watch_is_called_after_the_commit_that_made_a_row_due(store):
    """The outbox wake-up: called once per commit that inserted a due row or updated one to
    due, after the COMMIT (the row is visible to the readers then), never for other writes."""
    await store.write(lambda c: c.execute("CREATE TABLE o (id INTEGER PRIMARY KEY, state TEXT)"))
    seen = []
    unwatch = await store.watch("o", "state", "due", lambda: seen.append(
        store.scalar("SELECT count(*) FROM o WHERE state = 'due'")))
    await store.write(lambda c: c.execute("INSERT INTO o (state) VALUES ('other')"))
    assert seen == []
    await store.write(lambda c: c.execute("INSERT INTO o (state) VALUES ('due')"))
    assert seen == [1]  # called after the commit: the reader already sees the row
    await store.write(lambda c: c.execute("UPDATE o SET state = 'sent' WHERE state = 'due'"))
    assert seen == [1]  # leaving the due state is not a wake-up
    await store.write(lambda c: c.execute("UPDATE o SET state = 'due' WHERE state = 'sent'"))
    assert seen == [1, 1]
    async with trio.open_nursery() as n:  # many writes, one of them due: one call
        for i in range(20):
            n.start_soon(store.write, lambda c: c.execute("INSERT INTO o (state) VALUES ('other')"))
        n.start_soon(store.write, lambda c: c.execute("INSERT INTO o (state) VALUES ('due')"))
    assert seen == [1, 1, 2]
    unwatch()
    await store.write(lambda c: c.execute("INSERT INTO o (state) VALUES ('due')"))
    assert seen == [1, 1, 2]


async def test_a_rolled_back_due_row_wakes_no_one(store):
    seen = []
    await store.watch("t", "v", "due", lambda: seen.append(1))

    def bad(c):
        c.execute("INSERT INTO t (v) VALUES ('due')")
        raise ValueError("nope")

    with pytest.raises(ValueError):
        await store.write(bad)
    assert seen == [] and store.scalar("SELECT count(*) FROM t") == 0
    with pytest.raises(ValueError, match="not a plain SQL name"):
        await store.watch("t; DROP TABLE t", "v", "due", lambda: None)

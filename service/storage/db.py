"""The one SQLite writer (group commit) and the read-only readers.

All writes go through `Store.write(fn)` (or `submit(fn)` then `wait(item)`, to queue a
write without waiting for it): `fn(conn)` runs inside a batch transaction with every other
write queued at the same moment, in submission order (one COMMIT, one fsync for the batch). Each
write gets its own SAVEPOINT, so one failing write rolls back alone and its caller gets
the exception; the rest of the batch commits. If the COMMIT itself fails, every caller of
the batch gets the error and nothing of it is applied.

The writer runs batches in a worker thread by default (the event loop keeps serving during
fsync). Fast path at low load: when no other task is runnable and recent commits averaged
under 2 ms, a lone write commits on the trio thread (`submit` commits it at once when no
write is queued or in flight, so submission order holds; the writer task does so for a batch
of one), which
saves the task and thread hops and cannot delay other work by more than one fast fsync. `inline=True` runs every batch
on the trio thread: tests with trio's autojump clock need that, because autojump treats a
thread as idle time.

Readers: one read-only connection used from the trio thread; queries are short and
indexed, and WAL lets them run while the writer commits.

Outboxes (`watch`): a table's dispatcher is called after each COMMIT whose batch put a
row into the due state (a TEMP trigger on the writer connection notes the table while the
batch runs), so a writer never has to wake a dispatcher itself and nothing polls. A write
rolled back to its savepoint may leave the note: that costs one empty look, never a miss.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import trio

from service.threads import prompt
from service.storage.rows import Params, Row

_RUN_CONTEXT: Any  # trio's per-thread run context (see tasks_runnable), or None
try:
    from trio._core import _run_context

    _RUN_CONTEXT = _run_context.GLOBAL_RUN_CONTEXT
except ImportError:
    _RUN_CONTEXT = None

T = TypeVar("T")  # what a write function returns, handed back after its COMMIT

log = logging.getLogger(__name__)

MAX_BATCH = 512


def tasks_runnable() -> int:
    """How many tasks wait to run on this thread's trio loop: trio's own `tasks_runnable`
    figure, the length of its run queue. `trio.lowlevel.current_statistics()` gives it too,
    but first counts the waiters of every registered socket: 31-46 µs a call with 1,000
    sockets waiting (event streams), 177 µs with 5,000, and the fast path asks on every
    write. Read from trio's run context, with the public call should that ever move
    (tests/test_storage_runnable.py checks they agree)."""
    runq = getattr(getattr(_RUN_CONTEXT, "runner", None), "runq", None)
    if runq is None:
        return trio.lowlevel.current_statistics().tasks_runnable
    return len(runq)


FAST_PATH_MAX_COMMIT = 0.002  # seconds: above this average the fast path is off (slow disk)


def dict_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return {d[0]: v for d, v in zip(cursor.description, row)}


def connect(path: Path | str, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                               isolation_level=None)
    else:
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.row_factory = dict_factory
    return conn


class StorageClosed(RuntimeError):
    """A write arrived after the writer task stopped."""


class _Write:
    __slots__ = ("fn", "done", "result", "error")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        self.fn = fn
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Store:
    """Owns the writer connection, its batching task, and the reader connection."""

    def __init__(self, path: Path | str, *, inline: bool = False) -> None:
        self.path = Path(path)
        self.inline = inline
        self.conn = connect(self.path)
        self.reader = connect(self.path, readonly=True)
        self._send, self._recv = trio.open_memory_channel[_Write](float("inf"))
        self._limiter = prompt(trio.CapacityLimiter(1))  # one commit at a time, taken without a step when free
        self.batches = 0
        self.writes = 0
        self.broken: BaseException | None = None
        self._stopped = False
        self.commit_ewma = 0.0  # seconds, moving average of batch commit time
        self._queued = 0        # writes submitted to the writer task and not yet committed
        self._watchers: dict[str, list[Callable[[], None]]] = {}  # table -> called after a commit
        self._written: set[str] = set()  # watched tables that got a due row in this batch
        self.conn.create_function("genservice_due", 1, self._written.add)

    # -- outbox watches ------------------------------------------------------
    async def watch(self, table: str, column: str, due: str | int,
                    callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` after every COMMIT that inserted a row of `table` with `column` =
        `due`, or updated one to it (one due state per table: the first watch sets it). It
        runs in the committing thread (the writer's worker or the trio thread), so it must be
        thread-safe and quick. The triggers are made by a write of their own, never beside
        a batch in flight. Returns the un-watch."""
        for name in (table, column):
            if not re.fullmatch(r"[a-z_]+", name):
                raise ValueError(f"not a plain SQL name: {name!r}")
        value = repr(due) if isinstance(due, int) else "'" + due.replace("'", "''") + "'"

        def triggers(conn: sqlite3.Connection) -> None:
            conn.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS genservice_{table}_insert AFTER INSERT "
                         f"ON main.{table} WHEN NEW.{column} = {value} "
                         f"BEGIN SELECT genservice_due('{table}'); END")
            conn.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS genservice_{table}_update AFTER UPDATE "
                         f"OF {column} ON main.{table} WHEN NEW.{column} = {value} AND "
                         f"OLD.{column} IS NOT {value} BEGIN SELECT genservice_due('{table}'); END")

        if table not in self._watchers:
            await self.write(triggers)
        callbacks = self._watchers.setdefault(table, [])
        callbacks.append(callback)
        return lambda: callbacks.remove(callback) if callback in callbacks else None

    def _after_commit(self) -> None:
        written = self._written.copy()
        self._written.clear()
        for table in written:
            for callback in list(self._watchers.get(table, ())):
                callback()

    # -- reads ---------------------------------------------------------------
    def all(self, sql: str, params: Params = ()) -> list[Row]:
        return cast("list[Row]", self.reader.execute(sql, params).fetchall())

    def one(self, sql: str, params: Params = ()) -> Row | None:
        return cast("Row | None", self.reader.execute(sql, params).fetchone())

    def scalar(self, sql: str, params: Params = ()) -> Any:
        row = self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    # -- writes --------------------------------------------------------------
    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` in the next batch transaction; return its result after COMMIT."""
        return cast(T, await self.wait(self.submit(fn)))

    def submit(self, fn: Callable[[sqlite3.Connection], Any]) -> _Write:
        """Queue `fn` without waiting (`write` = `wait(submit(fn))`). Writes run in the order
        they are submitted, so a caller may submit its next write while one is in flight."""
        if self.broken is not None:
            raise RuntimeError("storage is broken") from self.broken
        item = _Write(fn)
        if self._stopped:
            return self._closed(item)
        if self.fast_path_open():  # no write queued or in flight, nothing else to run: commit now
            return self._commit_now(item)
        try:
            self._send.send_nowait(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return self._closed(item)
        self._queued += 1
        return item

    def commit_now(self, fn: Callable[[sqlite3.Connection], Any]) -> _Write | None:
        """Commit `fn` at once on this thread, for a caller that has just seen
        `fast_path_open()` (with no checkpoint since); None, with nothing done, if a write
        is queued or in flight meanwhile (order first) or the store has stopped. The caller
        knows the outcome before it awaits anything (the balance actor decides
        optimistically on that)."""
        if self._queued or self._stopped or self.broken is not None:
            return None
        return self._commit_now(_Write(fn))

    def _commit_now(self, item: _Write) -> _Write:
        self._commit([item])
        item.done.set()
        return item

    def fast_path_open(self) -> bool:
        """A write submitted now would commit at once on this thread: no write is queued
        or in flight, the store is running, and the fast path's conditions hold."""
        return (not self._queued and not self._stopped and self.broken is None
                and self._fast_path_ok())

    @staticmethod
    def _closed(item: _Write) -> _Write:
        """The writer has stopped (shutdown): fail through `wait`, whose checkpoint turns this
        into Cancelled for a task that is itself being torn down."""
        item.error = StorageClosed("storage is closed")
        item.done.set()
        return item

    async def wait(self, item: _Write) -> Any:
        """The result of a submitted write after its batch's COMMIT, or its error."""
        await item.done.wait()
        if item.error is not None:
            raise item.error
        return item.result

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task: take what is queued, commit it as one batch, wake the writers."""
        task_status.started()
        try:
            await self._run_batches()
        finally:
            self._stopped = True

    async def _run_batches(self) -> None:
        async with self._recv:
            while True:
                first = await self._recv.receive()
                batch = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except trio.WouldBlock:
                        break
                try:
                    if self.inline or (len(batch) == 1 and self._fast_path_ok()):
                        self._commit(batch)
                    else:
                        await trio.to_thread.run_sync(self._commit, batch, limiter=self._limiter)
                finally:
                    self._queued -= len(batch)
                for item in batch:
                    item.done.set()

    def _fast_path_ok(self) -> bool:
        """A lone write may commit on the trio thread when no other task is runnable (the
        loop has nothing else to do during the fsync) and recent commits were fast."""
        return self.commit_ewma < FAST_PATH_MAX_COMMIT and tasks_runnable() == 0

    def _commit(self, batch: list[_Write]) -> None:
        started = time.perf_counter()
        conn = self.conn
        try:
            self._written.clear()
            conn.execute("BEGIN IMMEDIATE")
            if len(batch) == 1:  # a lone write needs no savepoint: its failure rolls back all
                item = batch[0]
                try:
                    item.result = item.fn(conn)
                except BaseException as e:  # noqa: BLE001 - delivered to the caller
                    conn.execute("ROLLBACK")
                    self._written.clear()
                    item.error = e
                else:
                    conn.execute("COMMIT")
            else:
                for item in batch:
                    conn.execute("SAVEPOINT w")
                    try:
                        item.result = item.fn(conn)
                    except BaseException as e:  # noqa: BLE001 - delivered to the caller
                        conn.execute("ROLLBACK TO w")
                        item.error = e
                    conn.execute("RELEASE w")
                conn.execute("COMMIT")
        except sqlite3.Error as e:
            self._written.clear()
            log.exception("batch commit failed")
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for item in batch:
                item.error = e
                item.result = None
            if isinstance(e, (sqlite3.DatabaseError,)) and "malformed" in str(e):
                self.broken = e
        self.batches += 1
        self.writes += len(batch)
        if self._written:
            self._after_commit()
        self.commit_ewma += (time.perf_counter() - started - self.commit_ewma) * 0.1

    def close(self) -> None:
        self.conn.close()
        self.reader.close()

    def leave_checkpoints_to_replica(self) -> None:
        """Litestream replicates the WAL: the writer stops checkpointing on its own, so no
        frame reaches the database file before Litestream has copied it (service/replica.py)."""
        self.conn.execute("PRAGMA wal_autocheckpoint=0")

    def checkpoint(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

"""The shared outbox dispatcher on its own (service/outbox.py), with a made-up source over a
real store: woken by the commit, restarted in place after failed claims and recoveries,
with pauses that grow while failures repeat (trio's autojump clock keeps them instant)."""

from __future__ import annotations

import sqlite3

import pytest
import trio
import trio.testing

from service.clock import Clock
from service.outbox import RESTART_PAUSE, Dispatcher
from service.storage.db import Store
from waiting import wait_until


class FlakySource:
    """Rows of table `o` in state 'due' are sent; claims and recoveries fail on demand."""

    name = "test outbox"
    crashpoint = "mail_sending"  # any known point: never armed here
    concurrency = 4
    watch: tuple[str, str, str | int] = ("o", "state", "due")

    def __init__(self) -> None:
        self.failing_claims = 0
        self.failing_recoveries = 0
        self.recoveries = 0
        self.sent: list[int] = []

    async def recover(self, store: Store, now_iso: str) -> str | None:
        if self.failing_recoveries:
            self.failing_recoveries -= 1
            raise sqlite3.OperationalError("disk I/O error")
        self.recoveries += 1
        await store.write(lambda c: c.execute("UPDATE o SET state = 'unknown' WHERE state = 'sending'"))
        return None

    async def claim(self, store: Store, now: float, now_iso: str, limit: int) -> list[dict]:
        if self.failing_claims:
            self.failing_claims -= 1
            raise sqlite3.OperationalError("disk I/O error")

        def tx(conn):
            rows = conn.execute("SELECT id FROM o WHERE state = 'due' ORDER BY id LIMIT ?", (limit,)).fetchall()
            conn.executemany("UPDATE o SET state = 'sending' WHERE id = ?", [(r["id"],) for r in rows])
            return rows

        return await store.write(tx)

    def next_due(self) -> float | None:
        return None

    def paused(self) -> bool:
        return False

    async def deliver(self, row: dict) -> str:
        self.sent.append(row["id"])
        return "done"

    async def record(self, store: Store, row: dict, outcome: str, now: float, now_iso: str) -> None:
        await store.write(lambda c: c.execute("UPDATE o SET state = ? WHERE id = ?", (outcome, row["id"])))

    def crashed(self, row: dict, error: Exception) -> str:
        return "crashed"


@pytest.fixture
async def outbox(nursery, tmp_path):
    conn = sqlite3.connect(tmp_path / "o.db")
    conn.execute("CREATE TABLE o (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")
    conn.close()
    store = Store(tmp_path / "o.db", inline=True)
    await nursery.start(store.run)
    source = FlakySource()
    dispatcher = Dispatcher(store, Clock(start=1_790_000_000.0), source)
    await nursery.start(dispatcher.run)
    await dispatcher.recover()
    await trio.testing.wait_all_tasks_blocked()  # it has looked once and sleeps: only a commit can wake it
    yield store, source, dispatcher
    nursery.cancel_scope.cancel()


async def add(store: Store, n: int) -> None:
    await store.write(lambda c: c.executemany("INSERT INTO o (state) VALUES ('due')", [()] * n))


async def until(check) -> None:
    await wait_until(check, 60)


async def test_the_commit_wakes_the_dispatcher_and_every_row_goes_once(outbox, autojump_clock):
    store, source, dispatcher = outbox
    await add(store, 10)  # more than `concurrency`: taken as slots free up
    await until(lambda: dispatcher.sent == 10)
    assert sorted(source.sent) == list(range(1, 11))
    assert store.all("SELECT DISTINCT state FROM o") == [{"state": "done"}]
    looks = dispatcher.looks
    await trio.sleep(3600)  # an hour with nothing written: no look at the table
    assert dispatcher.looks == looks and dispatcher.in_flight == 0


async def test_failed_claims_and_recoveries_restart_it_with_growing_pauses(outbox, autojump_clock):
    store, source, dispatcher = outbox
    source.failing_claims, source.failing_recoveries = 2, 1
    started = trio.current_time()
    await add(store, 1)
    await until(lambda: dispatcher.sent == 1)
    # claim fails, pause 1; recovery fails, pause 2; claim fails again, pause 3; then it works
    assert dispatcher.restarts == 3 and source.recoveries == 1 + 2
    assert trio.current_time() - started >= sum(RESTART_PAUSE)
    assert source.sent == [1]
    # the next failure, after a claim went through, pauses briefly again
    source.failing_claims = 1
    started = trio.current_time()
    await add(store, 1)
    await until(lambda: dispatcher.sent == 2)
    assert dispatcher.restarts == 4 and source.sent == [1, 2]
    assert RESTART_PAUSE[0] <= trio.current_time() - started < RESTART_PAUSE[1]


async def test_a_rolled_back_row_is_never_sent(outbox, autojump_clock):
    store, source, dispatcher = outbox

    def bad(conn):
        conn.execute("INSERT INTO o (state) VALUES ('due')")
        raise ValueError("the change that caused it failed")

    with pytest.raises(ValueError, match="the change that caused it failed"):
        await store.write(bad)
    await add(store, 1)
    await until(lambda: dispatcher.sent == 1)
    assert source.sent == [1] and store.scalar("SELECT count(*) FROM o") == 1

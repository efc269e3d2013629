"""The shared outbox dispatcher: a failed write of one outcome must not stop it."""

from __future__ import annotations

import sqlite3

import trio
import trio.testing

from test_outbox import FlakySource, add, outbox, until  # noqa: F401 - `outbox` is a fixture


async def test_a_failed_outcome_write_does_not_stop_the_dispatcher(outbox, autojump_clock, monkeypatch):
    """A disk error while recording one outcome used to escape the delivery task and end the
    dispatcher (and the node with it). The row stays in flight, so the next recovery records
    it unknown (never sent twice), and every later row is still sent."""
    store, source, dispatcher = outbox
    record = FlakySource.record
    failing = [1]

    async def flaky_record(self, store, row, outcome, now, now_iso):
        if row["id"] in failing:
            failing.remove(row["id"])
            raise sqlite3.OperationalError("disk I/O error")
        await record(self, store, row, outcome, now, now_iso)

    monkeypatch.setattr(FlakySource, "record", flaky_record)
    await add(store, 1)
    await until(lambda: source.sent == [1] and dispatcher.in_flight == 0)
    await add(store, 3)
    await until(lambda: sorted(source.sent) == [1, 2, 3, 4] and dispatcher.in_flight == 0)
    states = lambda: [(r["id"], r["state"]) for r in store.all("SELECT id, state FROM o ORDER BY id")]  # noqa: E731
    assert states() == [(1, "sending"), (2, "done"), (3, "done"), (4, "done")]
    await dispatcher.recover()
    await trio.testing.wait_all_tasks_blocked()
    assert states() == [(1, "unknown"), (2, "done"), (3, "done"), (4, "done")]
    assert sorted(source.sent) == [1, 2, 3, 4]  # each once, row 1 not again

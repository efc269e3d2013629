"""`tasks_runnable()` (service/storage/db.py), read from trio's run queue for the store's
fast path, is the figure `trio.lowlevel.current_statistics()` gives, with no task, some
tasks and many tasks waiting to run."""

from __future__ import annotations

import trio

from service.storage import db


async def test_the_run_queue_length_is_trios_own_figure():
    public = lambda: trio.lowlevel.current_statistics().tasks_runnable  # noqa: E731
    assert db._RUN_CONTEXT is not None  # the installed trio: the fast read, not the fallback
    await trio.testing.wait_all_tasks_blocked()
    assert db.tasks_runnable() == public() == 0
    async with trio.open_nursery() as n:
        for k in range(1, 40):
            n.start_soon(trio.lowlevel.checkpoint)
            assert db.tasks_runnable() == public() == k
    assert db.tasks_runnable() == public()


async def test_without_trios_run_context_the_public_figure_is_used(monkeypatch):
    monkeypatch.setattr(db, "_RUN_CONTEXT", None)
    async with trio.open_nursery() as n:
        for _ in range(3):
            n.start_soon(trio.lowlevel.checkpoint)
        assert db.tasks_runnable() == 3

"""The actor runtime when an actor fails: every ask is answered at once
(never left for its timeout), a handled message keeps its reply, and an unhandled one is
handled by the restarted actor, in order (never lost)."""

from __future__ import annotations

import trio
import trio.testing

from service.actors.runtime import Actor, Deferred, Registry
from service.clock import Clock


class Pipelined(Actor):
    """Like the balance actor: each batch is answered after its commit (`Deferred`), at most
    two in flight; the next batch waits for a free slot inside `handle_batch`. The commit of
    a batch holding "bad" fails and so does the reload after it: its wait raises."""

    loads = 0

    def __init__(self, key):
        self.gate = trio.Event()
        self.slots = trio.Semaphore(2)

    async def load(self):
        Pipelined.loads += 1

    async def handle_batch(self, msgs):
        await self.slots.acquire()
        gate = self.gate

        async def committed():
            await gate.wait()
            if "bad" in msgs:
                raise RuntimeError("commit failed, and reading the database back failed too")
            self.slots.release()
            return [f"{m} ok" for m in msgs]

        return Deferred(committed)


async def test_a_deferred_batch_that_crashes_fails_the_batches_behind_it_at_once(nursery, autojump_clock):
    """Batch 1's wait raises with batch 2 queued behind it for the answerer and batch 3 in
    `handle_batch` (waiting for a slot). All three asks answer ActorGone at once (not
    AskTimeout when their timeout runs out), and the restarted actor answers."""
    Pipelined.loads = 0
    reg = Registry("pipelined", Pipelined, Clock(start=0.0))
    await nursery.start(reg.run)
    got: dict[str, object] = {}

    async def ask(msg):
        try:
            got[msg] = await reg.ask("a", msg, timeout=30)
        except Exception as e:  # noqa: BLE001
            got[msg] = type(e).__name__

    async with trio.open_nursery() as n:
        for msg in ("bad", "second", "third"):
            n.start_soon(ask, msg)
            await trio.testing.wait_all_tasks_blocked()  # each its own batch
        t0 = trio.current_time()
        reg.peek("a").gate.set()
    assert got == {"bad": "ActorGone", "second": "ActorGone", "third": "ActorGone"}
    assert trio.current_time() - t0 < 1
    assert Pipelined.loads == 2
    reg.peek("a").gate.set()
    assert await reg.ask("a", "after") == "after ok"


class OneAtATime(Actor):
    """The default `handle_batch` (one message at a time, as the job, run and accounts
    actors): each message is a write of its own, committed when its handler returns."""

    log: list[str]
    gate: trio.Event

    async def handle(self, msg):
        if msg == "wait":  # busy meanwhile: what arrives forms the next batch
            await OneAtATime.gate.wait()
        if msg == "boom":  # e.g. its commit failed: disk full
            raise RuntimeError("database or disk is full")
        OneAtATime.log.append(msg)
        return f"{msg} done"


async def test_a_crash_inside_a_batch_keeps_the_replies_before_it_and_hands_the_rest_on(nursery, autojump_clock):
    """A burst [a, boom, c, tell d, e] taken as one batch: `a` was handled (committed) before
    `boom` crashed, so it keeps its reply (not ActorGone for a write that stands); `boom`
    answers ActorGone; the messages after it are handled once, in order, by the restarted
    actor (a tell is not lost, an ask is not failed for another's crash)."""
    OneAtATime.log, OneAtATime.gate = [], trio.Event()
    reg = Registry("one-at-a-time", lambda k: OneAtATime(), Clock(start=0.0))
    await nursery.start(reg.run)
    got: dict[str, object] = {}

    async def ask(msg):
        try:
            got[msg] = await reg.ask("x", msg)
        except Exception as e:  # noqa: BLE001
            got[msg] = type(e).__name__

    async with trio.open_nursery() as n:
        for msg in ("wait", "a", "boom", "c", "d", "e"):
            if msg == "d":
                reg.tell("x", msg)
            else:
                n.start_soon(ask, msg)
            await trio.testing.wait_all_tasks_blocked()
        OneAtATime.gate.set()
    assert got == {"wait": "wait done", "a": "a done", "boom": "ActorGone", "c": "c done", "e": "e done"}
    assert OneAtATime.log == ["wait", "a", "c", "d", "e"]
    assert await reg.ask("x", "after") == "after done"

"""The actor runtime: ask/tell, batching, deadlines on the service clock, crash and restart
limit, actors that finish, and replies to callers that went away."""

import pytest
import trio
import trio.testing

from service.actors.runtime import MAX_RESTARTS, Actor, Deferred, Registry
from service.clock import Clock
from service.errors import ActorGone, AskTimeout, NotFound


class Counter(Actor):
    loads = 0
    store: dict = {}

    def __init__(self, key):
        self.key = key

    async def load(self):
        Counter.loads += 1
        self.n = Counter.store.get(self.key, 0)
        self.batches = []

    async def handle_batch(self, msgs):
        self.batches.append(len(msgs))
        out = []
        for m in msgs:
            if m == "boom":
                raise RuntimeError("crash")
            if m == "missing":
                from service.actors.runtime import fail
                out.append(fail(NotFound("nothing here")))
                continue
            if m == "slow":
                await trio.sleep(100)
            self.n += 1
            Counter.store[self.key] = self.n
            out.append((self.n, list(self.batches)))
        return out


@pytest.fixture
async def registry(nursery):
    Counter.loads = 0
    Counter.store = {}
    reg = Registry("counters", Counter, Clock(start=1000.0))
    await nursery.start(reg.run)
    return reg


async def test_ask_and_tell(registry):
    assert (await registry.ask("a", "inc"))[0] == 1
    registry.tell("a", "inc")
    assert (await registry.ask("a", "inc"))[0] == 3
    assert (await registry.ask("b", "inc"))[0] == 1


async def test_queued_messages_form_one_batch(registry):
    results = []

    async def one():
        results.append(await registry.ask("a", "inc"))

    async with trio.open_nursery() as n:
        for _ in range(10):
            n.start_soon(one)
    assert max(batch for _, batches in results for batch in batches) > 1
    assert sorted(r[0] for r in results) == list(range(1, 11))


async def test_service_error_reply_is_raised(registry):
    with pytest.raises(NotFound):
        await registry.ask("a", "missing")
    assert (await registry.ask("a", "inc"))[0] == 1


async def test_crash_reloads_from_storage(registry):
    await registry.ask("a", "inc")
    with pytest.raises(ActorGone):
        await registry.ask("a", "boom")
    assert (await registry.ask("a", "inc"))[0] == 2  # reloaded state, not lost
    assert Counter.loads == 2


async def test_restart_limit_keeps_actor_down(registry):
    for _ in range(MAX_RESTARTS + 1):
        with pytest.raises(ActorGone):
            await registry.ask("a", "boom")
    with pytest.raises(ActorGone):
        await registry.ask("a", "inc")
    assert (await registry.ask("b", "inc"))[0] == 1  # the node keeps running


async def test_ask_timeout(registry, autojump_clock):
    t0 = trio.current_time()
    with pytest.raises(AskTimeout):
        await registry.ask("a", "slow", timeout=5)
    assert trio.current_time() - t0 == pytest.approx(5)


async def test_ask_timeouts_fire_at_their_own_deadlines(registry, nursery, autojump_clock):
    """One task times asks out: a shorter timeout asked after a longer one still fires first."""
    t0, fired = trio.current_time(), {}

    async def ask(key, timeout):
        try:
            await registry.ask(key, "slow", timeout=timeout)
        except AskTimeout:
            fired[key] = trio.current_time() - t0

    async with trio.open_nursery() as n:
        n.start_soon(ask, "long", 30)
        await trio.sleep(1)
        n.start_soon(ask, "short", 3)
    assert fired == {"long": pytest.approx(30), "short": pytest.approx(4)}
    assert (await registry.ask("a", "inc"))[0] == 1  # answered asks are not timed out
    await trio.sleep(100)
    assert (await registry.ask("a", "inc"))[0] == 2


class Timer(Actor):
    fired: list = []

    def __init__(self, key, clock):
        self.clock = clock
        self.deadline = 2000.0

    def next_deadline(self):
        return self.deadline

    async def on_deadline(self):
        Timer.fired.append(self.clock.now())
        self.deadline = None

    async def handle(self, msg):
        return msg


async def test_deadline_fires_on_service_time(nursery, autojump_clock):
    clock = Clock(start=1000.0)
    Timer.fired = []
    reg = Registry("timers", lambda k: Timer(k, clock), clock)
    await nursery.start(reg.run)
    await reg.ask("t", "hi")
    await trio.sleep(999)
    assert Timer.fired == []
    await trio.sleep(1)
    await trio.sleep(0.001)
    assert Timer.fired and Timer.fired[0] == pytest.approx(2000.0)


async def test_clock_advance_wakes_actor_at_once(nursery, autojump_clock):
    clock = Clock(start=1000.0)
    Timer.fired = []
    reg = Registry("timers", lambda k: Timer(k, clock), clock)
    await nursery.start(reg.run)
    await reg.ask("t", "hi")
    before = trio.current_time()
    clock.advance(5000)
    await trio.sleep(0.001)
    assert len(Timer.fired) == 1 and trio.current_time() - before < 1


class Movable(Actor):
    """Its deadline is whatever the last message set."""

    def __init__(self, clock):
        self.clock = clock
        self.deadline = None
        self.fired = []

    def next_deadline(self):
        return self.deadline

    async def on_deadline(self):
        self.fired.append(self.clock.now())
        self.deadline = None

    async def handle(self, msg):
        if msg == "fired":
            return self.fired
        self.deadline = msg
        return None


async def test_deadline_moved_by_a_message_fires_at_the_new_time_only(nursery, autojump_clock):
    clock = Clock(start=1000.0)
    reg = Registry("movable", lambda k: Movable(clock), clock)
    await nursery.start(reg.run)
    await reg.ask("m", 1100.0)
    await trio.sleep(10)
    await reg.ask("m", 1050.0)   # earlier: fires at 1050, not 1100
    await trio.sleep(35)
    assert await reg.ask("m", "fired") == []
    await trio.sleep(10)
    assert await reg.ask("m", "fired") == [pytest.approx(1050.0)]
    await reg.ask("m", 1080.0)
    await reg.ask("m", 1200.0)   # later: nothing at 1080
    await trio.sleep(100)
    assert await reg.ask("m", "fired") == [pytest.approx(1050.0)]
    clock.advance(100)           # the test clock jumps past it: fires at once
    await trio.sleep(0.001)
    assert len(await reg.ask("m", "fired")) == 2


async def test_many_actors_deadlines_fire_each_at_its_own_time(nursery, autojump_clock):
    clock = Clock(start=1000.0)
    reg = Registry("movable", lambda k: Movable(clock), clock)
    await nursery.start(reg.run)
    for i in range(50):
        await reg.ask(f"m{i}", 1100.0 + 50 - i)  # set in the reverse of the order they fire
    await reg.ask("m7", None)  # one cleared: never fires
    await trio.sleep(200)
    for i in range(50):
        assert await reg.ask(f"m{i}", "fired") == ([] if i == 7 else [pytest.approx(1100.0 + 50 - i)])


async def test_a_deadline_moved_many_times_keeps_the_timer_heap_small(nursery, autojump_clock):
    clock = Clock(start=1000.0)
    reg = Registry("movable", lambda k: Movable(clock), clock)
    await nursery.start(reg.run)
    for k in range(5000):
        await reg.ask("m", 2000.0 + k)  # each move leaves an outdated entry behind
    assert len(reg._alarms._heap) <= 2 * 1 + 64 + 1
    await trio.sleep(6000)
    assert await reg.ask("m", "fired") == [pytest.approx(6999.0)]


class Spawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def test_an_actor_with_a_deadline_that_never_defers_starts_one_task(nursery, autojump_clock):
    clock = Clock(start=1000.0)
    reg = Registry("movable", lambda k: Movable(clock), clock)
    await nursery.start(reg.run)
    spawned = Spawned()
    trio.lowlevel.add_instrument(spawned)
    try:
        await reg.ask("m", 1010.0)
        await trio.sleep(20)
        assert await reg.ask("m", "fired") == [pytest.approx(1010.0)]
    finally:
        trio.lowlevel.remove_instrument(spawned)
    assert len(spawned.names) == 1, spawned.names  # the actor's supervisor alone


class Once(Actor):
    async def handle(self, msg):
        self.done = True
        return "ok"


async def test_finished_actor_stops_and_respawns(nursery):
    reg = Registry("once", lambda k: Once(), Clock(start=0.0))
    await nursery.start(reg.run)
    assert await reg.ask("x", 1) == "ok"
    await trio.sleep(0.01)
    assert reg.keys() == []
    assert await reg.ask("x", 2) == "ok"


async def test_reply_to_departed_caller_is_dropped(registry, autojump_clock):
    with trio.move_on_after(1):
        await registry.ask("a", "slow", timeout=50)
    await trio.sleep(200)  # the actor replies to nobody, without raising
    assert (await registry.ask("a", "inc"))[0] == 2


class Later(Actor):
    """Every batch is answered later, by a wait that never ends."""

    async def handle_batch(self, msgs):
        return Deferred(trio.sleep_forever)


class Committing(Actor):
    """Answers each batch after a wait of its own (a commit), the later batches' waits shorter."""

    def __init__(self, key):
        self.waits = [0.3, 0.2, 0.1]

    async def handle_batch(self, msgs):
        wait = self.waits.pop(0)

        async def committed():
            await trio.sleep(wait)
            return [f"{m} after {wait}" for m in msgs]

        return Deferred(committed)


async def test_deferred_batches_are_answered_in_order_by_one_answerer_started_with_the_first(nursery, autojump_clock):
    reg = Registry("committing", Committing, Clock(start=0.0))
    await nursery.start(reg.run)
    spawned = Spawned()
    trio.lowlevel.add_instrument(spawned)
    answered: list[str] = []

    async def ask(msg):
        answered.append(await reg.ask("a", msg))

    try:
        async with trio.open_nursery() as n:
            for msg in ("one", "two", "three"):
                n.start_soon(ask, msg)
                await trio.sleep(0.01)  # each its own batch
    finally:
        trio.lowlevel.remove_instrument(spawned)
    assert answered == ["one after 0.3", "two after 0.2", "three after 0.1"]  # in order, not by wait
    assert len([n for n in spawned.names if "_answer_later" in n]) == 1, spawned.names


async def test_cancelled_while_a_burst_is_handed_over_stops_cleanly():
    """Teardown race: the loop has been handed a message (no longer cancellable there) when
    the registry is cancelled and the answerer stops first. The loop must not crash with
    BrokenResourceError on the closed answer queue; it stops with the cancellation."""
    reg = Registry("later", lambda k: Later(), Clock(start=0.0))
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as n:
            await n.start(reg.run)
            reg.tell("a", 1)                         # answered later: the answerer waits on it
            await trio.testing.wait_all_tasks_blocked()
            reg.tell("a", 2)                         # handed to the parked loop ...
            scope.cancel()                           # ... and everything is cancelled at once
    assert scope.cancelled_caught


class OneByOne(Actor):
    """Handles each message alone and without awaiting: the loop's own steps are all it takes."""

    def __init__(self, key):
        self.key, self.n = key, 0

    async def handle_batch(self, msgs):
        self.n += len(msgs)
        return [self.n for _ in msgs]

    def batch_limit(self, waiting):
        return 1


class StepsOfActors(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task) -> None:
        if "_supervise" in task.name:
            self.steps += 1


async def test_waiting_messages_are_taken_without_a_step_each_and_the_loop_still_yields(nursery):
    from service.actors.runtime import YIELD_EVERY

    reg = Registry("one-by-one", OneByOne, Clock(start=1000.0))
    await nursery.start(reg.run)
    assert await reg.ask("a", "x") == 1  # spawned, loaded, waiting for mail
    for _ in range(3 * YIELD_EVERY):
        reg.tell("a", "x")
    counted = StepsOfActors()
    trio.lowlevel.add_instrument(counted)
    try:
        assert await reg.ask("a", "x") == 3 * YIELD_EVERY + 2
    finally:
        trio.lowlevel.remove_instrument(counted)
    # trio's receive took a step for each waiting message (194); now one every YIELD_EVERY
    assert 3 <= counted.steps <= 3 + 3, counted.steps

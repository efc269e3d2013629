"""Actors: a bounded mailbox, ask/tell, a supervised loop, and a registry that spawns by key.

(Over 400 lines on purpose: the mailbox, the ask slot, the loop and its supervisor share
their invariants about who answers an ask and when; split, each half would need the other
to be read.)

An actor is a subclass of `Actor`. Its loop waits for the next messages or its next
deadline (service time), whichever comes first; a test-clock advance wakes it at once.
It takes every message waiting in the mailbox as one batch (`handle_batch`), so an actor
that persists can commit the whole batch at once and reply after the commit.

`handle_batch` may instead return a `Deferred`: the loop then goes on with the next batch
while the deferred completes (a commit in flight), and one answerer task per actor (started
with its first deferred batch) answers deferred batches in order as they complete (the
balance actor pipelines its commits so).

A crash in `handle_batch` (anything but a reply value) fails that batch's asks with
ActorGone, and the supervisor reloads the actor from SQLite (`load`). Past
`MAX_RESTARTS` within `RESTART_WINDOW` seconds the actor stays down: asks answer ActorGone
(HTTP 503) and the node keeps running.

Asks flow one way (HTTP -> run -> job -> balance); a callee may `tell` a caller, never ask.

One way to dispatch: a handler method is marked `@on(MessageType)`; `Actor.handle` (and
`handler_for`, for actors that take a batch themselves) finds it by the message's type.

What an actor owns in memory beyond its rows (a running render, watchers) survives a crash:
the supervisor hands the crashed actor to its successor (`adopt`), and work started off the
loop runs in `tasks`, a nursery of that actor's key that outlives its reloads.
"""

from __future__ import annotations

import heapq
import logging
import math
from typing import Any, Awaitable, Callable, ClassVar, Generic, TypeVar

import outcome
import trio

from service.clock import Clock
from service.errors import ActorGone, AskTimeout, ServiceError

log = logging.getLogger(__name__)

MAILBOX = 4096
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
ASK_TIMEOUT = 10.0
YIELD_EVERY = 64  # messages an actor's loop takes in a row at most before it yields (`_run_loop`)


class _Slot:
    """The one-shot reply of an ask: the asker parks its task on it and the actor
    reschedules it (cheaper than a reply channel per ask)."""

    __slots__ = ("task", "value", "state", "deadline")

    WAITING, ANSWERED, GONE = 0, 1, 2

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.value: Any = None
        self.state = _Slot.WAITING
        self.deadline = math.inf


_TIMED_OUT = object()


class _Timeouts:
    """Ask timeouts of one registry: one task wakes at the soonest deadline of the parked
    asks and fails the ones whose time is up. Cheaper than a cancel scope per ask (about a
    third of an idle actor's round trip); asks with the same timeout never wake it early."""

    def __init__(self) -> None:
        self.parked: set[_Slot] = set()
        self._wake_at = math.inf
        self._scope: trio.CancelScope | None = None

    def add(self, slot: _Slot) -> None:
        self.parked.add(slot)
        if slot.deadline < self._wake_at:
            self._wake_at = slot.deadline
            if self._scope is not None:
                self._scope.deadline = slot.deadline

    async def run(self) -> None:
        while True:
            now, soonest = trio.current_time(), math.inf
            for slot in list(self.parked):
                if slot.deadline <= now:
                    self.parked.discard(slot)
                    if slot.state == _Slot.WAITING and slot.task is not None:
                        slot.state = _Slot.GONE
                        trio.lowlevel.reschedule(slot.task, outcome.Value(_TIMED_OUT))
                elif slot.deadline < soonest:
                    soonest = slot.deadline
            self._wake_at = soonest
            with trio.CancelScope(deadline=soonest) as self._scope:
                await trio.sleep_forever()
            self._scope = None


class Envelope:
    __slots__ = ("msg", "reply")

    def __init__(self, msg: Any, reply: _Slot | None) -> None:
        self.msg = msg
        self.reply = reply

    def answer(self, value: Any) -> None:
        """Reply; a caller that has gone away is dropped, never raised."""
        slot = self.reply
        if slot is None or slot.state != _Slot.WAITING:
            return
        slot.state = _Slot.ANSWERED
        if slot.task is not None:
            trio.lowlevel.reschedule(slot.task, outcome.Value(value))
        else:  # answered before the asker parked (it was resumed from a blocking send)
            slot.value = value


class _Crashed(Exception):
    """The default `handle_batch` crashed at message `len(replies)`: the messages before it
    were handled (their writes stand) and keep their replies; those after it go to the
    restarted actor (`_run_loop`), neither failed for another's crash nor lost."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__("actor crashed inside a batch")
        self.replies = replies


class _Failure:
    """A reply that the asker re-raises."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


H = TypeVar("H", bound=Callable[..., Any])


def on(*types: type) -> Callable[[H], H]:
    """Mark an actor method as the handler of messages of `types` (the one way to dispatch)."""

    def mark(method: H) -> H:
        method.__dict__["_handles"] = types
        return method

    return mark


class Actor:
    """Base class. Subclasses implement `load` and mark handlers with `@on` (or override
    `handle_batch`)."""

    key: Any = None  # the registry key it was made for (an id string for every actor here)
    done = False  # set True when the actor has nothing more to do; it stops when idle
    tasks: trio.Nursery  # work off the loop; outlives the actor's reloads (set by the registry)
    _dispatch: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type, str] = {}
        for klass in reversed(cls.__mro__):  # handlers of mixins too; a subclass's win
            for name, value in vars(klass).items():
                for t in getattr(value, "_handles", ()):
                    table[t] = name
        cls._dispatch = table

    def handler_for(self, msg: Any) -> Callable[[Any], Any]:
        """The bound method marked `@on(type(msg))`; TypeError for a message it does not take."""
        name = self._dispatch.get(type(msg))
        if name is None:
            raise TypeError(f"{type(self).__name__}: unknown message {type(msg).__name__}")
        method: Callable[[Any], Any] = getattr(self, name)
        return method

    def adopt(self, previous: "Actor") -> None:
        """Take over what the crashed `previous` instance owned in memory (called before
        `load`); by default nothing: the rows are the whole state."""

    async def load(self) -> None:
        """Rebuild state from SQLite. Runs before the first message and after a crash."""

    async def handle(self, msg: Any) -> Any:
        return await self.handler_for(msg)(msg)

    async def handle_batch(self, msgs: list[Any]) -> list[Any]:
        """Default: one at a time. A raised ServiceError becomes that ask's error."""
        out = []
        for m in msgs:
            try:
                out.append(await self.handle(m))
            except ServiceError as e:
                out.append(_Failure(e))
            except Exception as e:
                raise _Crashed(out) from e
        return out

    def batch_limit(self, waiting: int) -> int:
        """How many of the `waiting` messages one handle_batch call takes (default: all)."""
        return MAILBOX

    def next_deadline(self) -> float | None:
        """Service time of the next timed event, or None."""
        return None

    async def on_deadline(self) -> None:
        """Called when service time reaches `next_deadline()`."""


def refused(reply: Any) -> bool:
    """Whether a reply a handler returned is a failure (`fail`) the asker will raise."""
    return type(reply) is _Failure


def fail(error: BaseException) -> _Failure:
    """Wrap an error as a reply value (for handle_batch implementations)."""
    return _Failure(error)


class Deferred:
    """A `handle_batch` result answered later: `wait()` returns the replies (e.g. after the
    batch's commit); meanwhile the loop takes the next batch. If `wait()` raises, the batch's
    asks get ActorGone and the actor is restarted like any crash."""

    __slots__ = ("wait",)

    def __init__(self, wait: Callable[[], Awaitable[list[Any]]]) -> None:
        self.wait = wait


A = TypeVar("A", bound=Actor)


_WAKE = object()  # a message with no reply that only makes an actor's loop look at its deadline again


class _Alarm:
    """Wakes one actor's loop (a `_WAKE` in its mailbox) when trio's clock reaches the
    actor's next deadline, or at once when the test clock moves (`wake`). Re-armed only
    when the deadline changes, so a message costs no timer work (a cancel scope around
    every receive cost a sixth of an idle balance actor's CPU per message). The registry's
    one timer task (`_Alarms`) rings it: a timer task per actor cost each job's actor two
    scheduler steps and a task."""

    def __init__(self, send: trio.MemorySendChannel[Any], clock: Clock, alarms: "_Alarms") -> None:
        self._send = send
        self._clock = clock
        self._alarms = alarms
        self.at = math.inf      # trio time the alarm goes off
        self._deadline: float | None = None   # the service-time deadline it was set for
        self._stale = False     # the clock moved: `at` no longer matches `_deadline`

    def follow(self, deadline: float | None) -> None:
        """Set for the actor's current deadline (service time, None: none)."""
        if deadline == self._deadline and not self._stale:
            return
        self._deadline, self._stale = deadline, False
        self.at = math.inf if deadline is None else self._clock.trio_time(deadline)
        if self.at == math.inf:
            self._alarms.closed(self)
        else:
            self._alarms.set(self)

    def wake(self) -> None:
        self._stale = True
        self.poke()

    def poke(self) -> None:
        try:
            self._send.send_nowait(Envelope(_WAKE, None))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a full mailbox wakes the loop anyway; a closed one has no loop left

    def close(self) -> None:
        self.at = math.inf
        self._alarms.closed(self)


class _Alarms:
    """The alarms of one registry's actors: one task sleeps until the soonest and rings the
    alarms that are due. A heap of (time, alarm); an entry whose alarm has moved on since
    (another time, or closed) is skipped when it comes up, and the heap is rebuilt from the
    live alarms once such entries outnumber them, so it stays within a few times the number
    of actors with a deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Alarm]] = []
        self._seq = 0  # ties: the heap never compares alarms
        self._live: set[_Alarm] = set()
        self._scope: trio.CancelScope | None = None

    def set(self, alarm: _Alarm) -> None:
        self._live.add(alarm)
        self._seq += 1
        heapq.heappush(self._heap, (alarm.at, self._seq, alarm))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = []
            for live in self._live:
                self._seq += 1
                self._heap.append((live.at, self._seq, live))
            heapq.heapify(self._heap)
        if self._scope is not None:
            self._scope.deadline = self._heap[0][0]

    def closed(self, alarm: _Alarm) -> None:
        self._live.discard(alarm)

    async def run(self) -> None:
        while True:
            now = trio.current_time()
            heap = self._heap
            while heap and heap[0][0] <= now:
                at, _, alarm = heapq.heappop(heap)
                if alarm.at == at:  # not moved on since this entry (a closed alarm's is inf)
                    alarm.at = math.inf
                    self._live.discard(alarm)
                    alarm.poke()
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as self._scope:
                await trio.sleep_forever()
            self._scope = None


class ActorRef:
    def __init__(self, key: str, send: trio.MemorySendChannel[Any], timeouts: _Timeouts) -> None:
        self.key = key
        self._send = send
        self._timeouts = timeouts
        self.gone = False

    async def ask(self, msg: Any, timeout: float = ASK_TIMEOUT) -> Any:
        if self.gone:
            raise ActorGone(str(self.key))
        slot = _Slot()
        env = Envelope(msg, slot)
        deadline = trio.current_time() + timeout
        try:
            try:
                self._send.send_nowait(env)
            except trio.WouldBlock:
                with trio.fail_at(deadline):  # a full mailbox: rare
                    await self._send.send(env)
            if slot.state == _Slot.ANSWERED:
                await trio.lowlevel.checkpoint()
                value = slot.value
            else:
                slot.task = trio.lowlevel.current_task()
                slot.deadline = deadline

                def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
                    slot.state = _Slot.GONE
                    return trio.lowlevel.Abort.SUCCEEDED

                timeouts = self._timeouts
                timeouts.add(slot)
                try:
                    value = await trio.lowlevel.wait_task_rescheduled(abort)
                finally:
                    timeouts.parked.discard(slot)
        except trio.TooSlowError:
            raise AskTimeout(str(self.key)) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ActorGone(str(self.key)) from None
        finally:
            if slot.state == _Slot.WAITING:
                slot.state = _Slot.GONE
        if value is _TIMED_OUT:
            raise AskTimeout(str(self.key))
        if isinstance(value, _Failure):
            raise value.error
        return value

    def tell(self, msg: Any) -> None:
        if self.gone:
            return
        try:
            self._send.send_nowait(Envelope(msg, None))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except trio.WouldBlock:
            log.error("mailbox of %s full; dropped %r", self.key, type(msg).__name__)


class Registry(Generic[A]):
    """Spawns one actor per key on demand, in a nursery it owns, and forgets it when it stops."""

    def __init__(self, name: str, factory: Callable[[str], A], clock: Clock) -> None:
        self.name = name
        self.factory = factory
        self.clock = clock
        self._refs: dict[str, ActorRef] = {}
        self._actors: dict[str, A] = {}
        self._nursery: trio.Nursery | None = None
        self._timeouts = _Timeouts()
        self._alarms = _Alarms()
        self.restarts = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timeouts.run)
            nursery.start_soon(self._alarms.run)
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def get(self, key: str) -> ActorRef:
        ref = self._refs.get(key)
        if ref is None:
            if self._nursery is None:
                raise ActorGone(f"{self.name} registry is not running")
            send, recv = trio.open_memory_channel(MAILBOX)
            ref = ActorRef(key, send, self._timeouts)
            self._refs[key] = ref
            self._nursery.start_soon(self._supervise, key, ref, recv)
        return ref

    def peek(self, key: str) -> A | None:
        """The live actor of `key`, for reading what it owns in memory (never to change it)."""
        return self._actors.get(key)

    def keys(self) -> list[str]:
        return list(self._refs)

    async def ask(self, key: str, msg: Any, timeout: float = ASK_TIMEOUT) -> Any:
        for _ in range(3):
            ref = self.get(key)
            try:
                return await ref.ask(msg, timeout)
            except ActorGone:
                if ref.gone or self._refs.get(key) is ref:
                    raise
                # the actor stopped between get() and send: a fresh one is spawned
        raise ActorGone(str(key))

    def tell(self, key: str, msg: Any) -> None:
        self.get(key).tell(msg)

    async def _supervise(self, key: str, ref: ActorRef, recv: trio.MemoryReceiveChannel[Any]) -> None:
        crashes: list[float] = []
        previous: Actor | None = None
        carry: list[Envelope] = []  # messages a crash left unhandled, first for the successor
        try:
            async with trio.open_nursery() as tasks:
                while True:
                    actor = self.factory(key)
                    actor.key = key
                    actor.tasks = tasks
                    if previous is not None:
                        actor.adopt(previous)
                    self._actors[key] = actor
                    try:
                        await actor.load()
                        await self._loop(actor, recv, ref._send, carry)
                        return
                    except Exception:
                        log.exception("actor %s/%s crashed", self.name, key)
                        previous = actor
                        self.restarts += 1
                        now = trio.current_time()
                        crashes = [t for t in crashes if now - t < RESTART_WINDOW] + [now]
                        if len(crashes) > MAX_RESTARTS:
                            log.error("actor %s/%s past its restart limit; stays down", self.name, key)
                            ref.gone = True
                            self._drain_gone(recv, carry)
                            tasks.cancel_scope.cancel()
                            return
        finally:
            if self._actors.get(key) is not None and self._refs.get(key) in (ref, None):
                self._actors.pop(key, None)
            if self._refs.get(key) is ref and not ref.gone:
                del self._refs[key]
            # An ask that reached the mailbox after the loop's last look would wait forever:
            # answer it ActorGone, and Registry.ask retries on a fresh actor.
            self._drain_gone(recv, carry)
            recv.close()

    @staticmethod
    def _drain_gone(recv: trio.MemoryReceiveChannel[Any], carry: list[Envelope]) -> None:
        for env in carry:
            env.answer(_Failure(ActorGone("actor is down")))
        carry.clear()
        while True:
            try:
                env = recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            env.answer(_Failure(ActorGone("actor is down")))

    async def _loop(self, actor: Actor, recv: trio.MemoryReceiveChannel[Any], send: trio.MemorySendChannel[Any],
                    carry: list[Envelope]) -> None:
        alarm = _Alarm(send, self.clock, self._alarms)
        unwatch = self.clock.watch(alarm.wake)  # a test-clock advance: re-check deadlines at once
        try:
            # no answerer until the first deferred batch: an actor that never defers (a job's)
            # runs without its task and nursery (their starts and ends were steps of every job)
            first = await self._run_loop(actor, recv, self.clock, alarm, None, carry)
            if first is None:
                return
            later_send, later_recv = trio.open_memory_channel[Any](math.inf)
            later_send.send_nowait(first)
            async with trio.open_nursery() as pending:
                pending.start_soon(self._answer_later, later_recv)
                try:
                    await self._run_loop(actor, recv, self.clock, alarm, later_send, carry)
                finally:
                    later_send.close()  # deferred answers still go out in order
        finally:
            alarm.close()
            unwatch()

    @staticmethod
    async def _answer_later(later: trio.MemoryReceiveChannel[Any]) -> None:
        """Answers deferred batches in the order they were handled (one task per actor). A
        wait that raises fails its batch and every batch queued behind it (closing the
        channel would drop them unanswered, left to wait for their timeouts)."""
        async with later:
            async for batch, deferred in later:
                try:
                    replies = await deferred.wait()
                except Exception:
                    for env in batch:
                        env.answer(_Failure(ActorGone("actor crashed while handling the request")))
                    while True:
                        try:
                            behind, _ = later.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        for env in behind:
                            env.answer(_Failure(ActorGone("actor crashed while handling the request")))
                    raise
                for env, value in zip(batch, replies):
                    env.answer(value)

    async def _run_loop(self, actor: Actor, recv: trio.MemoryReceiveChannel[Any], clock: Clock,
                        alarm: "_Alarm", later: trio.MemorySendChannel[Any] | None,
                        carry: list[Envelope]) -> tuple[list[Any], Deferred] | None:
        """Handles batches until the actor is done (None). Without `later` (no answerer yet),
        returns at the first deferred batch instead, with it, for `_loop` to start one."""
        streak = 0  # messages taken in a row without a scheduler step
        while True:
            deadline = actor.next_deadline()
            if deadline is not None and clock.now() >= deadline:
                await actor.on_deadline()
                continue
            alarm.follow(deadline)
            if carry:  # what a crash left unhandled comes first, in order (`_Crashed`)
                first = carry.pop(0)
            elif actor.done:
                try:
                    first = recv.receive_nowait()
                except trio.WouldBlock:
                    return None
            else:
                # a message already waiting is taken without trio's receive, which yields to the
                # scheduler even then (a step a message); a loop that keeps finding mail still
                # yields every YIELD_EVERY messages, before taking the next, so none is lost
                if streak >= YIELD_EVERY:
                    streak = 0
                    await trio.lowlevel.checkpoint()
                try:
                    first = recv.receive_nowait()
                    streak += 1
                except trio.WouldBlock:
                    first = await recv.receive()
                    streak = 0
            if first.msg is _WAKE:
                continue
            batch = [first]
            if carry:
                batch += carry
                carry.clear()
            waiting = recv.statistics().current_buffer_used
            if waiting:
                for _ in range(min(waiting, actor.batch_limit(waiting + 1) - 1)):
                    env = recv.receive_nowait()
                    if env.msg is not _WAKE:
                        batch.append(env)
            try:
                replies = await actor.handle_batch([e.msg for e in batch])
            except _Crashed as crash:
                done = len(crash.replies)
                for env, value in zip(batch, crash.replies):
                    env.answer(value)
                batch[done].answer(_Failure(ActorGone("actor crashed while handling the request")))
                carry[:0] = batch[done + 1:]
                raise
            except BaseException:  # a cancel too: the loop is torn down (its answerer crashed)
                for env in batch:
                    env.answer(_Failure(ActorGone("actor crashed while handling the request")))
                raise
            if isinstance(replies, Deferred):
                if later is None:
                    return batch, replies
                try:
                    later.send_nowait((batch, replies))
                except trio.BrokenResourceError:
                    # The answerer has stopped: it was cancelled (teardown) while this loop, handed
                    # a message, could not be. Answer the burst, then stop with the cancellation.
                    for env in batch:
                        env.answer(_Failure(ActorGone("actor is stopping")))
                    await trio.lowlevel.checkpoint()
                    raise
                continue
            for env, value in zip(batch, replies):
                env.answer(value)

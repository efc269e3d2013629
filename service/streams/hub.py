"""The stream hub: committed changes of jobs and runs fanned out to subscribers in memory.

An actor publishes after its commit (`publish`); every open stream of that topic gets the
event through its own bounded buffer. Nothing here reads the database: a stream reads the
current state once when it opens or resets, never per event.

Topics are `job:<id>`, `run:<id>` and `project:<id>`; one exists while a stream follows it
and for KEEP_S after (see `publish`). Each keeps its recent events so a
client that reconnects with `Last-Event-ID` gets what it missed: an event is forgotten only
when it is older than `KEEP_S` *and* more than `KEEP_EVENTS` newer ones are kept (so at
least ten minutes or the last 1,000 events, whichever is more), and a topic never holds more
than `HARD_CAP` events (a bound on memory at extreme rates; past it the oldest go, and a
resume from before them gets a reset). Event ids are `<boot>.<seq>`: `seq` grows across the
node, `boot` is new at every start, so an id from before a restart is too old by itself.

A subscriber whose buffer is full is dropped (its buffer closed), never waited for: its
stream sends a `reset` with the current state and subscribes again.
"""

from __future__ import annotations

import json
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import trio

from service.clock import Clock
from service.digits import ascii_int

from .limits import StreamLimits

KEEP_S = 600.0
KEEP_EVENTS = 1000
HARD_CAP = 20_000
BUFFER = 64  # events a subscriber may lag behind before it is dropped
SWEEP_EVERY_S = 60.0
SEQ_CAP = 10**18  # more events than one boot publishes: a longer Last-Event-ID is not ours
PROGRESS_EVERY_S = 0.25  # progress events at most about 4 per second per job


@dataclass(slots=True, frozen=True)
class Event:
    seq: int
    name: str  # status, progress, run, job
    data: str  # JSON text, sent as is
    at: float  # service time of publication
    source: str | None = None  # job source, for the project stream's filter


class Subscription:
    """One open stream's view of a topic: a bounded buffer of live events."""

    def __init__(self, topic: Topic, clock: Clock, on_close: Callable[[], None] | None = None) -> None:
        self.topic = topic
        self.clock = clock
        self.on_close = on_close
        self._send, self.receive = trio.open_memory_channel[Event](BUFFER)
        self.dropped = False

    def offer(self, event: Event) -> None:
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self.dropped = True  # too slow: dropped, never waited for
            self.close()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def close(self) -> None:
        if self in self.topic.subscribers:
            self.topic.subscribers.discard(self)
            self.topic.last_at = self.clock.now()  # kept KEEP_S after its last stream
        self._send.close()
        if self.on_close is not None:
            self.on_close()


@dataclass
class Topic:
    events: deque[Event] = field(default_factory=deque)
    made_seq: int = 0  # the hub's seq when the topic was made: its events come after
    trimmed: int = 0  # highest seq forgotten (0: none)
    subscribers: set[Subscription] = field(default_factory=set)
    last_at: float = 0.0
    resumable: bool = False  # some stream followed it, so a client may hold an id of it


class Resume:
    """What a stream gets when it subscribes: the events it missed (`backlog`), or `reset`
    when its resume point is too old (then it reads and sends the current state)."""

    def __init__(self, sub: Subscription, backlog: list[Event], reset: bool) -> None:
        self.sub, self.backlog, self.reset = sub, backlog, reset


class Hub:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.boot = secrets.token_hex(4)
        self.seq = 0
        self.topics: dict[str, Topic] = {}
        self.closed = trio.Event()  # node shutdown: every stream ends
        self.open_streams = 0
        self.limits = StreamLimits()  # streams per session, key, organization and node (H1)
        self._progress: dict[str, tuple[float, tuple | None]] = {}  # job -> (last sent, pending)
        self._wake = trio.Event()
        self._next_sweep = 0.0

    # ids ------------------------------------------------------------------------------------
    def event_id(self, seq: int) -> str:
        return f"{self.boot}.{seq}"

    def parse_id(self, text: str | None) -> int | None:
        """The seq of a Last-Event-ID of this boot; -1 for any other id (too old)."""
        if not text:
            return None
        boot, _, seq = text.strip().partition(".")
        number = ascii_int(seq, SEQ_CAP)
        if boot != self.boot or number is None or number >= SEQ_CAP:  # no seq reaches 10^18
            return -1
        return number

    def position(self) -> str:
        """The id of 'now': a stream that starts from the current state resumes after it."""
        return self.event_id(self.seq)

    # publish --------------------------------------------------------------------------------
    def publish(self, keys: tuple[str, ...], name: str, data: Callable[[], Mapping[str, object]], *,
                source: str | None = None) -> None:
        """Append one event to each topic of `keys` that exists and hand it to its streams.

        A topic exists from the first stream opened on it until KEEP_S after its last event
        or stream: a resume point of a topic can only come from a stream of it, so events
        nobody followed need not be kept. `data` is called once, and only when some topic
        exists, so a change nobody follows costs a dictionary look-up per key."""
        self.seq += 1  # every change moves it, followed or not: a topic made later starts after it
        topics = [t for t in (self.topics.get(k) for k in keys) if t is not None]
        if not topics:
            return
        now = self.clock.now()
        event = Event(self.seq, name, json.dumps(data(), separators=(",", ":")), now, source)
        for topic in topics:
            topic.events.append(event)
            topic.last_at = now
            self._trim(topic, now)
            for sub in list(topic.subscribers):
                sub.offer(event)

    def progress(self, job_id: str, keys: tuple[str, ...], data: Callable[[], Mapping[str, object]], *,
                 source: str | None = None) -> None:
        """A progress report, passed on at most every PROGRESS_EVERY_S per job; the latest
        report in between is kept and sent by `flush_progress`."""
        now = self.clock.now()
        last, _pending = self._progress.get(job_id, (-1e18, None))
        if now - last >= PROGRESS_EVERY_S:
            self._progress[job_id] = (now, None)
            self.publish(keys, "progress", data, source=source)
        else:
            self._progress[job_id] = (last, (keys, data, source))
            self._wake.set()

    def flush_progress(self) -> None:
        now = self.clock.now()
        for job_id, (last, pending) in list(self._progress.items()):
            if pending is not None and now - last >= PROGRESS_EVERY_S:
                self._progress[job_id] = (now, None)
                keys, data, source = pending
                self.publish(keys, "progress", data, source=source)

    def job_ended(self, job_id: str) -> None:
        """No more progress for this job (its final status was published)."""
        self._progress.pop(job_id, None)

    def _trim(self, topic: Topic, now: float) -> None:
        events = topic.events
        while events and (len(events) > HARD_CAP or (len(events) > KEEP_EVENTS and events[0].at < now - KEEP_S)):
            topic.trimmed = events.popleft().seq

    # subscribe ------------------------------------------------------------------------------
    def subscribe(self, key: str, last_seq: int | None, *, resumable: bool = True) -> Resume:
        """Register a stream on `key`. `last_seq` None: live events only (the caller sends
        the current state first). Else the kept events after it, or `reset` when some may be
        gone: forgotten by the trim, or from before the topic was (re)made (a topic idle for
        KEEP_S with no stream is swept). `resumable=False`: a follower that hands out no
        event ids (a submit that waits), so a topic only such followers used is forgotten
        when the last of them leaves, not kept KEEP_S for resumes nobody can make."""
        now = self.clock.now()
        if now >= self._next_sweep:
            self.sweep(now)
        topic = self._topic(key)
        if resumable:
            topic.resumable = True
        sub = Subscription(topic, self.clock, None if resumable else lambda: self._forget(key, topic))
        topic.subscribers.add(sub)
        if last_seq is None:
            return Resume(sub, [], False)
        if last_seq < 0 or last_seq > self.seq or last_seq < topic.trimmed or last_seq < topic.made_seq:
            return Resume(sub, [], True)
        return Resume(sub, [e for e in topic.events if e.seq > last_seq], False)

    def _forget(self, key: str, topic: Topic) -> None:
        if not topic.subscribers and not topic.resumable and self.topics.get(key) is topic:
            del self.topics[key]

    def _topic(self, key: str) -> Topic:
        topic = self.topics.get(key)
        if topic is None:
            topic = self.topics[key] = Topic(made_seq=self.seq, last_at=self.clock.now())
        return topic

    # life -----------------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Send coalesced progress when it falls due. Sleeps only while some is pending
        (an idle node has no timer here: mock-clock tests are not woken by it)."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while True:
                due = [last + PROGRESS_EVERY_S for last, pending in self._progress.values() if pending]
                if not due:
                    break
                await trio.sleep_until(self.clock.trio_time(min(due)))
                self.flush_progress()

    def sweep(self, now: float) -> None:
        """Forget topics with no stream and nothing new for KEEP_S (run from `subscribe`)."""
        self._next_sweep = now + SWEEP_EVERY_S
        for key, topic in list(self.topics.items()):
            self._trim(topic, now)
            if not topic.subscribers and topic.last_at < now - KEEP_S:
                del self.topics[key]

    def close(self) -> None:
        """Node shutdown: every open stream ends (after a final comment), so the HTTP drain
        is not held by streams."""
        self.closed.set()
        for topic in list(self.topics.values()):  # a wait's topic is forgotten as it closes
            for sub in list(topic.subscribers):
                sub.close()

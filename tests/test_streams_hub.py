"""The stream hub without HTTP: what is kept for resume, what is forgotten, the slow
subscriber, lazy payloads, coalesced progress and the sweep (mock clock)."""

from __future__ import annotations

import pytest
import trio

from service.clock import Clock
from service.streams import hub as hubmod
from service.streams.hub import Hub


@pytest.fixture
def hub():
    return Hub(Clock(start=1_000_000.0))


def drain(sub) -> list[int]:
    out = []
    while True:
        try:
            out.append(sub.receive.receive_nowait().seq)
        except (trio.WouldBlock, trio.EndOfChannel):
            return out


async def test_a_change_nobody_follows_builds_no_payload(hub):
    built = []
    hub.publish(("job:a", "project:p"), "status", lambda: built.append(1) or {})
    assert built == [] and hub.topics == {}


async def test_live_events_and_resume_from_any_kept_point(hub):
    sub = hub.subscribe("job:a", None).sub
    for i in range(5):
        hub.publish(("job:a",), "status", lambda i=i: {"n": i})
    assert drain(sub) == [1, 2, 3, 4, 5]
    for cut in range(0, 6):
        resume = hub.subscribe("job:a", cut)
        assert (resume.reset, [e.seq for e in resume.backlog]) == (False, list(range(cut + 1, 6)))


@pytest.mark.parametrize("last", [-1, 99])
async def test_another_boot_or_a_future_point_is_a_reset(hub, last):
    hub.subscribe("job:a", None)
    hub.publish(("job:a",), "status", dict)
    assert hub.subscribe("job:a", last).reset


async def test_ids_carry_the_boot(hub):
    assert hub.parse_id(hub.event_id(7)) == 7
    assert hub.parse_id("0000.7") == -1 and hub.parse_id("x") == -1 and hub.parse_id(None) is None


async def test_kept_ten_minutes_or_the_last_1000_whichever_is_more(autojump_clock):
    hub = Hub(Clock(start=0.0))
    hub.subscribe("project:p", None).sub.close()
    for _ in range(1500):
        hub.publish(("project:p",), "status", dict)
    topic = hub.topics["project:p"]
    assert len(topic.events) == 1500  # all within ten minutes
    await trio.sleep(hubmod.KEEP_S + 1)
    hub.publish(("project:p",), "status", dict)
    assert len(topic.events) == hubmod.KEEP_EVENTS  # older than ten minutes: the last 1000 stay
    assert hub.subscribe("project:p", topic.trimmed - 1).reset
    assert not hub.subscribe("project:p", topic.trimmed).reset


async def test_a_slow_subscriber_is_dropped_and_a_fast_one_gets_everything(hub):
    slow = hub.subscribe("job:a", None).sub
    fast = hub.subscribe("job:a", None).sub
    got = []
    for i in range(hubmod.BUFFER + 10):
        hub.publish(("job:a",), "status", dict)
        got += drain(fast)
    assert got == list(range(1, hubmod.BUFFER + 11))
    assert slow.dropped and slow not in hub.topics["job:a"].subscribers
    assert len(drain(slow)) == hubmod.BUFFER  # what it had before the drop, then the end


async def test_progress_is_coalesced_to_about_four_a_second_and_the_last_is_sent(autojump_clock, nursery):
    hub = Hub(Clock(start=0.0))
    await nursery.start(hub.run)
    sub = hub.subscribe("job:a", None).sub
    for i in range(100):  # 100 reports over 1 second
        hub.progress("a", ("job:a",), lambda i=i: {"value": i})
        await trio.sleep(0.01)
    await trio.sleep(1)
    events = []
    while True:
        try:
            events.append(sub.receive.receive_nowait())
        except trio.WouldBlock:
            break
    assert 4 <= len(events) <= 6
    assert events[-1].data == '{"value":99}'


async def test_topics_nobody_follows_are_swept_after_ten_minutes(autojump_clock):
    hub = Hub(Clock(start=0.0))
    sub = hub.subscribe("job:a", None).sub
    hub.publish(("job:a",), "status", dict)
    sub.close()
    await trio.sleep(hubmod.KEEP_S - 1)
    hub.subscribe("job:b", None)
    assert "job:a" in hub.topics
    await trio.sleep(hubmod.SWEEP_EVERY_S + 2)
    hub.subscribe("job:b", None)
    assert "job:a" not in hub.topics
    assert not hub.subscribe("job:x", 1).reset  # nothing happened after 1: nothing was missed
    hub.publish(("job:a",), "status", dict)  # nobody follows job:a now: not kept
    assert hub.subscribe("job:a", 1).reset  # so a resume from before it must reset


async def test_close_ends_every_subscription(hub):
    subs = [hub.subscribe(f"job:{i}", None).sub for i in range(3)]
    hub.close()
    for sub in subs:
        with pytest.raises(trio.EndOfChannel):
            sub.receive.receive_nowait()


async def test_a_topic_only_waits_followed_is_forgotten_when_the_last_leaves(hub):
    """A submit that waits hands out no event ids: nobody can resume its topic, so it is not
    kept for ten minutes; a topic a stream also followed is kept as before."""
    waits = [hub.subscribe("job:a", None, resumable=False).sub for _ in range(2)]
    hub.publish(("job:a",), "status", lambda: {"status": "completed"})
    assert [drain(s) for s in waits] == [[1], [1]]
    waits[0].close()
    assert "job:a" in hub.topics  # the other wait still follows it
    waits[1].close()
    assert "job:a" not in hub.topics
    wait = hub.subscribe("job:b", None, resumable=False).sub
    stream = hub.subscribe("job:b", None).sub
    hub.publish(("job:b",), "status", lambda: {"status": "completed"})
    wait.close()
    stream.close()
    assert "job:b" in hub.topics and [e.seq for e in hub.topics["job:b"].events] == [2]
    assert hub.subscribe("job:b", 1).backlog[0].seq == 2  # resumable from the stream's id

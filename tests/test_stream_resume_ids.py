"""A `Last-Event-ID` is a client-chosen cursor, so every value of this boot's
shape must resume or reset, never break the stream (a seq `int()` cannot read: a
superscript digit, which `str.isdigit` accepts, or more than 4,300 digits)."""

from __future__ import annotations

import pytest

from service.clock import Clock
from service.streams.hub import Hub
from sse_client import open_stream
from test_generation_support import submit, wait_status


@pytest.mark.parametrize("seq", ["\u00b2", "\u0663", "1" * 5000])
def test_a_seq_that_is_no_ascii_number_of_this_node_is_too_old(seq):
    hub = Hub(Clock(start=1_000_000.0))
    assert hub.parse_id(f"{hub.boot}.{seq}") == -1


async def test_a_resume_point_of_5000_digits_gets_one_reset(node, org):
    key = org["api_key"]
    rid = (await submit(node, key, {"prompt": "a hill [[fail:no-output]]"}))["request_id"]
    final = await wait_status(node, key, rid)
    path = f"/v1/generation/requests/{rid}/events"
    async with open_stream(node, path, key) as s:
        boot = (await s.next())["id"].split(".")[0]
    async with open_stream(node, path, key, last_event_id=f"{boot}.{'1' * 5000}") as s:
        assert s.status == 200
        events = await s.events()
    assert [(e["event"], e["data"]) for e in events] == [("reset", final)]
    assert s.ended

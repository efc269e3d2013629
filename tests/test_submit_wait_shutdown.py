"""A submit that waits (service/http/wait.py) while the node begins to shut down between
taking the wait's place and subscribing: the close has already ended every subscription,
so nothing would end this one. Mock clock."""

from __future__ import annotations

import trio
from test_generation_support import IMAGE
from test_submit_wait import SUBMIT_KEYS, post


async def test_a_shutdown_while_the_job_is_made_ends_the_wait_at_once(node, org, autojump_clock, monkeypatch):
    key = org["api_key"]
    gen = node.parts.generation
    submit = gen.submit

    async def submit_then_close(*args, **kwargs):
        accepted = await submit(*args, **kwargs)
        node.parts.streams.close()  # the shutdown begins after the wait's place was taken
        return accepted

    monkeypatch.setattr(gen, "submit", submit_then_close)
    started = trio.current_time()
    code, headers, body = await post(node, key, "A slow one [[delay:3000]]", "wait=30", IMAGE)
    assert (code, headers["Preference-Applied"], set(body), body["status"]) == (202, "wait=30", SUBMIT_KEYS, "queued")
    assert trio.current_time() - started < 30  # not held to the wait's own end
    assert node.parts.streams.limits.count == 0 and node.parts.streams.topics == {}

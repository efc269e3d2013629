"""How the ComfyUI client decides that a prompt has finished or is lost, on trio's mock
clock against a scripted `/queue` and `/history/{id}`: ComfyUI sends its end events
before it writes the history, and a prompt in neither place is re-read with a bounded
backoff before the job fails (service/engines/comfyui.py, `wait_for_entry`)."""

from __future__ import annotations

import httpx
import pytest
import trio

from service.catalog.engines import ComfyEngine
from service.engines.comfyui import SETTLE_S, wait_for_entry
from service.engines.common import Incomplete

PID = "job-1"
ENTRY = {"outputs": {}, "status": {"status_str": "success", "completed": True, "messages": []}}


class Script:
    """A ComfyUI whose prompt is, read after read, `queued`, `gone` (in neither) or `done`."""

    def __init__(self, states: list[str]) -> None:
        self.states = states
        self.reads: list[tuple[float, str]] = []  # (mock time, state shown) per /queue read

    def state(self) -> str:
        return self.states[min(len(self.reads) - 1, len(self.states) - 1)]

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/queue":
            self.reads.append((trio.current_time(), self.states[min(len(self.reads), len(self.states) - 1)]))
            running = [[0, PID, {}, {}, []]] if self.state() == "queued" else []
            return httpx.Response(200, json={"queue_running": running, "queue_pending": []})
        assert request.url.path == f"/history/{PID}"
        return httpx.Response(200, json={PID: ENTRY} if self.state() == "done" else {})


async def follow(script: Script, ended: trio.Event | None = None, poll_s: float = 2.0) -> dict:
    cfg = ComfyEngine(workflow="wf.json", urls=["http://comfy"], poll_s=poll_s)
    async with httpx.AsyncClient(transport=httpx.MockTransport(script.handler)) as http:
        return await wait_for_entry(http, "http://comfy", PID, cfg, trio.Event() if ended is None else ended)


async def test_an_entry_written_after_a_moment_in_neither_place_is_found(autojump_clock):
    script = Script(["gone", "gone", "gone", "done"])
    start = trio.current_time()
    assert await follow(script) == ENTRY
    assert [round(t - start, 6) for t, _ in script.reads] == [0, 0.1, 0.3, 0.7]


async def test_a_prompt_in_neither_place_through_the_whole_backoff_is_lost(autojump_clock):
    script = Script(["gone"])
    start = trio.current_time()
    with pytest.raises(Incomplete, match=f"^ComfyUI lost prompt {PID} \\(neither queued nor in its history\\)$"):
        await follow(script)
    assert len(script.reads) == len(SETTLE_S) + 1
    assert round(trio.current_time() - start, 6) == round(sum(SETTLE_S), 6)  # bounded: 3.1 s


async def test_a_prompt_seen_queued_again_starts_the_backoff_anew(autojump_clock):
    script = Script(["gone", "gone", "queued", *["gone"] * len(SETTLE_S), "done"])
    assert await follow(script, poll_s=1.0) == ENTRY  # never len(SETTLE_S) misses in a row


async def test_after_an_end_event_a_prompt_still_running_is_read_again_soon(autojump_clock):
    """execution_success came; ComfyUI still lists the prompt as running (its history is
    written after the event): read again after 0.1, 0.2, 0.4 s, not after poll_s."""
    ended = trio.Event()
    ended.set()
    script = Script(["queued", "queued", "queued", "done"])
    start = trio.current_time()
    assert await follow(script, ended, poll_s=30.0) == ENTRY
    assert [round(t - start, 6) for t, _ in script.reads] == [0, 0.1, 0.3, 0.7]


async def test_without_an_event_a_running_prompt_is_polled_every_poll_s_and_an_event_wakes_it(autojump_clock):
    ended = trio.Event()
    script = Script(["queued", "queued", "queued", "done"])
    start = trio.current_time()
    async with trio.open_nursery() as n:
        n.start_soon(follow, script, ended, 2.0)
        await trio.sleep(5.0)  # reads at 0, 2, 4
        ended.set()  # read at once, then 0.1 later
    assert [round(t - start, 6) for t, _ in script.reads] == [0, 2.0, 4.0, 5.0]

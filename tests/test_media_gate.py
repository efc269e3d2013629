"""The decode gate (issue 22, L12): the large-decode lock was node-wide first come first
served, so one key's queue of large images delayed another organization's upload by the
whole queue. Now organizations are served in turn. Orders and times are read on trio's
mock clock (each decode "takes" one second of it), never on a real one."""

from __future__ import annotations

import trio
import trio.testing

from service.media.gate import LARGE_DECODE, DecodeGate
from waiting import wait_until

LARGE = LARGE_DECODE + 1


async def decode(gate: DecodeGate, org: str, name: str, log: list, seconds: float = 1.0) -> None:
    async with gate.slot(org, LARGE):
        log.append((name, trio.current_time()))
        await trio.sleep(seconds)


async def test_another_organizations_single_decode_is_not_behind_a_queue(autojump_clock):
    gate, log = DecodeGate(), []
    async with trio.open_nursery() as n:
        for i in range(5):
            n.start_soon(decode, gate, "org-a", f"a{i}", log)
            await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(0.5)  # a0 decodes, a1..a4 wait
        n.start_soon(decode, gate, "org-b", "b0", log)
    assert [name for name, _ in log] == ["a0", "b0", "a1", "a2", "a3", "a4"]
    assert dict(log)["b0"] == 1.0  # right after the decode under way, not after a1..a4 (at 5.0)


async def test_organizations_take_turns_one_decode_each(autojump_clock):
    gate, log = DecodeGate(), []
    async with trio.open_nursery() as n:
        for org, count in (("a", 3), ("b", 3), ("c", 2)):
            for i in range(count):
                n.start_soon(decode, gate, org, f"{org}{i}", log)
                await trio.testing.wait_all_tasks_blocked()
    assert [name for name, _ in log] == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2"]


async def test_small_decodes_never_wait(autojump_clock):
    gate, log = DecodeGate(), []
    async with trio.open_nursery() as n:
        n.start_soon(decode, gate, "a", "big", log, 10.0)
        await trio.testing.wait_all_tasks_blocked()
        async with gate.slot("b", LARGE_DECODE):  # exactly at the bound: not large
            log.append(("small", trio.current_time()))
    assert log == [("big", 0.0), ("small", 0.0)]


async def test_a_cancelled_waiter_leaves_no_trace_and_a_granted_one_passes_the_slot_on(autojump_clock):
    gate, log = DecodeGate(), []
    async with trio.open_nursery() as n:
        n.start_soon(decode, gate, "a", "a0", log)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as waiting:
            waiting.deadline = trio.current_time() + 0.5
            await decode(gate, "b", "b0", log)  # cancelled while queued
        assert gate.queued("b") == 0 and "b" not in gate.waiting
        n.start_soon(decode, gate, "c", "c0", log)
        await trio.testing.wait_all_tasks_blocked()
    assert [name for name, _ in log] == ["a0", "c0"]
    assert gate.running == 0 and not gate.waiting
    # cancelled as the slot is handed to it (in either order): the slot goes on, not lost
    async with trio.open_nursery() as n:
        done = trio.Event()

        async def holder():
            async with gate.slot("a", LARGE):
                log.append(("a1", trio.current_time()))
                await done.wait()

        n.start_soon(holder)
        await trio.testing.wait_all_tasks_blocked()
        scope = trio.CancelScope()

        async def cancelled_one():
            with scope:
                await decode(gate, "b", "b1", log)

        n.start_soon(cancelled_one)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(decode, gate, "c", "c1", log)
        await trio.testing.wait_all_tasks_blocked()
        done.set()
        scope.cancel()
    assert [name for name, _ in log][2:] == ["a1", "c1"]
    assert gate.running == 0 and not gate.waiting


async def test_capacity_lets_that_many_run_at_once(autojump_clock):
    gate, log = DecodeGate(capacity=2), []
    async with trio.open_nursery() as n:
        for i in range(4):
            n.start_soon(decode, gate, "a", f"a{i}", log)
            await trio.testing.wait_all_tasks_blocked()
    assert [t for _, t in log] == [0.0, 0.0, 1.0, 1.0]


async def test_uploads_of_two_organizations_take_turns_at_the_gate(node):
    """Through the upload route: with the slot held, organization A queues four large
    images, then B one; once the slot is free B's decode is the second, not the last."""
    import io

    from PIL import Image

    from test_generation_support import upload

    a, b = await node.create_org("A", "a@a.test"), await node.create_org("B", "b@b.test")
    gate = node.parts.generation.decodes
    buf = io.BytesIO()
    Image.new("RGB", (2100, 2000), (9, 9, 9)).save(buf, "PNG")  # 4.2 MP: a large decode
    answered: list[str] = []
    release = trio.Event()
    granted: list[str] = []  # organizations in the order the gate granted them the slot
    acquire = gate._acquire

    async def recording(org: str) -> None:
        await acquire(org)
        granted.append(org)

    gate._acquire = recording

    async def holder(task_status=trio.TASK_STATUS_IGNORED):
        async with gate.slot("another-org", LARGE):
            task_status.started()
            await release.wait()

    async def one(org, name):
        r = await upload(node, org["api_key"], buf.getvalue(), "image/png")
        assert r.status_code == 201
        answered.append(name)

    async def queued(org, count):
        await wait_until(lambda: gate.queued(org["organization_id"]) >= count, 10)

    async with trio.open_nursery() as n:
        await n.start(holder)
        for i in range(4):
            n.start_soon(one, a, f"a{i}")
            await queued(a, i + 1)
        n.start_soon(one, b, "b0")
        await queued(b, 1)
        release.set()
    ids = {a["organization_id"]: "A", b["organization_id"]: "B", "another-org": "X"}
    assert [ids[o] for o in granted] == ["X", "A", "B", "A", "A", "A"]
    assert sorted(answered) == ["a0", "a1", "a2", "a3", "b0"]

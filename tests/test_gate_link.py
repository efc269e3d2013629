"""The hook gate child's end of the local socket (service/hookgate/child.py, `Link`):
requests numbered in a 32-bit field, answers matched to them by that number."""

from __future__ import annotations

import socket

import trio

from service.hookgate import wire
from service.hookgate.child import Link


async def test_a_child_past_four_billion_hooks_still_asks_the_node():
    """The number wraps instead of overflowing the frame's field (a struct.error, a 500
    for every later hook, until the child was started again)."""
    ours, theirs = socket.socketpair()
    link = Link(trio.SocketStream(trio.socket.from_stdlib_socket(theirs)))
    node = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    link.seq = 2**32 - 2
    seen: list[int] = []

    async def answers() -> None:
        buf = bytearray()
        while data := await node.receive_some():
            buf += data
            while (got := wire.take_request(buf)) is not None:
                seen.append(got[0])
                await node.send_all(wire.answer(got[0], 200, [], got[5]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.write)
        nursery.start_soon(link.read)
        nursery.start_soon(answers)
        for body in (b"a", b"b", b"c"):
            assert await link.ask(wire.COMPLETE, "POST", "/engine-hooks/j/t", [], body) == (200, [], body)
        nursery.cancel_scope.cancel()
    assert seen == [2**32 - 1, 0, 1]
    ours.close()
    theirs.close()

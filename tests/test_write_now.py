"""Writes at once to a plain TCP socket (service/net/write_now.py): what the kernel took,
0 when the socket has no room, trio's errors for a closed or broken connection, and the
budget that makes every IN_A_ROW-th write take the scheduler step."""

from __future__ import annotations

import socket

import pytest
import trio

from service.net.write_now import IN_A_ROW, Budget, write_now


async def pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def test_a_write_with_room_is_taken_whole_without_a_step():
    a, b = await pair()
    async with a, b:
        with trio.testing.assert_no_checkpoints():
            assert write_now(a.socket, b"hello") == 5
        assert await b.receive_some() == b"hello"


async def test_a_full_socket_takes_part_then_nothing_and_send_all_finishes():
    a, b = await pair()
    async with a, b:
        a.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        big = bytes(range(256)) * 4096  # 1 MiB: more than the socket holds
        took = write_now(a.socket, big)
        assert 0 < took < len(big)
        assert write_now(a.socket, big[took:]) == 0  # no room left: nothing, no error
        got = bytearray()

        async def read_all():
            while len(got) < len(big):
                got.extend(await b.receive_some())

        async with trio.open_nursery() as n:
            n.start_soon(read_all)
            await a.send_all(memoryview(big)[took:])
        assert bytes(got) == big


async def test_a_closed_or_shut_socket_is_a_closed_resource():
    a, b = await pair()
    async with b:
        await a.send_eof()
        with pytest.raises(trio.ClosedResourceError):
            write_now(a.socket, b"x")
        await a.aclose()
        with pytest.raises(trio.ClosedResourceError):
            write_now(a.socket, b"x")


async def test_a_connection_whose_peer_is_gone_is_broken():
    a, b = await pair()
    async with a:
        await b.aclose()
        with pytest.raises(trio.BrokenResourceError, match="socket connection broken"):
            write_now(a.socket, b"x")


def test_every_in_a_row_th_write_takes_the_step():
    budget = Budget()
    takes = [budget.take() for _ in range(3 * (IN_A_ROW + 1))]
    assert takes == ([True] * IN_A_ROW + [False]) * 3

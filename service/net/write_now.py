"""A write to a plain TCP socket that costs no scheduler step when the socket has room.

trio's `send_all` yields to the scheduler after every send, even one the kernel took whole
at once (every trio I/O call is a checkpoint). A small write to a socket with room is the
common case on the node's hot path: a job's answer, its event stream's frames, the engine's
request, a webhook's answer (about eight writes a job, each a trip through the run loop).
`write_now` is the kernel's answer alone; callers write what it did not take after a wait
for room (`send_all`, or the node's connection's own bounded wait), as before, and bound how many writes in a row skip the step (`Budget`), so a
task that writes a long body from memory still lets others run.

Callers hold their own guard against a second sender (Hypercorn's send lock, httpcore's
one request at a time on a connection), which is what trio's conflict detector checks.
"""

from __future__ import annotations

import errno
import os

import trio

# at most this many writes in a row skip the step; the next takes `send_all`'s
IN_A_ROW = 64
_CLOSED_ERRNOS = frozenset({errno.EBADF, errno.ENOTSOCK})  # trio's "already closed" set


def write_now(sock: trio.socket.SocketType, data: bytes | bytearray | memoryview) -> int:
    """Bytes of `data` the socket took without waiting (0 when it has no room), with
    trio's `SocketStream` errors: `ClosedResourceError` for a socket closed or shut for
    writing, `BrokenResourceError` for a connection gone."""
    fd = sock.fileno()
    if fd == -1 or sock.did_shutdown_SHUT_WR:
        raise trio.ClosedResourceError("the socket is closed for writing")
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
    except OSError as exc:
        if exc.errno in _CLOSED_ERRNOS:
            raise trio.ClosedResourceError("the socket was already closed") from None
        raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc


class Budget:
    """How many more writes may skip the scheduler step before one takes it."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = IN_A_ROW

    def take(self) -> bool:
        """True: this write may go at once; False (every IN_A_ROW-th): take the step."""
        if self.left:
            self.left -= 1
            return True
        self.left = IN_A_ROW
        return False

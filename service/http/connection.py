"""Hypercorn's HTTP/1 connection (its trio `TCPServer`) without eight costs it paid on
every request, none of which a client can see (bench/README.md, "Throughput VI"), and
without two ways it held a connection for nothing (the last two; docs/security-limits.md):

- Sending took the connection's send lock with `async with`, and trio's `Lock` yields to
  the scheduler even when free. The lock is now taken at once when free (the send that
  follows is a checkpoint of its own) and waited for only when another task holds it.
- The end of a body of known length is `b""` from h11; writing it cost a lock and a
  checkpoint for no bytes. It is skipped.
- A response of known length went out as two writes, its head and then its body. The head
  now waits for the body (`_sized_head`) and both go in one write; any other event sends a
  waiting head first, so nothing is reordered or kept.
- Each message the connection put on a request's queue for the app (its body, its end, the
  client's disconnect) cost a scheduler step, even with room on the queue: three to five a
  request. It is now put at once when there is room (`TaskGroup`), waited for only when the
  queue is full, as before.
- Each write yielded to the scheduler after the kernel took it (trio's `send_all`). A
  write to a plain TCP socket with room now goes at once (`service/net/write_now.py`);
  what the socket does not take, and every 64th write, wait for room (a step) as before.
- Every read was wrapped in `fail_after(read_timeout or inf)`, a cancel scope even with no
  timeout (the node sets none). Without one, a read is not wrapped (`_read_data`).
- Closing a connection cost five scheduler steps: Hypercorn's `_close`, called twice, each an
  end of sending and a close with a step each, and trio's listener closing the stream again
  (a cancelled step, `aclose_forcefully`). It now costs none: the node's close takes no step,
  and the listener leaves a stream the node closed alone (`run_handler`). A connection's task
  takes 4 steps for a request on a new connection instead of 7.
- The keep-alive timer was a task cancelled when a request began and started anew when it
  ended, under a lock of its own. It is now one task per connection whose cancel scope's
  deadline moves: `keep_alive_timeout` after the connection went idle, none while a request
  is in flight. What it does when it fires is Hypercorn's own: the idle connection is closed,
  at once when the server shuts down. That timer is also what closes a connection whose
  request head trickles in (the connection is idle until the head is complete).
- A connection the client had closed stayed open on the node until the keep-alive timer
  fired: reading ended at the client's end of stream, but nothing stopped the timer, and
  the connection's task waited for it. Each such socket sat in CLOSE_WAIT for
  `keep_alive_timeout` with its tasks: Cog opens a connection for each webhook and closes it
  after the answer, so at 100 jobs/s that was 500 sockets held for nothing. The end of
  reading now stops the timer (`_read_data`), and the connection closes as soon as the
  request in flight, if any, has ended (Hypercorn tells it of the close as before).
- A write the client took nothing of waited for ever: Hypercorn shields its writes from
  the app's cancels, with no bound of its own, so a client that asked for a large file and
  stopped reading held its connection (and a descriptor) until the node stopped, and then
  kept the node from stopping. A write now ends the connection (a reset) once the client
  takes less than `MIN_RATE` of it over `SEND_STALL_S`, as nginx's `send_timeout` does
  for nothing at all, or once the shutdown's grace is over (`_send_rest`). A TLS
  connection's close (its close_notify, a write) is bounded likewise
  (`_initiate_server_close`).

`install()` puts the class where `hypercorn.trio.serve` builds its connections; Hypercorn
offers no argument for it. Checked against Hypercorn 0.18 (tests/test_http_connection.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import socket
import struct
import termios
from collections.abc import Awaitable, Callable
from typing import Any

import hypercorn.protocol
import hypercorn.trio.run
import hypercorn.trio.tcp_server
import trio
import trio._highlevel_serve_listeners as trio_listeners
from hypercorn.events import Closed, RawData
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.trio.task_group import TaskGroup as HypercornTaskGroup
from hypercorn.trio.task_group import _handle
from hypercorn.trio.tcp_server import MAX_RECV
from hypercorn.trio.tcp_server import TCPServer as HypercornTCPServer

from service.net.write_now import Budget, write_now

log = logging.getLogger("service.http")

# While a write waits for room, the client must take at least MIN_RATE bytes a second of
# what is queued for it, judged over each SEND_STALL_S, or the connection ends (nginx's
# `send_timeout` cuts after 60 s of nothing). What it took is what left the kernel's send
# queue (acknowledged: a client that stops reading stops acknowledging). Over TLS the
# bound is on the whole write: SEND_STALL_S plus what is queued before it and the write
# itself at MIN_RATE.
SEND_STALL_S = 30.0
MIN_RATE = 1024


class Stalled(Exception):
    """The client took too little of a write (see MIN_RATE), or the shutdown's grace is over."""


def unsent(sock: Any) -> int | None:
    """Bytes in the socket's send queue the client has not acknowledged (Linux's
    SIOCOUTQ); None where the system does not tell, and then a write is never judged
    stalled, only bounded by the shutdown."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0])
    except (OSError, AttributeError):
        return None


class KeepAliveTimer:
    """Stands in for Hypercorn's `TrioSingleTask` as the connection's `idle_task`: `restart`
    (the connection is idle from now) and `stop` (a request began) only move a deadline once
    the connection's one timer task runs."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.scope: trio.CancelScope | None = None  # the timer task's, made as it is started; None before and after
        self.busy = False
        self.idle_again: trio.Event | None = None  # set when a shutdown waits for the request's end
        self.closed = False

    async def restart(self, task_group: Any, action: Any) -> None:
        self.busy = False
        if self.scope is None:
            if not self.closed:
                # the scope is made here, so a `stop` or `close` before the task runs still
                # reaches it; `start_soon`, not `start`: no wait for the task's first step
                self.scope = trio.CancelScope(deadline=trio.current_time() + self.timeout)
                task_group._nursery.start_soon(action)
            return
        self.scope.deadline = trio.current_time() + self.timeout
        if self.idle_again is not None:
            self.idle_again.set()

    async def stop(self) -> None:
        self.busy = True
        if self.scope is not None:
            self.scope.deadline = math.inf

    def close(self) -> None:
        """The connection is closed: the timer has nothing left to do."""
        self.closed = True
        if self.scope is not None:
            self.scope.cancel()


class TCPServer(HypercornTCPServer):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.timer = KeepAliveTimer(self.config.keep_alive_timeout)
        self.idle_task = self.timer  # type: ignore[assignment]  # Hypercorn calls restart() and stop()
        self.held = b""  # a response head held back to go out with its body (`_sized_head`)
        self.socket_closed = False  # by `_close`
        # a plain TCP connection's socket, written at once when it has room (`_send`); TLS: None
        self.plain = self.stream.socket if isinstance(self.stream, trio.SocketStream) else None
        self.budget = Budget()
        self.writing: trio.CancelScope | None = None  # a write's wait for room in the socket
        self.stop_by = math.inf  # when a shutdown's grace ends, once the timer has seen it begin

    async def protocol_send(self, event: Any) -> None:
        if isinstance(event, RawData):
            data = event.data
            if self.held:  # a response head waits for its body
                data, self.held = self.held + data, b""
            elif _sized_head(data):
                self.held = data
                return
            if data:
                await self._send(data)
        else:
            if self.held:
                data, self.held = self.held, b""
                await self._send(data)
            if isinstance(event, Closed):
                self.timer.close()
            await super().protocol_send(event)

    async def _send(self, data: bytes) -> None:
        try:
            self.send_lock.acquire_nowait()
        except trio.WouldBlock:
            await self.send_lock.acquire()
        try:
            sent = 0
            if self.plain is not None and self.budget.take():
                sent = write_now(self.plain, data)  # the common case: all of it, no step
            if sent < len(data):
                await self._send_rest(memoryview(data)[sent:] if sent else data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self.protocol.handle(Closed())
        except Stalled:
            log.info("a client took too little of an answer for %.0f s, or the node is stopping: "
                     "its connection is reset", SEND_STALL_S)
            self._abort()
            await self.protocol.handle(Closed())
        finally:
            self.send_lock.release()

    async def _send_rest(self, data: bytes | memoryview) -> None:
        """What `write_now` did not take: shielded from the app's cancels, as Hypercorn's own
        write is (a response is never cut mid-write), but `Stalled` once the client takes
        too little of it (MIN_RATE), or once the shutdown's grace is over (`stop_by`)."""
        if self.plain is None:  # TLS: trio's write, bounded as a whole
            queued = unsent(self.stream.transport_stream.socket) or 0
            with self._bounded(SEND_STALL_S + (queued + len(data)) / MIN_RATE) as scope:
                await self.stream.send_all(data)
            if scope.cancelled_caught:
                raise Stalled
            return
        view, sent = memoryview(data), 0
        while sent < len(view):
            before = unsent(self.plain)
            with self._bounded(SEND_STALL_S) as scope:
                await trio.lowlevel.wait_writable(self.plain)
            if scope.cancelled_caught:
                after = unsent(self.plain)
                if trio.current_time() >= self.stop_by or (
                        before is not None and after is not None and before - after < SEND_STALL_S * MIN_RATE):
                    raise Stalled
                continue  # slow, but taking: the kernel wakes a writer only once a third of its buffer is free
            sent += write_now(self.plain, view[sent:])

    @contextlib.contextmanager
    def _bounded(self, seconds: float):
        self.writing = trio.CancelScope(shield=True, deadline=min(trio.current_time() + seconds, self.stop_by))
        try:
            with self.writing:
                yield self.writing
        finally:
            self.writing = None

    def _abort(self) -> None:
        """The connection closed at once with a reset, what the client did not take
        dropped: a reader task waiting on the socket is woken (trio's close)."""
        if self.socket_closed:
            return
        self.socket_closed = True
        sock = self.plain if self.plain is not None else self.stream.transport_stream.socket
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    async def _read_data(self) -> None:
        """Hypercorn's read loop; once it ends (the client's end of stream, or a broken
        connection) nothing more can come in, so the keep-alive timer has nothing to wait
        for: stopped, the connection ends with its last request instead of at the timeout.
        Without a `read_timeout` (the node sets none: the keep-alive timer bounds an idle
        connection) a read is not wrapped in Hypercorn's `fail_after(inf)`, a cancel scope
        for nothing on every read."""
        try:
            if self.config.read_timeout is not None:
                await super()._read_data()
                return
            while True:
                try:
                    data = await self.stream.receive_some(MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break
                await self.protocol.handle(RawData(bytes(data)))
                if data == b"":
                    break
            await self.protocol.handle(Closed())
        finally:
            self.timer.close()
            await _release_h2(self.protocol)

    async def _close(self) -> None:
        """Hypercorn's close without its four scheduler steps: the end of sending and then
        the socket's close, once, as trio's `send_eof` and `aclose` do them less the step
        each takes (nothing waits in either). Hypercorn calls it again as the connection's
        task ends (after a close it began); trio's listener then leaves the closed stream
        alone (`run_handler`)."""
        if self.socket_closed:
            return
        self.socket_closed = True
        if isinstance(self.stream, trio.SocketStream):
            sock = self.stream.socket  # trio's `send_eof` and `aclose`, less their steps
            with contextlib.suppress(OSError):  # gone already: as Hypercorn
                if not sock.did_shutdown_SHUT_WR:
                    sock.shutdown(socket.SHUT_WR)
            sock.close()
            return
        await self.stream.aclose()  # TLS (no end of sending of its own): its close_notify first

    async def _initiate_server_close(self) -> None:
        """Hypercorn's (the keep-alive timer's close, shielded), with the close of a TLS
        stream bounded as a write is: its close_notify is a write, and to a client that
        reads nothing it would wait for ever. Past the bound the socket is reset."""
        await self.protocol.handle(Closed())
        with trio.move_on_after(SEND_STALL_S):
            await self.stream.aclose()
            return
        self._abort()

    async def _idle_timeout(self) -> None:
        timer = self.timer
        assert timer.scope is not None  # made by `restart`, which started this task
        with timer.scope:
            while True:
                await self.context.terminated.wait()
                if self.stop_by == math.inf:  # the shutdown began: a write waits no longer than its grace
                    self.stop_by = trio.current_time() + self.config.graceful_timeout
                    if self.writing is not None:
                        self.writing.deadline = min(self.writing.deadline, self.stop_by)
                if not timer.busy:
                    break
                # a shutdown began during a request: Hypercorn closes the connection when the
                # request ends; should it go idle instead, close it then (as Hypercorn did)
                timer.idle_again = trio.Event()
                await timer.idle_again.wait()
                timer.idle_again = None
        timer.scope = None
        if timer.closed:
            return
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()


async def _release_h2(wrapper: Any) -> None:
    """Over HTTP/2 a response waits in Hypercorn for the client's flow-control window,
    unbounded and, for its last message, shielded (`EndShielded`): a client granting none
    held the connection's task and socket after it left, and the node's stop. Once reading
    has ended no window can come: the waits end, as a closed socket ends an HTTP/1 write."""
    protocol = getattr(wrapper, "protocol", None)
    if isinstance(protocol, H2Protocol):
        for buffer in list(protocol.stream_buffers.values()):
            await buffer.close()  # no checkpoint: it sets events


def _sized_head(data: bytes) -> bool:
    """A response head that declares its body's length: the app's next message is that
    body (or its end), so the two can go out in one write instead of two. A streamed
    response (chunked) sends its head at once: its first event may be a while coming."""
    return data[:5] == b"HTTP/" and b"\r\ncontent-length: " in data[:data.find(b"\r\n\r\n")].lower()


class Receive:
    """The app's `receive` for one request: its queue's trio channel (`channel`, for an app
    that takes what is already queued without waiting) and `on_disconnect`, called when the
    client's disconnect is put, for an app that reads nothing more of the request
    (service/http/request_task.py) and so has no task waiting on the queue."""

    __slots__ = ("channel", "on_disconnect")

    def __init__(self, channel: trio.MemoryReceiveChannel[Any]) -> None:
        self.channel = channel
        self.on_disconnect: Callable[[], object] | None = None

    def __call__(self) -> Awaitable[Any]:
        return self.channel.receive()

    def queued(self) -> Any | None:
        """The next message if it is already queued, taken without the scheduler step of an
        await (trio's `receive` takes one even then); None when the app must wait for it."""
        try:
            return self.channel.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return None  # the await meets the same end and raises it


class TaskGroup(HypercornTaskGroup):
    """Hypercorn's task group for a connection's requests (its `spawn_app`, checked against
    Hypercorn 0.18), whose `put` of a message for the app puts it at once when the queue has
    room: a trio channel's `send` yields to the scheduler even then. A full queue is waited
    on as before. The app's `receive` is a `Receive`; a disconnect put calls its hook."""

    async def spawn_app(self, app: Any, config: Any, scope: Any, send: Any) -> Any:
        into, out = trio.open_memory_channel[Any](config.max_app_queue_size)
        receive = Receive(out)
        assert self._nursery is not None  # entered: Hypercorn spawns only inside `async with`
        self._nursery.start_soon(_handle, app, config, scope, receive, send,
                                 trio.to_thread.run_sync, trio.from_thread.run)

        async def put(message: Any) -> None:
            try:
                into.send_nowait(message)
            except trio.WouldBlock:
                await into.send(message)
            if receive.on_disconnect is not None and message["type"] == "http.disconnect":
                receive.on_disconnect()

        return put


async def run_handler(stream: Any, handler: Callable[[Any], Awaitable[object]]) -> None:
    """trio's listener task for one connection (`serve_listeners`' `_run_handler`, checked
    against trio 0.35), less its close of a plain stream the connection closed already:
    trio's `aclose_forcefully` is then a cancelled scheduler step and nothing else. Any
    other stream (TLS, or a plain one left open) is closed as trio closes it."""
    try:
        await handler(stream)
    finally:
        if not (isinstance(stream, trio.SocketStream) and stream.socket.fileno() == -1):
            await trio.aclose_forcefully(stream)


def install() -> None:
    """Hypercorn's trio worker builds its connections from this name, its connections
    their task groups from `TaskGroup` and their HTTP/2 protocol from `BoundedH2`, and
    trio's listener runs each in `run_handler` (idempotent)."""
    setattr(hypercorn.trio.run, "TCPServer", TCPServer)  # the name its trio worker reads
    setattr(hypercorn.trio.tcp_server, "TaskGroup", TaskGroup)  # the name `TCPServer.run` reads
    setattr(trio_listeners, "_run_handler", run_handler)  # the name `_serve_one_listener` reads
    from .h2_bound import BoundedH2  # imports this module's bound

    setattr(hypercorn.protocol, "H2Protocol", BoundedH2)  # the name `ProtocolWrapper` reads

"""The node's side of the hook gate: the listening socket, the child process, the answers.

`bind` makes the socket before the node is built (the engines' hook URLs carry its
address); `HookGate.run`, in the node's actors nursery, starts the child, answers what it
hands over, and starts it again after `RESTART_S` if it ends. Every answer is made here,
as the node's own port would make it for the same request.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import trio

from service.digits import ascii_int
from service.engines.context import Context
from service.hookgate import wire
from service.http.app import UPLOAD_BODY_LIMIT
from service.http.errors import HTTP_CODES, INTERNAL, error_body, timeout_body
from service.http.hook_front import ANSWER, ROUTE, as_jsonify, hook_parts
from service.metrics import UNMATCHED

log = logging.getLogger("service.hookgate")

READ = 256 * 1024
BACKLOG = 1024
RESTART_S = 1.0
# The child's environment: what Python needs and nothing of the node's own (settings and
# tokens in GENSERVICE_* stay in the node's process)
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
# the node's own port's answers to the same requests (service/http/errors.py)
REFUSALS = {**HTTP_CODES, 500: INTERNAL}


class BadListen(SystemExit):
    """A setting the gate cannot start with: the start stops with this message."""


def bind(settings: Any) -> socket.socket:
    """The gate's listening socket, bound and listening; the engines' base URL for hooks
    follows the bound port unless the operator set one."""
    host, sep, port = settings.engine_hooks_listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or ascii_int(port, 65536) is None:
        raise BadListen("GENSERVICE_ENGINE_HOOKS_LISTEN must be HOST:PORT (for example 10.0.0.5:8001)")
    wildcard = host in ("0.0.0.0", "::")
    if wildcard and not settings.engine_hooks_url:
        raise BadListen("GENSERVICE_ENGINE_HOOKS_LISTEN listens on every address: set "
                        "GENSERVICE_ENGINE_HOOKS_URL to the address engine servers reach it at")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        raise BadListen(f"GENSERVICE_ENGINE_HOOKS_LISTEN: cannot listen on {host}:{port}: {e.strerror}") from None
    if not settings.engine_hooks_url:
        shown = f"[{host}]" if ":" in host else host
        settings.engine_hooks_url = f"http://{shown}:{sock.getsockname()[1]}"
    settings.engine_hooks_url = settings.engine_hooks_url.rstrip("/")
    return sock


class HookGate:
    def __init__(self, sock: socket.socket, context: Context, metrics: Any, body_limit: int,
                 body_timeout_s: float = 120.0, keep_alive_s: float = 5.0) -> None:
        self.sock, self.context, self.metrics = sock, context, metrics
        self.start = {"listen_fd": sock.fileno(), "body_limit": body_limit, "body_timeout_s": body_timeout_s,
                      "keep_alive_s": keep_alive_s,
                      "backlog": BACKLOG}
        self.children = 0  # started so far: more than one, it ended and was started again (engines page)
        self.pid: int | None = None

    @classmethod
    def for_node(cls, node: Any, sock: socket.socket) -> HookGate:
        """The gate of a built node (its engines' hooks, its metrics), as `node.hook_gate`;
        bodies bounded as the node's own hook route bounds them."""
        node.hook_gate = cls(sock, node.engines.context, node.metrics, UPLOAD_BODY_LIMIT)
        return node.hook_gate

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The child, started again whenever it ends, until the node stops. Started at once:
        the socket listens already, and connections wait in its backlog for the child."""
        task_status.started()
        try:
            while True:
                try:
                    await self._child()
                except Exception:  # noqa: BLE001 - the node outlives its gate; the next child serves
                    log.exception("hook gate failed")
                log.warning("hook gate process ended; starting it again in %.0f s", RESTART_S)
                await trio.sleep(RESTART_S)
        finally:
            self.sock.close()

    async def _child(self) -> None:
        ours, theirs = socket.socketpair()
        with ours:
            try:
                proc = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "service.hookgate.child"], stdin=subprocess.PIPE,
                    pass_fds=(self.sock.fileno(), theirs.fileno()), env=_child_env())
            finally:
                theirs_fd = theirs.fileno()
                theirs.close()
            self.children += 1
            self.pid = proc.pid
            try:
                assert proc.stdin is not None
                await proc.stdin.send_all(json.dumps({**self.start, "link_fd": theirs_fd}).encode() + b"\n")
                await proc.stdin.aclose()
                await self._serve(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
            finally:
                with trio.CancelScope(shield=True):
                    if proc.returncode is None:
                        proc.kill()
                    await proc.wait()
                self.pid = None

    async def _serve(self, stream: trio.SocketStream) -> None:
        """Requests in, answers out, until the child's end closes: all the requests one read
        brought are answered in one write."""
        buf = bytearray()
        while data := await stream.receive_some(READ):
            buf += data
            out = []
            while (got := wire.take_request(buf)) is not None:
                out.append(self.answer(*got))
            if out:
                await stream.send_all(b"".join(out))

    def answer(self, seq: int, kind: int, method: str, path: str, headers: wire.Headers, body: bytes) -> bytes:
        """The node's answer to one request the child read, as a frame."""
        started = time.perf_counter()
        extra: wire.Headers = []
        if path[:1] != "/":  # a request line's absolute-form: routed by its path, as Quart does
            path = urlparse(path).path
        parts = hook_parts(path)
        route = UNMATCHED if parts is None else ROUTE
        if kind == wire.TOO_LARGE:
            status, answer = 413, _envelope(413)
            extra = [["connection", "close"]]  # its body was not read: the connection ends
        elif kind == wire.TIMED_OUT:
            status, answer = 408, _timed_out(self.start["body_timeout_s"])
        elif parts is None:
            status, answer = 404, _envelope(404)
        elif method != "POST":
            status, answer, extra = 405, _envelope(405), [["allow", "POST"]]
        else:
            status, answer = self._judged(parts[0], parts[1], headers, body)
        elapsed = time.perf_counter() - started
        self.metrics.answered(route, method, status, elapsed)
        return wire.answer(seq, status, [["content-type", "application/json"], ["content-length", str(len(answer))], *extra,
                                         ["x-process-time", f"{elapsed * 1000:.2f}"]], answer)

    def _judged(self, job_id: str, token: str, headers: wire.Headers, body: bytes) -> tuple[int, bytes]:
        try:
            refusal = self.context.judge(job_id, token, body, {k.lower(): v for k, v in headers})
        except Exception:  # noqa: BLE001 - a verifier's fault: a 500, as on the node's port
            log.exception("engine hook failed")
            return 500, _envelope(500)
        if refusal is None:
            return 200, ANSWER
        status, code, message = refusal
        return status, _envelope(status, code, message)


def _envelope(status: int, code: str | None = None, message: str | None = None) -> bytes:
    if code is None or message is None:
        code, message = REFUSALS[status]
    return as_jsonify(error_body(code, message, str(uuid.uuid4())))


def _timed_out(seconds: float) -> bytes:
    """The node's own 408 for a body past its time (service/http/errors.py, `on_timeout`)."""
    return as_jsonify(timeout_body(seconds))


def _child_env() -> dict[str, str]:
    """Python finds this node's code (wherever it runs from) and nothing else of its
    environment."""
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env

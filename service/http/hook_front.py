"""The engine webhook's accepted case answered in front of Quart (an ASGI middleware).

An engine that reports by webhook (Cog's default) sends one POST a job, each on a new
connection. Through Quart that request cost the node about as much as a job's submit:
a request context, the before- and after-request hooks, the route's dispatch and a
response object, to read a body and put it on a channel. `HookFront` answers the one
case that happens once a job, a well-formed hook with the right token, itself: the same
status, JSON body and headers as the route (`routes/engine_hooks.py`), the same metrics.
Anything else (a wrong token, a bad body, a refused signature, an oversized or unsized
body, another method) goes on to Quart with the body it has read, so every refusal is
the route's own answer (tests/test_hook_front.py compares the two).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from service.digits import ascii_int
from service.engines.context import HOOK_PATH
from service.http.connection import Receive

PREFIX = HOOK_PATH + "/"
ROUTE = f"{PREFIX}<job_id>/<token>"  # the route's template: its metrics label
# Bodies up to the limit of other routes' bodies (an engine's files as data URLs can be
# larger: those go to Quart, whose read they are worth); the body's wait before the rest goes
# to Quart, whose own body timeout then runs (app.py)
FRONT_LIMIT = 1024 * 1024
FRONT_WAIT_S = 10.0


def as_jsonify(obj: Any) -> bytes:
    """`obj` as Quart's jsonify writes it (here, and the hook gate's answers)."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def hook_parts(path: str) -> list[str] | None:
    """[job_id, token] of a hook's path, None for any other path."""
    parts = path[len(PREFIX):].split("/") if path.startswith(PREFIX) else []
    return parts if len(parts) == 2 and all(parts) else None


ANSWER = as_jsonify({"received": True})


class HookFront:
    """Wraps Quart's `asgi_app` (`app.asgi_app = HookFront(app.asgi_app, node)`, as Quart
    documents for middleware). ASGI's scope and messages are plain dicts here (Any)."""

    def __init__(self, app: Any, node: Any) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith(PREFIX):
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        parts = hook_parts(scope["path"])
        size = _length(scope)
        if parts is None or size is None or size > FRONT_LIMIT:
            return await self.app(scope, receive, send)
        body, more, message = b"", True, None
        with trio.move_on_after(FRONT_WAIT_S):
            # the declared length read is the whole body: its end (an empty last message)
            # is not waited for, one scheduler step fewer; a message already queued is
            # taken without one
            while more and len(body) < size:
                message = (receive.queued() if isinstance(receive, Receive) else None) or await receive()
                if message["type"] != "http.request":
                    break
                body += message.get("body", b"")
                more = message.get("more_body", False)
        if len(body) != size or not self._delivered(parts[0], parts[1], scope, body):
            return await self.app(scope, _replay(body, more, message, receive), send)
        elapsed = time.perf_counter() - started
        metrics = self.node.metrics  # counted before the answer goes, as the route's after-request hook does
        metrics.answered(ROUTE, "POST", 200, elapsed)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode()),
            (b"x-process-time", f"{elapsed * 1000:.2f}".encode())]})
        await send({"type": "http.response.body", "body": ANSWER, "more_body": False})

    def _delivered(self, job_id: str, token: str, scope: dict[str, Any], body: bytes) -> bool:
        """Delivered as the route would; False for every case the route answers otherwise."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            return self.node.engines.context.judge(job_id, token, body, headers) is None
        except Exception:  # noqa: BLE001 - a verifier's fault: the route meets it again and answers it
            return False


def _length(scope: dict[str, Any]) -> int | None:
    """The declared body length; None when absent, not a plain number, or overridden by a
    Transfer-Encoding (h11 then frames the body by its chunks: read to the length, the
    front judged a part and left the rest unread on the app's queue)."""
    size = None
    for name, value in scope["headers"]:
        name = name.lower()
        if name == b"content-length":
            size = ascii_int(value, 1 << 62)
            if size is None:
                return None
        elif name == b"transfer-encoding":
            return None
    return size


def _replay(body: bytes, more: bool, last: dict | None, receive: Callable[[], Awaitable[dict]]):
    """`receive` for Quart: the body read so far as one message, then the rest as it comes."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            if last is not None and last["type"] != "http.request":
                return last
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replayed

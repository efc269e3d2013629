"""ComfyUI: the operator's API-format workflow with the request bound into it.

The protocol and its traps are in docs/engines.md; in short:

- The websocket `/ws?clientId=` is opened *before* `POST /prompt`, and the prompt
  carries our `client_id` and our own `prompt_id` (the job id): events for a client
  with no socket are dropped, and a known id lets a restarted node find its job again.
- Finished = the prompt's entry in `/history/{id}`. ComfyUI sends `execution_success`
  (`_error`, `_interrupted`) from inside its executor, *before* it writes the history;
  `executing` with `node: null` after. Every one of them only makes the client look at
  once; while the prompt is still in `/queue` it looks again soon. The socket can go
  silent, drop (it is opened again) or never connect, so `/queue` and `/history/{id}`
  are polled every `poll_s` too.
- `/history/{id}` answers `{}` both while a prompt runs and when it is lost: a prompt
  in neither `/queue` nor the history, read again with a short backoff (`SETTLE_S`), is
  lost (a restart empties both), and fails.
- An identical graph is served from ComfyUI's cache with the old file name; the seed
  binding varies per job (a job without a seed gets one from its id).
- Every read (`/queue`, `/history/{id}`, `/view`) is tried again after a transient fault
  (`common.patiently`, ~30 s in all): a read that fails is not an answer, so it never
  decides "lost". A `POST /prompt` whose answer is lost is not sent again: the prompt is
  looked up by its id and followed when ComfyUI has it.
- Cancel: `POST /queue {"delete": [id]}` (pending) and `POST /interrupt {"prompt_id":
  id}` (running; it lands at the next node boundary). Both are sent; each is a no-op
  when the prompt is not in that state.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
from trio_websocket import (
    ConnectionClosed,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

from service.backends.base import Completed, Output, RenderRequest
from service.digits import ascii_int
from service.catalog.engines import ComfyEngine

from .common import (
    CANCEL_S,
    MAX_OUTPUTS,
    OUTPUT_MAX_BYTES,
    TRANSIENT_STATUS,
    Incomplete,
    NoOutput,
    TooLarge,
    bounded,
    check,
    field_values,
    json_object,
    read,
    shaped,
    store_output,
    store_text,
)
from .context import Context
from .protocol import Job

log = logging.getLogger(__name__)

OUTPUT_KEYS = ("images", "video", "videos", "gifs", "audio")
CONNECT_S = 10.0
END_EVENTS = ("execution_success", "execution_error", "execution_interrupted")
SETTLE_S = (0.1, 0.2, 0.4, 0.8, 1.6)  # re-reads of a prompt in neither queue nor history: 3.1 s
RECONNECT_S = (0.5, 5.0)  # first and largest wait before opening a dropped websocket again

Entry = dict[str, Any]  # a prompt's entry in /history/{id}


class ComfyUI:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def servers(self, cfg: ComfyEngine) -> list[str]:
        return list(cfg.urls)

    async def health(self, cfg: ComfyEngine, url: str) -> bool:
        resp = await bounded(self.ctx.http, "GET", f"{url}/system_stats", timeout=5.0)
        return resp.status_code == 200

    def job(self, cfg: ComfyEngine, job: Job) -> ComfyJob:
        return ComfyJob(self.ctx, cfg, job)


class ComfyJob:
    """The prompt's id is the job id, its client id `genservice-<job id>`."""

    def __init__(self, ctx: Context, cfg: ComfyEngine, job: Job) -> None:
        self.ctx, self.cfg, self.req, self.url, self.tasks = ctx, cfg, job.req, job.url, job.tasks
        self.client_id = f"genservice-{job.req.job_id}"
        self.ended = trio.Event()  # an end event came for our prompt: its history is written within moments
        self.listening = trio.CancelScope()
        self.entry: Entry = {}

    async def submit(self) -> None:
        """The websocket is opened (or given up on) before `POST /prompt`: ComfyUI drops the
        events of a client with no socket."""
        ctx, req, cfg, url = self.ctx, self.req, self.cfg, self.url
        graph = None
        if req.resumed and (await _state(ctx.http, url, req.job_id, cfg))[0] != "lost":
            log.info("job %s: found on %s after a restart; following it", req.job_id, url)
        else:
            graph = await _bound_graph(ctx.http, url, req, cfg)
        parts = urlsplit(url)
        ws_url = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}{parts.path}/ws?clientId={self.client_id}"
        connected = trio.Event()
        self.tasks.start_soon(self._listen, ws_url, connected)
        with trio.move_on_after(cfg.timeout_s):
            await connected.wait()  # connected, or given up on: polling covers both
        if graph is not None:
            await _submit(ctx.http, url, req, cfg, self.client_id, graph)

    async def _listen(self, ws_url: str, connected: trio.Event) -> None:
        with self.listening:
            await _listen(self.ctx, self.req, ws_url, self.ended, connected)

    async def wait(self) -> None:
        """The prompt's history entry once ComfyUI has written it (or Incomplete when lost)."""
        self.entry = await wait_for_entry(self.ctx.http, self.url, self.req.job_id, self.cfg, self.ended)
        self.listening.cancel()

    async def outputs(self) -> Completed:
        return Completed(await _outputs(self.ctx.http, self.url, self.req, self.cfg, self.entry))

    async def cancel(self) -> None:
        await _cancel(self.ctx.http, self.url, self.req.job_id)


async def _bound_graph(http: httpx.AsyncClient, url: str, req: RenderRequest, cfg: ComfyEngine) -> dict[str, Any]:
    graph = copy.deepcopy(cfg.graph)
    values = field_values(req)
    for key, target in cfg.bind.items():
        node_id, name = target.split(".", 1)
        if key.startswith("inputs."):
            files = req.inputs.get(key.removeprefix("inputs."), [])
            if not files:
                continue
            graph[node_id]["inputs"][name] = await _upload(http, url, req, key, files[0].path, files[0].content_type, cfg)
        elif key in values:
            graph[node_id]["inputs"][name] = values[key]
    return graph


async def _upload(http: httpx.AsyncClient, url: str, req: RenderRequest, key: str, path: Path, content_type: str,
                  cfg: ComfyEngine) -> str:
    name = f"genservice-{req.job_id}-{key.removeprefix('inputs.')}{path.suffix or '.png'}"
    data = await trio.to_thread.run_sync(path.read_bytes)
    resp = check(await bounded(http, "POST", f"{url}/upload/image", files={"image": (name, data, content_type)},
                               data={"type": "input", "overwrite": "true"}, timeout=cfg.timeout_s))
    body = json_object(resp)
    return f"{body['subfolder']}/{body['name']}" if body.get("subfolder") else str(body["name"])


async def _submit(http: httpx.AsyncClient, url: str, req: RenderRequest, cfg: ComfyEngine, client_id: str,
                  graph: dict[str, Any]) -> None:
    """POST /prompt once (a second POST would queue the prompt twice). When its answer is
    lost (a timeout, a reset, a 502/503/504 on the way), the prompt may still have been
    queued: it is looked up by its id, and followed if ComfyUI has it."""
    try:
        resp = await bounded(http, "POST", f"{url}/prompt", json={"prompt": graph, "client_id": client_id,
                                                                  "prompt_id": req.job_id}, timeout=cfg.timeout_s)
    except httpx.TransportError as e:
        if not await _was_queued(http, url, req.job_id, cfg):
            raise
        log.info("job %s: the answer to POST /prompt was lost (%s); ComfyUI has the prompt", req.job_id,
                 type(e).__name__)
        return
    if resp.status_code in TRANSIENT_STATUS and await _was_queued(http, url, req.job_id, cfg):
        return
    if resp.status_code == 400:
        log.warning("job %s: ComfyUI refused the workflow: %s", req.job_id, _refusal(resp))
    check(resp)


async def _was_queued(http: httpx.AsyncClient, url: str, prompt_id: str, cfg: ComfyEngine) -> bool:
    """Whether ComfyUI knows the prompt (queued, running or in its history), read again
    with SETTLE_S before saying no."""
    for wait in (*SETTLE_S, None):
        if (await _state(http, url, prompt_id, cfg))[0] != "lost":
            return True
        if wait is not None:
            await trio.sleep(wait)
    return False


async def _listen(ctx: Context, req: RenderRequest, ws_url: str, ended: trio.Event, connected: trio.Event) -> None:
    """Events for our prompt, over a socket that is opened again (same clientId) when it
    drops; polling goes on meanwhile, so an event missed while away costs one poll."""
    wait = RECONNECT_S[0]
    try:
        while await _session(ctx, req, ws_url, ended, connected):
            connected.set()
            await trio.sleep(wait)
            wait = min(wait * 2, RECONNECT_S[1])
    finally:
        connected.set()


async def _session(ctx: Context, req: RenderRequest, ws_url: str, ended: trio.Event, connected: trio.Event) -> bool:
    """One websocket session; True when it ended in a way worth connecting again."""
    again = True
    try:
        async with _websocket(ws_url) as ws:
            connected.set()
            await _read_events(ctx, req, ws, ended)
    except* HandshakeError as group:  # the server refuses websockets: polling alone
        log.info("job %s: ComfyUI refused the websocket (%s); polling instead", req.job_id,
                 type(group.exceptions[0]).__name__)
        again = False
    except* (OSError, ConnectionClosed, trio.TooSlowError, trio.BrokenResourceError, ValueError) as group:
        log.info("job %s: ComfyUI websocket ended (%s); polling, and connecting again", req.job_id,
                 type(group.exceptions[0]).__name__)
    return again


async def _read_events(ctx: Context, req: RenderRequest, ws: WebSocketConnection, ended: trio.Event) -> None:
    """`executing` with `node: null` is sent after the history write; `execution_success`,
    `_error` and `_interrupted` before it (from inside ComfyUI's execute()): all of them
    only tell the poller to look now."""
    while True:
        message = await ws.get_message()
        if not isinstance(message, str):
            continue  # previews (binary frames)
        try:
            event = json.loads(message)
        except (ValueError, RecursionError):
            continue
        data = event.get("data") if isinstance(event, dict) else None
        if not isinstance(data, dict) or data.get("prompt_id") != req.job_id:
            continue  # not ours, or not shaped as ComfyUI's own (a custom node's message): a hint at most
        kind = event.get("type")
        if (kind == "executing" and data.get("node") is None) or kind in END_EVENTS:
            ended.set()
        elif kind == "progress":
            value, maximum = data.get("value", 0), data.get("max", 1)
            if _number(value) and _number(maximum):
                ctx.progress(req, float(value), float(maximum), str(data.get("node")))


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@asynccontextmanager
async def _websocket(ws_url: str) -> AsyncIterator[WebSocketConnection]:
    """A websocket over a TCP stream this module owns and closes: when the server ends the
    connection, trio-websocket's client waits for the server's TCP close and never closes
    its own socket. Leaving, it closes the TCP stream without a close handshake: the socket
    is left when the job's follower is cancelled, which has already stopped the websocket's
    reader task, so a handshake could only wait for a reply nobody reads (a second per job).
    ComfyUI treats it as a client gone, as when a browser tab closes."""
    parts = urlsplit(ws_url)
    host = parts.hostname or ""
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    resource = f"{parts.path or '/'}?{parts.query}" if parts.query else (parts.path or "/")
    with trio.fail_after(CONNECT_S):
        tcp = await trio.open_tcp_stream(host, port)
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] = tcp
    try:
        if secure:
            stream = trio.SSLStream(tcp, ssl.create_default_context(), server_hostname=host)
        async with trio.open_nursery() as n:
            with trio.fail_after(CONNECT_S):
                ws = await wrap_client_stream(n, stream, host, resource)
            try:
                yield ws
            finally:
                n.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def wait_for_entry(http: httpx.AsyncClient, url: str, prompt_id: str, cfg: ComfyEngine,
                         ended: trio.Event) -> Entry:
    """The history entry, read when an end event comes or every `poll_s`. An id in neither
    the queue nor the history is re-read with a short backoff (`SETTLE_S`) before it counts
    as lost; after an end event, a prompt still running (ComfyUI writes its history after
    the event) is looked at again soon, backing off to `poll_s`."""
    misses, soon = 0, SETTLE_S[0]
    while True:
        state, entry = await _state(http, url, prompt_id, cfg)
        if state == "finished":
            return entry
        if state == "lost":
            if misses == len(SETTLE_S):
                raise Incomplete(f"ComfyUI lost prompt {prompt_id} (neither queued nor in its history)")
            await trio.sleep(SETTLE_S[misses])
            misses += 1
            continue
        misses = 0
        if ended.is_set():
            await trio.sleep(soon)
            soon = min(soon * 2, cfg.poll_s)
        else:
            with trio.move_on_after(cfg.poll_s):
                await ended.wait()


async def _state(http: httpx.AsyncClient, url: str, prompt_id: str, cfg: ComfyEngine) -> tuple[str, Entry]:
    """`queued` (pending or running), `finished` (with its history entry) or `lost`. The
    queue is read before the history: ComfyUI moves a prompt from one to the other under
    one lock, so an id in neither after that order is gone (or not yet visible)."""
    queue = json_object(await read(http, f"{url}/queue", cfg.timeout_s))
    for item in [*queue.get("queue_running", []), *queue.get("queue_pending", [])]:
        if len(item) > 1 and item[1] == prompt_id:
            return "queued", {}
    history = json_object(await read(http, f"{url}/history/{prompt_id}", cfg.timeout_s))
    entry = history.get(prompt_id)
    return ("finished", shaped(entry)) if entry else ("lost", {})


async def _outputs(http: httpx.AsyncClient, url: str, req: RenderRequest, cfg: ComfyEngine,
                   entry: Entry) -> list[Output]:
    status = shaped(entry.get("status") or {})
    if status.get("status_str") == "error" or status.get("completed") is False:
        raise Incomplete(f"ComfyUI reported an error: {_last_message(status)}")
    files: list[dict[str, Any]] = []
    texts: list[str] = []
    shaped(entry.get("outputs") or {})
    for _node, produced in sorted((entry.get("outputs") or {}).items(), key=lambda kv: _node_order(kv[0])):
        produced = shaped(produced)
        files += [item for key in OUTPUT_KEYS for item in produced.get(key) or []
                  if isinstance(item, dict) and item.get("type", "output") == "output"]  # previews live in temp
        texts += [t for t in produced.get("text") or [] if isinstance(t, str)]
    if len(files) > MAX_OUTPUTS:
        log.warning("job %s: ComfyUI listed %d files; the first %d are taken", req.job_id, len(files), MAX_OUTPUTS)
    outputs: list[Output] = []
    for item in files[:MAX_OUTPUTS]:
        try:
            resp = await read(http, f"{url}/view", cfg.timeout_s, limit=OUTPUT_MAX_BYTES, params={
                "filename": item["filename"], "subfolder": item.get("subfolder", ""), "type": "output"})
        except TooLarge as e:
            log.warning("job %s: an engine output is not stored: %s", req.job_id, e)
            continue
        out = await store_output(req, len(outputs), resp.content, item["filename"])
        if out is not None:
            outputs.append(out)
    if req.capability == "text.llm" and texts:
        outputs.append(await store_text(req, len(outputs), "\n".join(texts)))
    if not outputs:
        raise NoOutput(f"ComfyUI prompt {req.job_id} produced no stored file")
    return outputs


async def _cancel(http: httpx.AsyncClient, url: str, prompt_id: str) -> None:
    try:
        await bounded(http, "POST", f"{url}/queue", json={"delete": [prompt_id]}, timeout=CANCEL_S)
        await bounded(http, "POST", f"{url}/interrupt", json={"prompt_id": prompt_id}, timeout=CANCEL_S)
    except (httpx.HTTPError, TooLarge) as e:
        log.warning("cancelling prompt %s on %s failed: %s", prompt_id, url, type(e).__name__)


def _node_order(node_id: str) -> tuple[int, str]:
    number = ascii_int(node_id, 1 << 30)
    return (1 << 30, node_id) if number is None else (number, "")


def _last_message(status: dict[str, Any]) -> str:
    for event, data in reversed(status.get("messages") or []):
        if event in ("execution_error", "execution_interrupted"):
            data = shaped(data)
            return f"{event} in node {data.get('node_id')} ({data.get('node_type')}): {data.get('exception_message', '')}"[:300]
    return "unknown"


def _refusal(resp: httpx.Response) -> str:
    try:  # for the log only: an answer of another shape is logged as it came
        body = json_object(resp)
        err = shaped(body.get("error") or {})
        nodes = ", ".join(f"{k}: {shaped(shaped(v).get('errors', [{}])[0]).get('message', '')}"
                          for k, v in shaped(body.get("node_errors") or {}).items())
    except (Incomplete, LookupError, TypeError):
        return resp.text[:300]
    return f"{err.get('type')}: {err.get('message')} {nodes}"[:500]


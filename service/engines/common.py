"""What every engine client shares: the failure kinds, request-field binding, outputs.

An engine client raises one of the errors below; `engines.render` maps it to the
spec's failure message (operations.md, "Engines"), so every engine fails the same way.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpcore
import httpx
import trio

from service.assets.files import hash_bytes
from service.backends.base import InputFile, Output, RenderRequest
from service.catalog.capabilities import BY_ID
from service.catalog.engines import Bound
from service.errors import Unprocessable
from service.media import isolated
from service.net.backend import AddressNotAllowed, GuardedBackend, output_dns_limiter

log = logging.getLogger(__name__)

TEXT_TYPE = "text/plain; charset=utf-8"


class EngineError(Exception):
    """An engine's expected failure; `render` turns it into a failed job."""


class Upstream(EngineError):
    """The engine answered an HTTP error."""

    def __init__(self, status: int, detail: str = "") -> None:
        super().__init__(f"HTTP {status} {detail[:200]}".strip())
        self.status = status


class Unreachable(EngineError):
    """The engine cannot be reached (refused, reset, timed out, every server down)."""


class Incomplete(EngineError):
    """The engine reported an execution error, or lost the job."""


class NoOutput(EngineError):
    """The engine finished without a file this node can store."""


class TooLarge(Incomplete):
    """An engine's answer or file past its bound: read no further (an output file is
    skipped, as one of a type the node does not store)."""


MiB = 1024 * 1024
# What one engine answer may be (JSON, a chat stream): room for files inlined as data URLs
# (a Cog webhook carrying them is at most 51 MiB).
ANSWER_MAX_BYTES = 64 * MiB
OUTPUT_MAX_BYTES = 512 * MiB  # one output file an answer points to (a long video)
MAX_OUTPUTS = 64  # files taken from one job's answer; the rest are logged and dropped


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The error a task group ended with, unwrapped: a client's tasks (a websocket reader, a
    poller) fail one at a time, and callers map single errors."""
    leaves = [e for e in _leaves(group) if not isinstance(e, trio.Cancelled)]
    return leaves[0] if leaves else group


def is_cancel(e: BaseException) -> bool:
    """trio.Cancelled, alone or as every leaf of a task group's error."""
    leaves = list(_leaves(e))
    return bool(leaves) and all(isinstance(x, trio.Cancelled) for x in leaves)


def _leaves(e: BaseException) -> Iterator[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            yield from _leaves(inner)
    else:
        yield e


def auth(scheme: str, token_env: str | None, required: bool = True) -> dict[str, str]:
    """The `Authorization` header with the token in `token_env`, read from the environment
    at each call (the token is in no log or error); none when the variable is unset and the
    engine takes calls without one, else Unreachable."""
    token = os.environ.get(token_env) if token_env else None
    if token:
        return {"Authorization": f"{scheme} {token}"}
    if required:
        raise Unreachable(f"the variable {token_env} is not set")
    return {}


def check(resp: httpx.Response) -> httpx.Response:
    """The response, or Upstream for an HTTP error status."""
    if resp.status_code >= 400:
        raise Upstream(resp.status_code, resp.text)
    return resp


def json_object(answer: httpx.Response | str | bytes) -> dict[str, Any]:
    """An engine answer's JSON object (a response's body, or one message of a stream).
    Answers are parsed here and with `shaped`: an answer of another shape (a list where an
    object belongs, JSON nested thousands deep) is the engine's fault, Incomplete ("could
    not complete"), and no error of the node's own code is mistaken for one."""
    try:
        value = json.loads(answer.content if isinstance(answer, httpx.Response) else answer)  # as httpx's .json()
    except (ValueError, RecursionError) as e:
        raise Incomplete(f"an answer that is not JSON ({type(e).__name__})") from None
    return shaped(value)


def shaped(value: object) -> dict[str, Any]:
    """`value` (a part of an engine's answer) when it is a JSON object, else Incomplete."""
    if not isinstance(value, dict):
        raise Incomplete(f"an answer not shaped as the protocol says ({type(value).__name__} for an object)")
    return value


CANCEL_S = 5.0  # the longest a cancel of a job on its engine may take (shielded from the job's own cancel)
NOT_YET_S = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)  # re-reads of a URL the engine gave but cannot serve yet: 6.3 s
# Waits between tries of a call that met a transient fault (31.75 s in all; a job's own
# timeout cancels it sooner). A job the engine has accepted is not failed at the first
# fault on the way to it: the engine goes on and finishes it.
RETRY_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0)
# Statuses of the path to the engine (a proxy, a load balancer, a server starting), not
# the engine's answer: a 500 is one (fal answers a failed run with it) and is not retried.
TRANSIENT_STATUS = frozenset({502, 503, 504})


async def patiently(send: Callable[[], Awaitable[httpx.Response]],
                    not_yet: Callable[[httpx.Response], bool] | None = None) -> httpx.Response:
    """`send()`'s response (not checked), tried again with RETRY_S after a transient fault
    (connection refused or reset, a timeout, a 502/503/504) and with NOT_YET_S while
    `not_yet` says the answer is not there yet. Only for calls that may be repeated: reads,
    and creates keyed by our own id. After the bound, the last fault stands: a transport
    error is raised, a 5xx answer returned."""
    faults = settles = 0
    while True:
        try:
            resp: httpx.Response | None = await send()
        except httpx.TransportError as e:
            if faults == len(RETRY_S):
                raise
            resp, fault = None, type(e).__name__
        else:
            assert resp is not None
            fault = f"HTTP {resp.status_code}" if resp.status_code in TRANSIENT_STATUS else ""
        if fault and faults < len(RETRY_S):
            wait = RETRY_S[faults]
            faults += 1
            log.info("an engine call met a transient fault (%s); trying again in %s s", fault, wait)
        elif resp is not None and not_yet is not None and not_yet(resp) and settles < len(NOT_YET_S):
            wait = NOT_YET_S[settles]
            settles += 1
        else:
            assert resp is not None
            return resp
        await trio.sleep(wait)


async def bounded(http: httpx.AsyncClient, method: str, url: str, *, limit: int = ANSWER_MAX_BYTES,
                  **kwargs: Any) -> httpx.Response:
    """`http.request(method, url, **kwargs)` with its body read up to `limit` bytes
    (`capped`). An engine's answer is read whole by every call, so an endless or huge one
    would otherwise take the node's memory."""
    async with http.stream(method, url, **kwargs) as resp:
        body = bytearray()
        async for chunk in capped(resp, limit):
            body += chunk
    # the response itself, its body as read (decoded): a Response built anew would gain a
    # Content-Length the server may not have sent, or lose its Content-Encoding
    resp._content = bytes(body)
    return resp


async def capped(resp: httpx.Response, limit: int) -> AsyncIterator[bytes]:
    """A streamed response's body, at most `limit` bytes in all as decoded (a compressed body
    counts as what it inflates to), else TooLarge. At the bound the connection is closed
    under the response and read on to the failure that follows: httpx's and httpcore's body
    generators then end, where leaving the loop would leave them to the GC (trio warns)."""
    seen, over = 0, False
    try:
        async for chunk in resp.aiter_bytes():
            seen += len(chunk)
            if over:
                continue  # what was buffered before the close
            if seen > limit:
                over = True
                stream = resp.extensions.get("network_stream")
                if stream is None:  # not on a socket (a mock transport): the body ends when closed
                    await resp.aclose()
                else:
                    await stream.aclose()
                continue
            yield chunk
    except httpx.TransportError:
        if not over:
            raise
    if over:
        raise TooLarge(f"an answer over {limit} bytes")


async def read(http: httpx.AsyncClient, url: str, timeout_s: float, headers: dict[str, str] | None = None,
               params: dict[str, str] | None = None, limit: int = ANSWER_MAX_BYTES) -> httpx.Response:
    """GET of a job's state or file (idempotent): transient faults tried again (`patiently`)."""
    return check(await patiently(lambda: bounded(http, "GET", url, headers=headers, params=params,
                                                 timeout=timeout_s, limit=limit)))


async def get_settled(http: httpx.AsyncClient, url: str, timeout_s: float, headers: dict[str, str] | None = None,
                      not_yet: Callable[[httpx.Response], bool] | None = None,
                      limit: int = ANSWER_MAX_BYTES) -> httpx.Response:
    """GET a URL the engine itself just returned (a status URL after a submit, an output
    file after `succeeded`): hosted APIs answer 404 while a new object propagates, so a
    404 (or what `not_yet` says) is read again with a short backoff before it counts;
    transient faults are tried again as `patiently` says."""

    def later(resp: httpx.Response) -> bool:
        return resp.status_code == 404 or (not_yet is not None and not_yet(resp))

    return check(await patiently(lambda: bounded(http, "GET", url, headers=headers, timeout=timeout_s, limit=limit),
                                 later))


# -- binding request fields --------------------------------------------------------------------
_LONG = {"1k": 1024, "2k": 2048, "4k": 4096}
_SHORT = re.compile(r"^(\d{3,4})p$")
_EXACT = re.compile(r"^(\d{2,5})x(\d{2,5})$")


def dimensions(resolution: str, aspect_ratio: str | None) -> tuple[int, int]:
    """Width and height for a tier: `1k`/`2k`/`4k` give the long side, `720p` the short
    side, `1024x768` itself; the aspect ratio (default 1:1) shapes the others. Sides are
    multiples of 8, as diffusion graphs want."""
    exact = _EXACT.match(resolution)
    if exact:
        return int(exact.group(1)), int(exact.group(2))
    w, h = (int(x) for x in (aspect_ratio or "1:1").split(":"))
    short_m = _SHORT.match(resolution)
    if resolution in _LONG:
        long = _LONG[resolution]
        short = round(long * min(w, h) / max(w, h) / 8) * 8
    elif short_m:
        short = int(short_m.group(1))
        long = round(short * max(w, h) / min(w, h) / 8) * 8
    else:
        raise Unprocessable(f"resolution {resolution!r} gives no width and height")
    return (long, short) if w >= h else (short, long)


def field_values(req: RenderRequest) -> dict[str, object]:
    """The request fields a `[models.engine.bind]` table may name, with their values."""
    values: dict[str, object] = {"prompt": req.prompt, "seed": req.seed}
    if req.aspect_ratio is not None:
        values["aspect_ratio"] = req.aspect_ratio
    if req.duration is not None:  # a job's is whole seconds (the submit rules): an int, as engines take it
        values["duration"] = req.duration
    try:
        values["width"], values["height"] = dimensions(req.resolution, req.aspect_ratio)
    except Unprocessable:
        pass
    return values


def inputs_of(req: RenderRequest, cfg: Bound) -> dict[str, Any]:
    """The request fields and input assets a `[models.engine.bind]` table names, by the
    engine's input names (an input asset as a data URL): for engines that take JSON."""
    values = field_values(req)
    out: dict[str, Any] = {}
    for key, name in cfg.bind.items():
        if key.startswith("inputs."):
            files = req.inputs.get(key.removeprefix("inputs."), [])
            if files:
                out[name] = data_url(files[0])
        elif key in values:
            out[name] = values[key]
    return out


async def bound_inputs(req: RenderRequest, cfg: Bound) -> dict[str, Any]:
    """`inputs_of` in a worker thread when it has input files to read, else in this task
    (a thread hop costs the event loop more than binding a prompt and a seed), after a
    cancel check as the hop had: a cancel that came before lands here, before the create
    (without a scheduler step: nothing here waits)."""
    if any(key.startswith("inputs.") and req.inputs.get(key.removeprefix("inputs.")) for key in cfg.bind):
        return await trio.to_thread.run_sync(inputs_of, req, cfg)
    await trio.lowlevel.checkpoint_if_cancelled()
    return inputs_of(req, cfg)


def data_url(f: InputFile) -> str:
    """An input asset as a data URL (engines that take URLs read these)."""
    return f"data:{f.content_type};base64," + base64.b64encode(f.path.read_bytes()).decode()


# -- outputs -----------------------------------------------------------------------------------
async def store_output(req: RenderRequest, index: int, data: bytes, name: str = "") -> Output | None:
    """Write one returned file under the job's work dir and check it (in a worker process,
    service/media/isolated.py); None (logged) when it is not a kind this node stores."""
    suffix = Path(name).suffix[:8] if name else ""
    path = Path(req.work_dir) / f"out-{index}{suffix}"
    try:
        digest, info = await isolated.write_and_check(path, data)
    except Unprocessable as e:
        log.warning("job %s: an engine output is not stored: %s", req.job_id, e.message)
        return None
    kind = "mask" if BY_ID[req.capability].output == "mask" and info.kind == "image" else info.kind
    return Output(path, info.content_type, kind, info.width, info.height, info.duration_s, info.frames, digest)


async def store_text(req: RenderRequest, index: int, text: str) -> Output:
    """A `text.llm` reply (or any text output) as a UTF-8 text asset."""
    path = Path(req.work_dir) / f"out-{index}.txt"
    data = text.encode("utf-8")

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    await trio.to_thread.run_sync(write)
    return Output(path, TEXT_TYPE, "text", None, None, None, digest=hash_bytes(data))


def decode_data_url(url: str) -> bytes | None:
    """The bytes of a base64 data URL, or None when `url` is not one."""
    m = re.match(r"^data:[^,;]*(;[^,]*)?;base64,", url)
    if not m:
        return None
    try:
        return base64.b64decode(url[m.end():], validate=False)
    except ValueError:
        return None


async def collect(http: httpx.AsyncClient, req: RenderRequest, output: object, timeout_s: float,
                  api: str | None = None, allow_private: bool = False) -> list[Output]:
    """The files of a model's output (Cog, Replicate, fal: any JSON): the data URLs and
    http(s) URLs in it, the first MAX_OUTPUTS, fetched (at most OUTPUT_MAX_BYTES each) and
    stored. A `text.llm` model's output is its reply: its strings are text, never fetched
    (a reply is what a prompt asked for, and a URL in it is no file of the operator's).
    `api`: a hosted API's base URL. Its output URLs are chosen by a model's author, not by
    the operator: one off the API's own origin is fetched with the SSRF guard of outgoing
    webhooks (`_guarded`): only from a public address, unless `allow_private` (the
    operator's GENSERVICE_WEBHOOK_ALLOW_PRIVATE: private addresses are fine here)."""
    try:
        strings = _strings(output)
    except RecursionError:  # an output nested thousands deep
        raise Incomplete("an output nested too deep") from None
    if req.capability == "text.llm":
        if not "".join(strings):
            raise NoOutput(f"job {req.job_id}: the engine returned no text")
        return [await store_text(req, 0, "".join(strings))]
    files = [s for s in strings if s.startswith(("data:", "http://", "https://"))]
    if len(files) > MAX_OUTPUTS:
        log.warning("job %s: the engine returned %d files; the first %d are taken", req.job_id, len(files),
                    MAX_OUTPUTS)
    outputs: list[Output] = []
    for value in files[:MAX_OUTPUTS]:
        try:
            data = (decode_data_url(value) if value.startswith("data:")
                    else await _download(http, value, timeout_s, api, allow_private))
        except (TooLarge, AddressNotAllowed, httpx.InvalidURL) as e:
            log.warning("job %s: an engine output is not stored: %s %s", req.job_id, type(e).__name__, e)
            continue
        out = None if data is None else await store_output(req, len(outputs), data)
        if out is not None:
            outputs.append(out)
    if not outputs:
        raise NoOutput(f"job {req.job_id}: the engine returned no file")
    return outputs


async def _download(http: httpx.AsyncClient, url: str, timeout_s: float, api: str | None,
                    allow_private: bool = False) -> bytes:
    if not httpx.URL(url).host:  # "https://" alone (a model's text): no server to ask, not a fault to retry
        raise httpx.InvalidURL("an output URL without a host")
    if api is None or _origin(url) == _origin(api):
        return (await get_settled(http, url, timeout_s, limit=OUTPUT_MAX_BYTES)).content
    async with _guarded(allow_private) as guarded:
        return (await get_settled(guarded, url, timeout_s, limit=OUTPUT_MAX_BYTES)).content


def _origin(url: str) -> tuple[str, str, int | None]:
    u = httpx.URL(url)
    return u.scheme, u.host, u.port


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()  # about 0.1 s of CPU to make: one for every guarded fetch


@asynccontextmanager
async def _guarded(allow_private: bool = False) -> AsyncIterator[httpx.AsyncClient]:
    """A client that connects to public addresses only unless `allow_private`
    (service/net/guard.py: no private, loopback or link-local address such as
    169.254.169.254, whatever a name resolves to), follows no redirect and uses no
    environment proxy, as webhook deliveries do; its one connection is closed after. Its
    lookups take threads of their own (`output_dns_limiter`), not the webhooks': slow names
    of either never hold up the other."""
    transport = httpx.AsyncHTTPTransport(verify=_tls())
    transport._pool = httpcore.AsyncConnectionPool(  # httpx takes no network backend (transport.py does the same)
        ssl_context=_tls(), max_connections=1, max_keepalive_connections=0,
        network_backend=GuardedBackend(allow_private=allow_private, limiter=output_dns_limiter()))
    async with httpx.AsyncClient(transport=transport, follow_redirects=False) as client:
        yield client


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []

"""The engine client's connection pool, as several small pools (shards).

httpcore's pool looks at every pooled connection on each request it queues and each
response it closes (and, for each idle one, counts them all again): the work per
request grows with the square of the pool's size. A node in front of one engine server
that runs 64 jobs at once keeps about 64 connections to it, and that scan was the largest
single cost of a job in the node (bench/README.md, "Where a job's time goes").

`Sharded` splits the same limits over a few ordinary `httpx.AsyncHTTPTransport`s. A server
(an origin) has a home shard (by hash) and goes on to the next shards in turn while it has
SPILL_AT requests of its own in flight in the one it tries (8: a 64-slot server's share of a
shard); past every shard, to the one where it has the fewest. So a server with a request or
two at a time always meets its own idle connections in its home shard (many servers spread
over the shards, as they shared the one pool), and one server running 64 jobs fills the
shards evenly. Each shard's pool is then small, and a response's connection goes back to its
shard's pool when the response is closed.

Every connection the node may open may also stay open while idle (MAX_KEEPALIVE is the
connection cap, so each shard keeps up to 32), until httpcore's keep-alive expiry (5 s).
With 64 kept in all (8 a shard), and a spill decided by all the requests in a shard rather
than the server's own, a fleet of 64 single-slot servers (a create or a health check in
flight now and then each) had idle connections closed as surplus and opened again: 0.63 new
connections a job, about 1.8 ms of the node's CPU a job (bench/README.md, "Throughput XVIII").

Each shard's connections send a request's head and body in one write (`one_send`).
`send_plain` skips the client's layers for the hottest engine call.

`engine_client` makes it the client's transport, for every URL no environment proxy covers
(NO_PROXY hosts included), and mounts a proxy transport per proxy the environment names
(HTTP_PROXY, HTTPS_PROXY, ALL_PROXY), read by httpx's own reader: a client given a
`transport` would otherwise drop them.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from functools import lru_cache, partial
from json import dumps as json_dumps
from typing import Any, NamedTuple

import httpcore
import httpx
from httpx._transports.default import (
    map_httpcore_exceptions,  # how httpx's transport maps httpcore's errors
)
from httpx._utils import (
    get_environment_proxies,  # the reader httpx uses for a client of its own
)

from service.catalog.engines import ENGINE_CONNECTIONS

from .common import ANSWER_MAX_BYTES, TooLarge, capped
from .http_pool import Pool
from .one_send import OneSendBackend

SHARDS = 8
SPILL_AT = 8  # a server's own requests in flight on a shard before it tries the next (module docstring)
MAX_CONNECTIONS = MAX_KEEPALIVE = ENGINE_CONNECTIONS


def engine_client() -> httpx.AsyncClient:
    """The node's client for engine calls: through `Sharded`, or through the proxy the
    environment names for the URL (with the same limits), as httpx itself would route it."""
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE)
    proxies: dict[str, httpx.AsyncBaseTransport | None] = {
        pattern: None if url is None else httpx.AsyncHTTPTransport(proxy=url, limits=limits)
        for pattern, url in get_environment_proxies().items()}  # None: a NO_PROXY host, the default transport
    # no `limits=` here: a client given its transport and mounts does not read it
    return httpx.AsyncClient(follow_redirects=False, timeout=30.0,
                             transport=Sharded(MAX_CONNECTIONS, MAX_KEEPALIVE), mounts=proxies)


async def send_plain(client: httpx.AsyncClient, method: str, url: str, *, json: Any = None,
                     headers: dict[str, str] | None = None, timeout: float | httpx.Timeout,
                     limit: int = ANSWER_MAX_BYTES) -> httpx.Response:
    """One request, read in full (at most `limit` bytes as received and as decoded, else
    TooLarge, as `common.bounded` reads every other engine answer), handed straight to the
    transport `client` routes its URL to (its shards, or the environment's proxy): without
    the client's own layers (cookies, the auth flow, redirects, default headers, event
    hooks), which cost about 9 % of the node's CPU a job on the one engine call every Cog
    job makes (bench/README.md, "Throughput IV"). Only for calls that need none of them. Errors are httpx's own, as from
    the client (the transport maps httpcore's).

    To the shards, a URL whose path httpx would send as it is (`_split`) also skips httpx's
    request and response layers: its origin is parsed once (`_origin`), the request goes to
    the shard's httpcore pool as httpx's transport would build it (the same head, bytes for
    bytes), and the response is built from the body read (its `request` made only when asked
    for). httpx parsed the whole URL again for every call, character by character
    (bench/README.md, "Throughput XXI")."""
    split = _split(url)
    if split is not None:
        origin = _origin(split[0])
        transport = client._transport_for_url(origin.url)
        if isinstance(transport, Sharded):
            content = b"" if json is None else _json_body(json)
            sent = [(b"Host", origin.netloc)]
            sent += [(k.encode("ascii"), v.encode("ascii")) for k, v in (headers or {}).items()]  # as httpx encodes them
            if json is not None:
                sent += [(b"Content-Length", str(len(content)).encode()), (b"Content-Type", b"application/json")]
            elif method in ("POST", "PUT", "PATCH"):
                sent.append((b"Content-Length", b"0"))
            status, got, body, extensions = await transport.plain(
                method, origin, split[1], sent, content, _timeouts(timeout), limit)
            # stream=, not content=: httpx adds a Content-Length header to a `content=` response
            encoded = any(k.lower() == b"content-encoding" for k, _ in got)
            answer = _Answer(status, headers=got, stream=_Pieces(body) if encoded else httpx.ByteStream(body),
                             extensions=extensions)
            answer.ask = (method, url, json, headers, timeout)
            _read_within(answer, limit)
            return answer
    request = httpx.Request(method, url, json=json, headers=headers, extensions=_timeouts(timeout))
    response = await client._transport_for_url(request.url).handle_async_request(request)
    response.request = request
    try:
        response._content = b"".join([chunk async for chunk in capped(response, limit)])
    finally:
        await response.aclose()
    return response


def _read_within(answer: httpx.Response, limit: int) -> None:
    """`answer.read()`, at most `limit` bytes as decoded: a server may compress though asked
    for no encoding, and a small body may inflate without end."""
    parts, seen = [], 0
    for part in answer.iter_bytes():
        seen += len(part)
        if seen > limit:
            answer.close()
            raise TooLarge(f"an answer over {limit} bytes")
        parts.append(part)
    answer._content = b"".join(parts)


class _Pieces(httpx.SyncByteStream):
    """A compressed body read whole, given to httpx's decoder 64 KiB at a time, so that
    `_read_within` sees what each piece inflates to before the next."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def __iter__(self) -> Iterator[bytes]:
        view = memoryview(self.body)
        for i in range(0, len(view), 65536):
            yield bytes(view[i:i + 65536])


_PLAIN_TARGET = re.compile(r"/[A-Za-z0-9/_.~-]*")  # no query, nothing httpx escapes


def _split(url: str) -> tuple[str, str] | None:
    """(origin, path) of an http(s) URL whose path httpx would send as it is, else None
    (httpx also removes `.` and `..` segments: a path with a segment that starts with a dot
    goes its way)."""
    scheme = url.find("://")
    slash = url.find("/", scheme + 3) if scheme > 0 else -1
    if slash < 0 or not _PLAIN_TARGET.fullmatch(url, slash) or url.find("/.", slash) >= 0:
        return None
    return url[:slash], url[slash:]


class Origin(NamedTuple):
    url: httpx.URL
    key: tuple[str, str, int | None]  # as `Sharded.pick` counts a server
    core: tuple[bytes, bytes, int | None]  # httpcore's scheme, host and port
    netloc: bytes  # the Host header httpx sends


@lru_cache(maxsize=1024)
def _origin(origin: str) -> Origin:
    url = httpx.URL(origin)
    return Origin(url, (url.scheme, url.host, url.port), (url.raw_scheme, url.raw_host, url.port), url.netloc)


def _timeouts(timeout: float | httpx.Timeout) -> dict[str, dict[str, float | None]]:
    """A request's timeout extension, as httpx's client gives it."""
    return {"timeout": httpx.Timeout(timeout).as_dict()}


def _json_body(value: Any) -> bytes:
    """A JSON body as httpx 0.28 encodes `json=` (compact, UTF-8, no NaN)."""
    return json_dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


async def _read_core(response: httpcore.Response, limit: int) -> bytes:
    """An httpcore response's body, at most `limit` bytes, else TooLarge. At the bound its
    connection is closed and read on to the failure that follows, as `common.capped` does:
    httpcore's body generator then ends, where leaving the loop would leave it to the GC."""
    parts, seen, over = [], 0, False
    try:
        async for part in response.aiter_stream():
            seen += len(part)
            if over:
                continue  # what was buffered before the close
            if seen > limit:
                over = True
                await response.extensions["network_stream"].aclose()
                continue
            parts.append(part)
    except httpcore.NetworkError:
        if not over:
            raise
    if over:
        raise TooLarge(f"an answer over {limit} bytes")
    return b"".join(parts)  # as httpcore's aread joins them


class _Answer(httpx.Response):
    """A plain send's response; its `request` (what httpx would have sent) built when read."""

    ask: tuple[str, str, Any, dict[str, str] | None, float | httpx.Timeout]

    @property
    def request(self) -> httpx.Request:
        if self._request is None:
            method, url, body, headers, timeout = self.ask
            self._request = httpx.Request(method, url, json=body, headers=headers,
                                          extensions=_timeouts(timeout))
        return self._request

    @request.setter
    def request(self, value: httpx.Request) -> None:
        self._request = value


class Sharded(httpx.AsyncBaseTransport):
    def __init__(self, max_connections: int, max_keepalive_connections: int, shards: int = SHARDS,
                 spill_at: int = SPILL_AT) -> None:
        per = httpx.Limits(max_connections=-(-max_connections // shards),
                           max_keepalive_connections=-(-max_keepalive_connections // shards))
        tls = httpx.create_ssl_context()  # what each would make alone (~0.1 s of CPU each): one for all
        self.shards = [_shard(tls, per) for _ in range(shards)]
        # requests in flight (sent, their response not closed) per server (origin) and shard,
        # only while the server has any: output URLs name any host, so one with none is forgotten
        self.load: dict[tuple[str, str, int | None], list[int]] = {}
        self.spill_at = max(1, spill_at)  # a server's own in flight before it tries the next shard

    @property
    def busy(self) -> list[int]:
        """Requests in flight per shard, every server's together."""
        return [sum(shard) for shard in zip(*self.load.values())] if self.load else [0] * len(self.shards)

    def pick(self, origin: tuple[str, str, int | None]) -> tuple[int, list[int]]:
        """The shard for a request to `origin` (module docstring), and the origin's counts."""
        mine = self.load.get(origin)
        if mine is None:
            mine = self.load[origin] = [0] * len(self.shards)
        n = len(mine)
        home = hash(origin) % n
        for k in range(n):
            i = (home + k) % n
            if mine[i] < self.spill_at:
                return i, mine
        return mine.index(min(mine)), mine

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port)
        i, mine = self.pick(origin)
        mine[i] += 1
        try:
            resp = await self.shards[i].handle_async_request(request)
        except BaseException:
            self._done(origin, mine, i)
            raise
        assert isinstance(resp.stream, httpx.AsyncByteStream)
        resp.stream = _Counted(resp.stream, partial(self._done, origin, mine, i))
        return resp

    async def plain(self, method: str, origin: Origin, target: str, headers: list[tuple[bytes, bytes]],
                    content: bytes, extensions: dict[str, Any], limit: int = ANSWER_MAX_BYTES
                    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, MutableMapping[str, Any]]:
        """`send_plain`'s request on a shard's httpcore pool, as httpx's transport sends it:
        (status, headers, body read in full, extensions); httpcore's errors raised as httpx's.
        A body past `limit` bytes is TooLarge: its connection is closed, not read on."""
        i, mine = self.pick(origin.key)
        mine[i] += 1
        scheme, host, port = origin.core
        request = httpcore.Request(method, httpcore.URL(scheme=scheme, host=host, port=port, target=target),
                                   headers=headers, content=content, extensions=extensions)
        try:
            with map_httpcore_exceptions():
                response = await self.shards[i]._pool.handle_async_request(request)
                try:
                    body = await _read_core(response, limit)
                finally:
                    await response.aclose()
        finally:
            self._done(origin.key, mine, i)
        return response.status, response.headers, body, response.extensions

    def _done(self, origin: tuple[str, str, int | None], mine: list[int], i: int) -> None:
        """A request's slot given back: its response closed, or it failed."""
        mine[i] -= 1
        if not any(mine) and self.load.get(origin) is mine:
            del self.load[origin]

    async def aclose(self) -> None:
        for shard in self.shards:
            await shard.aclose()


def _shard(tls: ssl.SSLContext, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose pool sends each request in one write (`one_send`) and gives
    an idle connection to one request at a time (`http_pool`). httpx does not take a network
    backend, so its pool is replaced by one built as httpx 0.28 builds it for a transport
    without a proxy."""
    shard = httpx.AsyncHTTPTransport(verify=tls, limits=limits)
    shard._pool = Pool(
        ssl_context=tls, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=OneSendBackend())
    return shard


class _Counted(httpx.AsyncByteStream):
    """A response body that gives its shard's slot back when closed (once)."""

    def __init__(self, stream: httpx.AsyncByteStream, done: Callable[[], None]) -> None:
        self._stream, self._done = stream, done
        self._open = True

    def __aiter__(self) -> AsyncIterator[bytes]:  # the shard's own iterator: no extra step per chunk
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._done()
        await self._stream.aclose()

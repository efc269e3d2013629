"""One outgoing POST per webhook delivery, with a hard time limit and an SSRF guard.

Built on httpcore (the layer under httpx) rather than httpx.AsyncClient: the
client layer adds cookies, redirects and environment proxies, all of which a
webhook sender must switch off, while the transport layer is where the
address guard plugs in (a custom network backend).

Each post gets its own connection pool with no keep-alive. Nothing is shared
between posts except the SSL context, so a hanging or cancelled attempt can
never hold up or poison another one, and every socket is closed when the
post returns.
"""

from __future__ import annotations

import http
import socket
import ssl
from dataclasses import dataclass

import httpcore
import trio

from service.net.backend import AddressNotAllowed, GuardedBackend
from service.net.urls import parse_url

BODY_CAP = 64 * 1024  # response bytes read before the connection is dropped
_FRAMING = {"content-length", "transfer-encoding"}  # set by us from the body, never by callers


@dataclass(frozen=True)
class Outcome:
    """What happened to one delivery attempt."""

    is_delivered: bool  # a 2xx status arrived
    status_code: int | None  # None when no response arrived
    error: str | None  # human text, e.g. "500 Internal Server Error"
    error_class: str | None  # timeout, connection, tls, blocked_address, non_2xx, invalid_url
    duration_ms: int


REFUSED = ("blocked_address", "address not allowed")
UNRESOLVED = ("connection", "could not resolve host")


class Sender:
    """Posts webhook bodies. Create one per process; it only holds the SSL context."""

    def __init__(self, *, allow_private: bool, ca_file: str | None, user_agent: str = "genservice"):
        self._allow_private = allow_private
        self._user_agent = user_agent
        self._ssl_context = ssl.create_default_context()
        if ca_file:
            self._ssl_context.load_verify_locations(cafile=ca_file)
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], *, timeout: float = 10.0
    ) -> Outcome:
        """POST `body` to `url`; always returns within `timeout` seconds (plus a hair)."""
        if self._closed:
            raise RuntimeError("Sender is closed")
        started = trio.current_time()

        def outcome(status: int | None, error_class: str | None, error: str | None) -> Outcome:
            delivered = status is not None and 200 <= status < 300
            if status is not None and not delivered:
                error_class, error = "non_2xx", _status_text(status)
            elif delivered:
                error_class = error = None
            duration_ms = round((trio.current_time() - started) * 1000)
            return Outcome(delivered, status, error, error_class, duration_ms)

        target = parse_url(url)
        if target is None:
            return outcome(None, "invalid_url", "invalid URL")

        backend = GuardedBackend(allow_private=self._allow_private)
        progress = _Progress()
        failure: tuple[str, str] | None = None
        try:
            with trio.move_on_after(timeout) as scope:
                try:
                    await self._exchange(backend, target, body, headers, progress)
                except Exception as exc:  # only network trouble is classified
                    if progress.status is None:
                        failure = _classify(exc)
                        if failure is None:
                            raise
        finally:
            await backend.close_all()
        if progress.status is not None:
            return outcome(progress.status, None, None)
        if scope.cancelled_caught:
            return outcome(None, "timeout", f"timed out after {timeout:g} s")
        assert failure is not None
        if failure == UNRESOLVED and not self._allow_private:
            # a name that does not resolve gets the answer of a name that resolves to a refused
            # address: otherwise the answer tells a caller which internal names exist
            failure = REFUSED
        return outcome(None, *failure)

    async def _exchange(self, backend, target, body, headers, progress: _Progress) -> None:
        """Send the request and read at most BODY_CAP bytes of the answer.

        The status goes into `progress` as soon as it arrives: once it is in,
        trouble while reading the body (timeout, reset) no longer changes the
        outcome.
        """
        given = {name.lower() for name in headers}
        request_headers = {
            name: value
            for name, value in (("User-Agent", self._user_agent), ("Connection", "close"))
            if name.lower() not in given
        }
        for name, value in headers.items():
            if name.lower() not in _FRAMING:
                request_headers[name] = value
        request_headers["Content-Length"] = str(len(body))
        async with httpcore.AsyncConnectionPool(
            ssl_context=self._ssl_context,
            network_backend=backend,
            max_connections=1,
            max_keepalive_connections=0,
            http1=True,
            http2=False,
        ) as pool:
            async with pool.stream(
                "POST",
                target,
                headers=list(request_headers.items()),
                content=_Body(body),  # type: ignore[arg-type]  # an async iterable, see _Body
            ) as response:
                progress.status = response.status
                await _read_some(response, backend)


class _Progress:
    status: int | None = None


class _Body:
    """The request body for httpcore, as a plain iterator rather than bytes.

    Given bytes, httpcore wraps them in an async generator; when the server
    hangs up mid-send that generator is left half-run and trio warns when it
    is collected. An iterator object has nothing to finalize.
    """

    def __init__(self, data: bytes):
        self._data = data

    def __aiter__(self):
        return _Once(self._data)


class _Once:
    def __init__(self, data: bytes):
        self._data: bytes | None = data or None

    async def __anext__(self) -> bytes:
        if self._data is None:
            raise StopAsyncIteration
        data, self._data = self._data, None
        return data


async def _read_some(response: httpcore.Response, backend: GuardedBackend) -> None:
    """Read up to BODY_CAP bytes and drop them; the rest is never read.

    At the cap the socket is closed under httpcore rather than leaving the
    loop with `break`: the read then fails at once (at most already-buffered
    bytes come first) and the failure unwinds httpcore's nested body
    generators, which a `break` would leave for the garbage collector.
    """
    received = 0
    try:
        async for chunk in response.aiter_stream():
            received += len(chunk)
            if received >= BODY_CAP:
                await backend.close_all()
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.TimeoutException):
        pass


def _status_text(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown Status"


def _chain(exc: BaseException):
    """The exception, its causes and contexts, and members of exception groups."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]
        todo += list(getattr(current, "exceptions", ()))


def _classify(exc: Exception) -> tuple[str, str] | None:
    """Map a failed attempt to (error_class, error text); None if not network trouble."""
    if isinstance(exc, AddressNotAllowed):
        return REFUSED
    causes = list(_chain(exc))
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = cause.verify_message or ""
            return "tls", "TLS certificate verify failed" + (f": {detail}" if detail else "")
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            return "tls", f"TLS handshake failed: {cause.reason or cause}"
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            return UNRESOLVED
        if isinstance(cause, ConnectionRefusedError):
            return "connection", "connection refused"
        if isinstance(cause, ConnectionResetError):
            return "connection", "connection reset"
    if isinstance(exc, httpcore.RemoteProtocolError):
        if "disconnected" in str(exc).lower():
            return "connection", "server closed the connection without a response"
        return "connection", "invalid HTTP response"
    if isinstance(exc, httpcore.TimeoutException):
        return "timeout", "timed out"
    if isinstance(exc, httpcore.ConnectError):
        return "connection", "could not connect"
    if isinstance(exc, (httpcore.ReadError, httpcore.WriteError)):
        return "connection", "connection lost"
    if isinstance(exc, OSError):
        return "connection", f"connection failed: {exc.strerror or exc}"
    return None

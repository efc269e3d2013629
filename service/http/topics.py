"""The event streams a route can answer with, shared by the API's stream routes
(service/http/routes/events.py) and the dashboard's (Studio, a product run, History): one
definition of each topic, its current state and its end; only `allowed` differs (an API
key's permission, or the browser session's). The stream itself is service/streams/sse.py.
"""

from __future__ import annotations

import weakref
from typing import Callable

from quart import Response, request

from service.http.auth import node, principal
from service.http.bodies import ClosingBody
from service.http.browser import current_session
from service.machines import JOB, RUN
from service.streams.limits import Owner
from service.streams.sse import Stream, events
from service.views import run_feed

FEED_PAGE = 50


def owner() -> Owner:
    """The caller the stream counts against: its API key, or its browser session."""
    p = principal()
    session = current_session() if p.key_id is None else None
    return Owner(p.org_id, p.key_id, session.id if session is not None else None)


def respond(stream: Stream) -> Response:
    """The stream as a response, once the caller is under every stream limit (else 429/503)."""
    hub = node().streams
    ticket = hub.limits.admit(owner())
    # a body never started (the client left first) runs no `finally`: ClosingBody gives
    # its place back however it ends (service/http/bodies.py)
    body = ClosingBody(events(hub, stream, request.headers.get("Last-Event-ID"), ticket), ticket.release)
    weakref.finalize(body, ticket.release)  # and one dropped unclosed (no node connection served it)
    response = Response(body, status=200, content_type="text/event-stream; charset=utf-8")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # proxies: pass each event on at once
    response.timeout = None  # a stream lasts as long as it has something to follow
    return response


def job_stream(job_id: str, org_id: str, allowed: Callable) -> Stream:
    gen = node().generation
    return Stream(
        key=f"job:{job_id}",
        current=lambda: [("status", gen.status(job_id, org_id) or {})],
        final=lambda name, data: name == "status" and data.get("status") in JOB.final,
        allowed=allowed,
    )


def run_stream(run_id: str, org_id: str, allowed: Callable) -> Stream:
    products = node().products
    return Stream(
        key=f"run:{run_id}",
        current=lambda: [("run", products.get(org_id, run_id))],
        final=lambda name, data: name == "run" and data.get("status") in RUN.final,
        allowed=allowed,
    )


def project_stream(project_id: str, source: str | None, allowed: Callable, page: int = FEED_PAGE) -> Stream:
    """Every job and run change of a project; first the first page of its runs feed."""
    products = node().products
    return Stream(
        key=f"project:{project_id}",
        current=lambda: [("feed", run_feed.page(products, project_id, source, page, None))],
        final=lambda name, data: False,
        allowed=allowed,
        source=source,
    )

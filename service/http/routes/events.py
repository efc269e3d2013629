"""Event streams (`text/event-stream`): one job, one product run, or every job and run of a
project. docs/streams.md has the event names, payloads and resume rules.

Same authentication and permission as the status routes (`generation:read`); a job or run
of another organization is 404 like its status route. The stream itself is
service/streams/sse.py; these routes only find the topic and the current state.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from quart import Blueprint, Response, request

from service.views import run_feed
from service.errors import NotFound
from service.http.auth import node, principal, requires, resolve_project, still_allowed
from service.http.schemas import Query, query
from service.machines import JOB, RUN
from service.streams.sse import Stream, events

bp = Blueprint("events", __name__)

FEED_PAGE = 50


class EventsQuery(Query):
    project: str | None = Field(default=None, description="Project id or slug (else X-Service-Project, "
                                "else the default project).")
    source: Literal["api", "studio", "workflow"] | None = Field(
        default=None, description="Only jobs of this source (workflow: product runs and their step jobs).")


def _respond(stream: Stream) -> Response:
    hub = node().streams
    body = events(hub, stream, request.headers.get("Last-Event-ID"))
    response = Response(body, status=200, content_type="text/event-stream; charset=utf-8")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # proxies: pass each event on at once
    response.timeout = None  # a stream lasts as long as it has something to follow
    return response


@bp.get("/v1/generation/requests/<job_id>/events")
@requires("generation:read")
async def job_events(job_id: str):
    gen, org_id = node().generation, principal().org_id
    if gen.status(job_id, org_id) is None:
        raise NotFound("Generation request not found.")
    return _respond(Stream(
        key=f"job:{job_id}",
        current=lambda: [("status", gen.status(job_id, org_id) or {})],
        final=lambda name, data: name == "status" and data.get("status") in JOB.final,
        allowed=still_allowed(),
    ))


@bp.get("/v1/workflows/runs/<run_id>/events")
@requires("generation:read")
async def run_events(run_id: str):
    products, org_id = node().products, principal().org_id
    products.get(org_id, run_id)  # 404 for a run of another organization
    return _respond(Stream(
        key=f"run:{run_id}",
        current=lambda: [("run", products.get(org_id, run_id))],
        final=lambda name, data: name == "run" and data.get("status") in RUN.final,
        allowed=still_allowed(),
    ))


@bp.get("/v1/events")
@requires("generation:read")
@query(EventsQuery)
async def project_events(q: EventsQuery):
    project_id = resolve_project(q.project)["id"]
    products, source = node().products, q.source

    def current() -> list[tuple[str, dict]]:
        """The first page of the project's runs feed (`GET /v1/runs`), read once."""
        return [("feed", run_feed.page(products, project_id, source, FEED_PAGE, None))]

    return _respond(Stream(
        key=f"project:{project_id}",
        current=current,
        final=lambda name, data: False,
        allowed=still_allowed(),
        source=source,
    ))

"""Event streams (`text/event-stream`): one job, one product run, or every job and run of a
project. docs/streams.md has the event names, payloads and resume rules.

Same authentication and permission as the status routes (`generation:read`); a job or run
of another organization is 404 like its status route. The stream itself is
service/streams/sse.py; these routes only find the topic and the current state.
"""

from __future__ import annotations


from pydantic import Field
from quart import Blueprint

from service.errors import NotFound
from service.http.auth import node, principal, requires, resolve_project, still_allowed
from service.http.schemas import Query, documented, query
from service.views.shapes import SOURCES, SourceName
from service.http.topics import job_stream, project_stream, respond, run_stream

bp = Blueprint("events", __name__)

class EventsQuery(Query):
    project: str | None = Field(default=None, description="Project id or slug (else X-Service-Project, "
                                "else the default project).")
    source: SourceName | None = documented(
        {"enum": list(SOURCES)}, None, "Only jobs of this source (workflow: product runs and their step jobs).")


@bp.get("/v1/generation/requests/<job_id>/events")
@requires("generation:read")
async def job_events(job_id: str):
    org_id = principal().org_id
    if not node().generation.exists(job_id, org_id):
        raise NotFound("Generation request not found.")
    return respond(job_stream(job_id, org_id, still_allowed()))


@bp.get("/v1/workflows/runs/<run_id>/events")
@requires("generation:read")
async def run_events(run_id: str):
    org_id = principal().org_id
    node().products.get(org_id, run_id)  # 404 for a run of another organization
    return respond(run_stream(run_id, org_id, still_allowed()))


@bp.get("/v1/events")
@requires("generation:read")
@query(EventsQuery)
async def project_events(q: EventsQuery):
    project_id = resolve_project(q.project)["id"]
    return respond(project_stream(project_id, q.source, still_allowed()))

"""Generation: capabilities, models, submit (both routes), estimate, requests, status, cancel.

Submit, status and cancel answer bare objects; the rest `{data: ...}`. A submit is checked
in the spec's fixed order: project -> model -> availability -> prompt -> aspect_ratio ->
resolution -> duration -> quality -> inputs -> price -> credits (402, nothing created).

Beyond the spec: an optional `Idempotency-Key` header on both submit routes (see
`service.http.idempotency`).
"""

from __future__ import annotations


from pydantic import Field
from quart import Blueprint, request
from quart_schema import document_headers

from service.catalog.capabilities import ASPECT_RATIOS, CAPABILITIES, PROMPT_MAX_CHARS
from service.catalog.request import SubmitRequest
from service.errors import NotFound
from service.http.auth import principal, requires, resolve_project, node
from service.http.responses import Capability, Data, Estimate, Model
from service.http.idempotency import SubmitHeaders, idempotency_key
from service.http.topics import owner
from service.http.wait import final_status, place, route_limit, wanted_wait
from service.http.schemas import LIMIT, STR, Body, Query, body, clamp, documented, nullable, query
from service.idempotency import request_hash
from service.views.shapes import JobStatus, SubmitAccepted

bp = Blueprint("generation", __name__)

# the 202 (accepted; or not final within a `Prefer: wait`), or the 200 final status of a wait
Submitted = tuple[SubmitAccepted, int] | tuple[SubmitAccepted | JobStatus, int, dict[str, str]]




class SubmitBody(Body):
    prompt: str | None = Field(default=None, description="Required non-empty when the capability's "
                               "prompt_required is true; at most 10,000 characters (422 beyond).",
                               json_schema_extra={"maxLength": PROMPT_MAX_CHARS})  # checked by the submit rules
    aspect_ratio: str | None = documented(nullable({"enum": list(ASPECT_RATIOS)}), None)
    model: str | None = Field(default=None, description="Model id; default: the capability's first "
                              "available model.")
    resolution: str | None = None
    duration: int | float | None = Field(default=None, description="Seconds; one the model lists.")
    quality: str | None = Field(default=None, description="No model takes it today (422).")
    inputs: dict[str, list[str]] | None = Field(default=None, description="Slot name -> asset ids or "
                                                "asset URLs returned by this API, of the job's project.")
    webhook_url: str | None = documented(
        nullable({"type": "string", "description": "Job webhook URL; only https URLs are called (any other "
                  "string is stored and never called)."}), None, "Job webhook; only https URLs are called.")
    project_id: str | None = documented(nullable(STR), None, "Project id or slug.")
    seed: int | None = Field(default=None, ge=0, le=2 ** 31 - 1, description="Optional render seed.")

    def request(self) -> SubmitRequest:
        """The settings the submit rules check (the project and the webhook are the route's)."""
        return SubmitRequest(prompt=self.prompt, model=self.model, aspect_ratio=self.aspect_ratio,
                             resolution=self.resolution, duration=self.duration, quality=self.quality,
                             inputs=self.inputs, seed=self.seed)


class EstimateBody(SubmitBody):
    capability: str | None = documented(
        nullable({"enum": [c.id for c in CAPABILITIES], "description": "Capability id; or give `model` (neither: 422)."}),
        None, "Capability id; or give `model`.")


class ListQuery(Query):
    limit: int | None = documented(LIMIT, None, "Default 50; clamped to 1..200.")
    project_id: str | None = Field(default=None, description="Project id or slug (else "
                                   "X-Service-Project, else the default project).")


def gen():
    return node().generation


@bp.get("/v1/generation/capabilities")
@requires("generation:read")
async def capabilities() -> Data[list[Capability]]:
    return {"data": gen().capabilities_view()}


@bp.get("/v1/generation/models")
@requires("generation:read")
async def models() -> Data[list[Model]]:
    return {"data": gen().models_view()}



async def _submit(data: SubmitBody, *, capability: str | None = None,
                  model: str | None = None) -> Submitted:
    p = principal()
    g = gen()
    submitted = data.request()

    async def make(idempotency: dict | None) -> SubmitAccepted:
        project = resolve_project(data.project_id, write=True)
        plan = g.plan(p.org_id, project["id"], capability=capability, model=model, request=submitted)
        g.check_active_limit(p.org_id)
        return await g.submit(plan, org_id=p.org_id, project_id=project["id"], source="api",
                              webhook_url=data.webhook_url, idempotency=idempotency, api_key_id=p.key_id)

    key = idempotency_key()
    seconds = wanted_wait()
    ticket = place(node().streams, owner()) if seconds else None
    try:
        if key is None:
            accepted = await make(None)
        else:
            route = f"capabilities/{capability}" if capability is not None else f"models/{model}"
            fields = data.model_dump(exclude_unset=True)
            digest = request_hash({"route": route, "body": fields,
                                   "project": request.headers.get("X-Service-Project")})
            accepted = await g.idempotent(p.org_id, key, digest, make)
        if ticket is None:
            return accepted, 202
        applied = {"Preference-Applied": f"wait={seconds}"}
        final = await final_status(g, node().streams, accepted["request_id"], p.org_id, seconds)
        if final is not None:
            return final, 200, applied
        return accepted, 202, applied
    finally:
        if ticket is not None:
            ticket.release()


@bp.post("/v1/generation/capabilities/<capability>")
@requires("generation:write", limit=route_limit)
@document_headers(SubmitHeaders)
@body(SubmitBody)
async def submit_capability(capability: str, data: SubmitBody) -> Submitted:
    """Submit a job to a capability (its first available model unless `model` is given).

    202 with `{status, request_id, status_url, cancel_url, credits_estimate}`. Optional
    header Idempotency-Key: same key and same request within 24 h returns the first answer
    and creates nothing new; same key with another request is a 422. Optional header
    `Prefer: wait=N` (at most 60 s): 200 with the job's final status object when it ends in
    time, else the 202 (service/http/wait.py).
    """
    return await _submit(data, capability=capability)


@bp.post("/v1/generation/models/<model>")
@requires("generation:write", limit=route_limit)
@document_headers(SubmitHeaders)
@body(SubmitBody)
async def submit_model(model: str, data: SubmitBody) -> Submitted:
    """Submit a job to a model. Same body, answer and Idempotency-Key rules as the
    capability route."""
    return await _submit(data, model=model)


@bp.post("/v1/generation/estimate")
@requires("generation:read")
@body(EstimateBody)
async def estimate_route(data: EstimateBody) -> Data[Estimate]:
    """The submit's price without creating anything: the submit body plus `capability` or
    `model`; answers `{data: {capability, model, resolution, duration, credits, tier}}`."""
    resolve_project(data.project_id)
    return {"data": gen().estimate(data.request(), capability=data.capability)}


@bp.get("/v1/generation/requests")
@requires("generation:read")
@query(ListQuery)
async def list_requests(q: ListQuery) -> Data[list[JobStatus]]:
    project = resolve_project(q.project_id)
    return {"data": gen().list_statuses(project["id"], clamp(q.limit, 50, 1, 200))}


@bp.get("/v1/generation/requests/<job_id>/status")
@requires("generation:read")
async def request_status(job_id: str) -> JobStatus:
    status = gen().status(job_id, principal().org_id)
    if status is None:
        raise NotFound("Generation request not found.")
    return status


@bp.post("/v1/generation/requests/<job_id>/cancel")
@requires("generation:write")
async def cancel_request(job_id: str) -> JobStatus:
    return await gen().cancel(principal().org_id, job_id)

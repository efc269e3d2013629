"""The generation facade: what routes and the products engine call for jobs.

Interfaces
==========

`node.generation` is a `Generation` (this module); `node.jobs` its `JobRegistry`
(key = job id). The HTTP routes and the products engine use the facade, never the rows:

    plan = gen.plan(org_id, project_id, capability="image.generate", model=None,
                    request=SubmitRequest(prompt=...))
        The submit rules in the spec's order (model -> availability -> prompt -> aspect_ratio
        -> resolution -> duration -> quality -> inputs -> price); raises 404/422/503 as
        `service.errors` exceptions. The project must already be resolved (404/409 first).
    resp = await gen.submit(plan, org_id=..., project_id=..., source="api",
                            webhook_url=None, workflow_run_id=None, notify=None)
        Places the hold (402 InsufficientCredits, then 402 SpendLimitReached of the key
        given as `api_key_id=`, then of the project, create nothing: no job row, no hold),
        persists the job `queued`, answers the 202 body `{status, request_id, status_url,
        cancel_url, credits_estimate}`.
        `job_id=` lets the caller choose the id (a product step records it first); a Submit
        for an id that already has a job answers that job's 202 body and creates nothing
        (its `notify` is registered as by `watch`), so a step may re-send it after an
        AskTimeout. (Equivalent: `await
        gen.jobs.ask(job_id, Submit(org_id, project_id, plan, source, workflow_run_id, ...))`.)
    status = gen.status(job_id, org_id=None)        bare status object, or None
    status = await gen.cancel(org_id, job_id)       spec's cancel rules; 404 NotFound
    await gen.watch(job_id, notify)                 see below

For a product step (products engineer), submit with `source="workflow"`,
`workflow_run_id=run_id` and `notify=callback`. `notify(status_object)` is called exactly
once per registration, synchronously inside the job actor, with the final status object
(completed, failed, nsfw or canceled) right after that status is committed; it must not
block: make it `lambda st: node.runs.tell(run_id, StepJobEnded(key, st))` (asks flow
run -> job -> balance; a job only ever *tells* the run). Watchers are kept by the job's
actor: they pass to its successor after a crash (`JobActor.adopt`), not across a node
restart; after a restart the run actor re-registers with `await gen.watch(job_id, notify)`, which calls
`notify` at once when the job is already final, so no ending is missed. To stop a step,
`await gen.cancel(org_id, job_id)` (the hold is released; a render already running ends
later with its output discarded). Holds of workflow jobs carry `workflow_run_id`.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Callable

import trio

from service.actors.balance.messages import Release
from service.actors.jobs.actor import JobActor
from service.actors.jobs.context import JobContext
from service.actors.jobs.messages import Cancel, Notify, Progress, SlotGranted, Submit, Watch
from service.actors.jobs.queues import EngineQueues
from service.actors.jobs.record import job_status
from service.actors.jobs.slots import ModelSlots
from service.actors.jobs.uploads import CommitUpload, UploadsActor
from service.actors.runtime import Registry
from service.assets import StoreUnavailable, open_store
from service.assets.signing import UrlSigner, load_secret
from service.backends import RenderRequest, render_limiter, runnable
from service.backends.base import ChatTurn
from service.catalog.assets import AssetInfo
from service.catalog.catalog import Model
from service.catalog.request import SubmitRequest
from service.catalog.rules import Plan, estimate, plan_submit
from service.errors import NotFound, ServiceError
from service.idempotency import Gate
from service.limits import check_active_jobs
from service.media import isolated
from service.media.gate import DecodeGate
from service.media.inspect import MediaInfo
from service.senders.job_webhooks import JobWebhooks
from service.storage import generation as sql
from service.storage import retention as retention_sql
from service.views import jobs as views
from service.views.catalog_shapes import Capability, Estimate
from service.views.catalog_shapes import Model as ModelView
from service.views.shapes import JobStatus

log = logging.getLogger(__name__)

FINAL = views.FINAL


class Generation:
    """The node's generation part: catalog, job registry, slots, files, signer, webhooks,
    and the uploads registry (uploads.py). It reads rows and sends the job actors
    messages; what a job owns lives in its actor."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.settings = node.settings
        self.store = node.store
        self.clock = node.clock
        self.catalog = node.catalog
        self.base_url: str = node.settings.public_base_url
        self.files = open_store(node.settings)
        self.signer = UrlSigner(load_secret(node.settings.data_dir), self.base_url, node.clock)
        self.jobs: Registry[JobActor] = Registry("jobs", lambda key: JobActor(self.context), node.clock)
        self.uploads: Registry[UploadsActor] = Registry(
            "uploads", lambda key: UploadsActor(self.store, self.files), node.clock)
        self.slots = ModelSlots(self._capacity, lambda job_id: self.jobs.tell(job_id, SlotGranted()))
        self.streams = node.streams
        self.decodes = DecodeGate()  # large decodes: one at a time, organizations in turn
        self.webhooks = JobWebhooks(node.store, node.clock, lambda: node.sender)
        self.keys = Gate(node.store, node.clock, table="idempotency_keys", id_field="job_id", detail="request_id")
        # engine models' waits and servers (the model list's `queue`, /metrics); pools are
        # read from node.engines, built after this part
        self.queues = EngineQueues(lambda: self.catalog, self.slots, lambda: node.engines.pools)
        # job id -> the model as it was when the job was submitted, for jobs open across a
        # catalog reload (service/reload.py); every other job reads the catalog
        self.pinned: dict[str, Model] = {}
        self.chat_turns: dict[str, ChatTurn] = {}  # job id -> its front-door chat (service/http/openai_chat.py)
        self.context = JobContext(
            store=node.store, clock=node.clock, base_url=self.base_url, test_mode=node.settings.test_mode,
            balances=node.balances, jobs=self.jobs, slots=self.slots, queues=self.queues, files=self.files,
            streams=node.streams, metrics=node.metrics, keys=self.keys,
            # CPU-bound render threads at once, per node (a limiter belongs to one trio run)
            render_limiter=render_limiter(),
            engine_render=lambda req, model: node.engines.render(req, model),  # engines: built after this part
            model_for=self.model_for, unpin=lambda job_id: self.pinned.pop(job_id, None),
            chat_for=lambda job_id: self.chat_turns.get(job_id), can_render=self.can_render)

    def model_for(self, job_id: str, model_id: str) -> Model | None:
        """The model definition a job runs with: the one it was submitted under."""
        pinned = self.pinned.get(job_id)
        return pinned if pinned is not None else self.catalog.model(model_id)

    def engine_progress(self, req: RenderRequest, value: float, maximum: float, step: str | None) -> None:
        """An engine's progress message, to the job's actor (it keeps it while rendering)."""
        actor = self.jobs.peek(req.job_id)
        if actor is not None and actor.render is not None:
            self.jobs.tell(req.job_id, Progress(value, maximum, step))

    def runnable(self, model: Model) -> bool:
        ok: bool = self.node.runnable(model)
        return ok

    def can_render(self, model_id: str, backend: str) -> bool:
        """Whether a job left queued or rendering by a restart can still run here."""
        m = self.catalog.model(model_id)
        if m is None or m.backend != backend:
            return runnable(backend)  # a built-in the catalog no longer lists still runs
        return m.engine is not None or runnable(m.backend)

    def _capacity(self, model_id: str) -> int:
        """Jobs of a model rendering at once: `concurrency` per engine server (one server
        for built-ins)."""
        m = self.catalog.model(model_id)
        return m.concurrency * m.servers if m is not None else 1

    # reads ----------------------------------------------------------------------------------
    def exists(self, job_id: str, org_id: str) -> bool:
        """Whether `org_id` has the job: from its live actor's record while it runs (an event
        stream asks just after the submit), else from the store."""
        actor = self.jobs.peek(job_id)
        if actor is not None and actor.job is not None:
            return actor.job.organization_id == org_id
        return sql.job_in_org(self.store, org_id, job_id) is not None

    def open_in(self, job_id: str, org_id: str) -> bool:
        """Whether `org_id`'s job is open by its live actor's record. The actor makes its
        record final before it publishes the final status (`JobActor._finish`), so a
        subscriber that finds it open here hears of the end on its subscription."""
        actor = self.jobs.peek(job_id)
        job = actor.job if actor is not None else None
        return job is not None and job.organization_id == org_id and not job.final

    def status(self, job_id: str, org_id: str | None = None) -> JobStatus | None:
        job = sql.get_job(self.store, job_id) if org_id is None else sql.job_in_org(self.store, org_id, job_id)
        if job is None:
            return None
        actor = self.jobs.peek(job_id)
        return job_status(self.store, self.base_url, job, actor.progress if actor is not None else None)

    def list_statuses(self, project_id: str, limit: int) -> list[JobStatus]:
        jobs = sql.list_jobs(self.store, project_id, limit)
        outputs = sql.assets_of_jobs(self.store, [j["id"] for j in jobs])
        return [views.status_object(j, outputs[j["id"]], self.base_url) for j in jobs]

    def resolve_inputs(self, org_id: str) -> Callable[[list[str]], dict[str, AssetInfo]]:
        def resolve(ids: list[str]) -> dict[str, AssetInfo]:
            return {r["id"]: AssetInfo(r["id"], r["kind"], r["project_id"], r["width"], r["height"],
                                         r["duration_s"], r["frames"])
                    for r in sql.assets_in_org(self.store, org_id, ids)}
        return resolve

    def capabilities_view(self) -> list[Capability]:
        view: list[Capability] = self.catalog.capabilities_view(self.runnable)
        return view

    def models_view(self) -> list[ModelView]:
        """The catalog's list; an engine model also carries `queue` (engine_queue.py)."""
        out: list[ModelView] = self.catalog.models_view(self.runnable)
        for item in out:
            queue = self.queues.view(item["id"])
            if queue is not None:
                item["queue"] = queue
        return out

    def estimate(self, request: SubmitRequest, *, capability: str | None = None) -> Estimate:
        """`{capability, model, resolution, duration, credits, tier}` for a submit request on
        `capability`, else on the request's `model`; the submit's rules except prompt and
        inputs; creates nothing."""
        return estimate(self.catalog, capability=capability, model=None, request=request, runnable=self.runnable)

    def check_active_limit(self, org_id: str) -> None:
        """429 when the organization already has its limit of API and dashboard jobs queued
        or rendering (service/limits.py)."""
        limit = self.settings.max_active_jobs_per_org
        if limit > 0:
            check_active_jobs(sql.active_jobs(self.store, org_id), limit)

    async def inspect_upload(self, path: Path, declared_type: str | None, org_id: str) -> MediaInfo:
        """What an uploaded file is (service.media.inspect, in a worker process:
        service/media/isolated.py); 422 when it is not accepted. An image, or a video
        frame, over LARGE_DECODE pixels (read from its header first) decodes only with a
        slot of the node's decode gate, shared by the organizations in turn
        (service/media/gate.py): a 40-megapixel decode holds about 500 MB, so uploads in
        parallel would otherwise add up to gigabytes."""
        pixels = await isolated.pixels(path)
        async with self.decodes.slot(org_id, pixels):
            return await isolated.check_file(path, declared_type)

    # writes ---------------------------------------------------------------------------------
    def plan(self, org_id: str, project_id: str, *, capability: str | None = None, model: str | None = None,
             request: SubmitRequest) -> Plan:
        return plan_submit(self.catalog, capability=capability, model=model, request=request, runnable=self.runnable,
                           resolve_inputs=self.resolve_inputs(org_id), project_id=project_id,
                           base_url=self.base_url)

    async def submit(self, plan: Plan, *, org_id: str, project_id: str, source: str = "api",
                     webhook_url: str | None = None, workflow_run_id: str | None = None,
                     notify: Notify | None = None, idempotency: dict[str, Any] | None = None,
                     job_id: str | None = None, api_key_id: str | None = None) -> dict[str, Any]:
        job_id = job_id or str(uuid.uuid4())
        accepted: dict[str, Any] = await self.jobs.ask(
            job_id, Submit(org_id, project_id, plan, source, workflow_run_id, webhook_url, notify, idempotency,
                           api_key_id))
        return accepted

    async def idempotent(self, org_id: str, key: str | None, request_hash: str | None, make: Callable[..., Any]) -> dict[str, Any]:
        """`await make(claim)` once per (organization, key) within 24 h: the one flow of
        service/idempotency.py (`Gate.once`), as run starts use it. The same key with the same
        request hash returns the first 202 body (no second job or hold); with another: 422."""
        return await self.keys.once(org_id, key, request_hash, make)

    async def cancel(self, org_id: str, job_id: str) -> dict[str, Any]:
        job = sql.job_in_org(self.store, org_id, job_id)
        if job is None:
            raise NotFound("Generation request not found.")
        if job["status"] in FINAL:
            return self.status(job_id)  # type: ignore[return-value]
        status: dict[str, Any] = await self.jobs.ask(job_id, Cancel(org_id))
        return status

    async def watch(self, job_id: str, notify: Notify) -> None:
        await self.jobs.ask(job_id, Watch(notify))

    async def commit_upload(self, org_id: str, row: dict[str, Any], temp: Path) -> dict[str, Any]:
        """Hand an uploaded file (complete in `temp`) and its asset row to the organization's
        uploads actor: from this call on it owns the temp file (service/actors/jobs/uploads.py)."""
        asset: dict[str, Any] = await self.uploads.ask(org_id, CommitUpload(row, temp), timeout=60.0)
        return asset

    # start ----------------------------------------------------------------------------------
    async def recover(self) -> None:
        """At start, before HTTP: finish interrupted uploads, clear render scratch space,
        recover the webhook outbox, continue every open job, settle every open hold."""
        files = self.files
        await trio.to_thread.run_sync(files.clear_work)
        try:
            await trio.to_thread.run_sync(files.check)
            orphans = await trio.to_thread.run_sync(files.remove_unreferenced, retention_sql.content_shas(self.store))
        except StoreUnavailable as e:  # the node still starts; uploads answer 503 until it is back
            log.error("assets: %s; uploads and job outputs fail until it answers", e)
            orphans = 0
        if orphans:
            log.info("assets: %d content files no asset names were removed", orphans)
        parts = [p.name.removesuffix(".part") for p in files.tmp.iterdir()]
        shas = {r["id"]: r["sha256"] for r in sql.assets_by_ids(self.store, parts)} if parts else {}
        placed, dropped = await trio.to_thread.run_sync(files.recover_uploads, shas.get)
        if placed or dropped:
            log.info("uploads: %d finished, %d dropped after a stop", placed, dropped)
        await self.keys.purge()
        await self.webhooks.recover()
        for hold in sql.orphan_holds(self.store):
            log.info("hold %s has no job (stopped while submitting); releasing it", hold["id"])
            try:
                await self.node.balances.ask(hold["organization_id"], Release(hold["id"]))
            except ServiceError as e:
                log.error("hold %s: release failed: %r", hold["id"], e)
        rows = sql.jobs_to_recover(self.store)
        for job in rows:
            if job["status"] in ("queued", "rendering"):
                self.slots.acquire(job["model"], job["id"])  # the line keeps this order
        for job in rows:
            self.jobs.get(job["id"])  # the actor loads and resumes itself (its Resume message)
        if rows:
            log.info("generation: %d jobs resumed or settled after a stop", len(rows))

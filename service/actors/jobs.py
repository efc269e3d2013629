"""Generation jobs: one actor per job, a per-model slot line, renders off the actor loop.

Interfaces
==========

`node.generation` is a `Generation` (this module); `node.jobs` its `JobRegistry`
(key = job id). The HTTP routes and the products engine use the facade, never the rows:

    plan = gen.plan(org_id, project_id, capability="image.generate", model=None, body={...})
        The submit rules in the spec's order (model -> availability -> prompt -> aspect_ratio
        -> resolution -> duration -> quality -> inputs -> price); raises 404/422/503 as
        `service.errors` exceptions. The project must already be resolved (404/409 first).
    resp = await gen.submit(plan, org_id=..., project_id=..., source="api",
                            webhook_url=None, workflow_run_id=None, notify=None)
        Places the hold (402 InsufficientCredits creates nothing: no job row, no hold),
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
run -> job -> balance; a job only ever *tells* the run). Watchers are kept on the registry
(`node.jobs.watchers`): they survive a job actor's crash and reload, not a node
restart; after a restart the run actor re-registers with `await gen.watch(job_id, notify)`, which calls
`notify` at once when the job is already final, so no ending is missed. To stop a step,
`await gen.cancel(org_id, job_id)` (the hold is released; a render already running ends
later with its output discarded). Holds of workflow jobs carry `workflow_run_id`.

Job lifecycle (machines.JOB)
============================

- Submit: PlaceHold(hold_id, price, job_id, workflow_run_id, project_id) through the
  balance actor *first* (it carries the job id); then the job row (and the idempotency
  row, if any) in one transaction. If that write fails, the hold is released.
- The job asks `ModelSlots` for a render slot of its model (fair FIFO, `concurrency` per
  model from the catalog). When granted: queued -> rendering (committed), and a render
  task in the registry's background nursery runs `backends.render` (worker thread) and
  reports `RenderDone` back as a message, so Cancel is handled at once.
- Completion: output files are hashed (worker thread), placed content-addressed under
  DATA_DIR/assets/, then one transaction writes the asset rows, the final status,
  `credits.actual`, `finished_at` and the job-webhook outbox row; then the hold is
  captured (completed) or released (failed, nsfw, canceled) and `hold_settled` recorded.
  A settle that fails is retried every few seconds and again at the next start.
- Cancel: queued -> canceled (hold released, no webhook); rendering -> canceled at once
  (hold released; the render task is cancelled and its output discarded; the webhook row
  waits until the render has ended, then is sent with the canceled status); final ->
  unchanged. The actor finishes (`done`) once final, settled and no render is left.
- Recovery (`Generation.recover`, a `node.recoveries` step): every queued or rendering
  job continues (rendering ones first, then queued, oldest first, through the same slot
  line; built-in models re-render); a job whose backend is not runnable here fails with
  failure message 5 and releases its hold; final jobs with an unsettled hold are settled.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import trio

from service.views import jobs as views
from service.actors.billing_messages import Capture, PlaceHold, Release
from service.actors.job_slots import ModelSlots
from service.actors.job_uploads import UploadsActor
from service.senders.job_webhooks import JobWebhooks
from service.actors.runtime import Actor, Registry
from service.assets.files import FileStore, hash_file
from service.assets.signing import UrlSigner, load_secret
from service.backends import MSG_INCOMPLETE, MSG_INTERNAL, Completed, Failed, Flagged, InputFile, RenderRequest, render, render_limiter, runnable
from service.idempotency import TTL_S as IDEMPOTENCY_TTL, KeyedLocks, replay
from service.catalog.assets import AssetInfo
from service.catalog.catalog import tier_label
from service.catalog.rules import Plan, estimate, plan_submit
from service.clock import parse_iso
from service.crash import crashpoint
from service.errors import ActorGone, ApiError, AskTimeout, InsufficientCredits, NotFound, ServiceError
from service.machines import JOB
from service.limits import check_active_jobs
from service.media.inspect import MediaInfo, image_pixels, inspect_file
from service.storage import generation as sql
from service.storage import idempotency as idem_sql
from service.storage import retention as retention_sql

log = logging.getLogger(__name__)

FINAL = views.FINAL
SETTLE_RETRY_S = 5.0
DEFAULT_TIMEOUT_S = 600  # a job whose model left the catalog
LARGE_DECODE = 4_000_000  # pixels; larger images decode one at a time (inspect_upload)
Notify = Callable[[dict], None]


# -- messages ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    org_id: str
    project_id: str
    plan: Plan
    source: str = "api"
    workflow_run_id: str | None = None
    webhook_url: str | None = None
    notify: Notify | None = None
    idempotency: dict | None = None  # {organization_id, key, request_hash}


@dataclass(frozen=True)
class Cancel:
    org_id: str | None = None


@dataclass(frozen=True)
class Watch:
    notify: Notify


@dataclass(frozen=True)
class Resume:
    """Continue after a load (start, crash reload): render, settle, or finish."""


@dataclass(frozen=True)
class SlotGranted:
    pass


@dataclass(frozen=True)
class RenderDone:
    token: Any
    outcome: Completed | Failed | Flagged | None  # None: the render was cancelled
    hashed: list = field(default_factory=list)  # [(Output, sha256, size)] for Completed


class RenderHandle:
    """A running (or finished but not yet reported) render of one job."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()


# -- the registry -----------------------------------------------------------------------------
class JobRegistry(Registry):
    """The job actors, plus a background nursery for render tasks and side tasks (the
    webhook dispatcher). `renders[job_id]` is the job's render until the actor has taken
    its `RenderDone`, so an actor reloaded after a crash adopts it instead of starting
    another."""

    def __init__(self, factory, clock) -> None:
        super().__init__("jobs", factory, clock)
        self.renders: dict[str, RenderHandle] = {}
        self.watchers: dict[str, list[Notify]] = {}  # job id -> notify callbacks (survive reloads)
        self.side_tasks: list[Callable] = []
        self.background: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as bg:
            self.background = bg
            await bg.start(Registry.run, self)
            for task in self.side_tasks:
                await bg.start(task)
            task_status.started()


async def _render_task(gen: Generation, job_id: str, handle: RenderHandle, req: RenderRequest) -> None:
    outcome: Completed | Failed | Flagged | None = None
    hashed: list = []
    try:
        with handle.scope:
            model = gen.catalog.model(req.model)
            if model is not None and model.engine is not None:
                outcome = await gen.node.engines.render(req, model)
            else:
                outcome = await render(req, limiter=gen.render_limiter)
            if isinstance(outcome, Completed):
                hashed = await trio.to_thread.run_sync(_hash_outputs, outcome.outputs, abandon_on_cancel=True)
    except Exception:  # noqa: BLE001 - reported as failure 5
        log.exception("job %s: render task failed", job_id)
        outcome, hashed = Failed(MSG_INTERNAL), []
    if handle.scope.cancelled_caught:
        outcome, hashed = None, []
    gen.jobs.tell(job_id, RenderDone(handle, outcome, hashed))


def _hash_outputs(outputs) -> list:
    out = []
    for o in outputs:
        sha, size = hash_file(o.path)
        out.append((o, sha, size))
    return out


# -- the actor --------------------------------------------------------------------------------
class JobActor(Actor):
    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.job: dict | None = None
        self.retry_at: float | None = None

    # state helpers
    @property
    def job_id(self) -> str:
        return self.key  # type: ignore[return-value]

    def _final(self) -> bool:
        return self.job is not None and self.job["status"] in FINAL

    def _maybe_done(self) -> None:
        if self.job is None or (self._final() and self.job["hold_settled"] and self.job_id not in self.gen.jobs.renders):
            self.done = True

    def next_deadline(self) -> float | None:
        due = [t for t in (self.retry_at, self._render_deadline()) if t is not None]
        return min(due) if due else None

    def _render_deadline(self) -> float | None:
        """When a rendering job with no outcome fails: its start plus the model's timeout."""
        job = self.job
        if job is None or job["status"] != "rendering" or not job["started_at"]:
            return None
        model = self.gen.catalog.model(job["model"])
        return parse_iso(job["started_at"]) + (model.timeout_s if model else DEFAULT_TIMEOUT_S)

    async def on_deadline(self) -> None:
        render_due = self._render_deadline()
        if render_due is not None and self.gen.clock.now() >= render_due:
            await self._time_out()
        if self.retry_at is not None and self.gen.clock.now() >= self.retry_at:
            self.retry_at = None
            await self._settle()
        self._maybe_done()

    async def _time_out(self) -> None:
        """No outcome within the model's timeout (an engine that neither finishes nor
        fails): the job fails with the "could not complete" message and its hold is
        released; the render, if one runs, is stopped and its output discarded."""
        gen, job = self.gen, self.job
        assert job is not None
        log.warning("job %s: no outcome from %s within its timeout; failing it", self.job_id, job["model"])
        handle = gen.jobs.renders.get(self.job_id)
        if handle is not None:
            handle.scope.cancel()  # RenderDone follows and frees the slot
        else:
            gen.slots.release(job["model"], self.job_id)
        await self._finish("fail", error=MSG_INCOMPLETE)

    async def load(self) -> None:
        self.job = sql.get_job(self.gen.store, self.job_id)
        if self.job is None:
            self.done = True  # nothing to own: stop once the mailbox is empty (Submit clears it)
            return
        if self._final() and self.job["hold_settled"] and self.job_id not in self.gen.jobs.renders:
            self.done = True
        else:
            self.gen.jobs.tell(self.job_id, Resume())

    async def handle(self, msg: Any) -> Any:
        if isinstance(msg, Submit):
            return await self._submit(msg)
        if isinstance(msg, Cancel):
            return await self._cancel(msg)
        if isinstance(msg, SlotGranted):
            # `rendering` too: after a restart a job that was rendering may wait in line
            if self.job is not None and self.job["status"] in ("queued", "rendering") and self.gen.slots.holds(
                    self.job["model"], self.job_id):
                await self._start()
            return None
        if isinstance(msg, RenderDone):
            await self._render_done(msg)
            return None
        if isinstance(msg, Resume):
            await self._resume()
            return None
        if isinstance(msg, Watch):
            return self._watch(msg.notify)
        raise TypeError(f"job actor: unknown message {type(msg).__name__}")

    # submit ---------------------------------------------------------------------------------
    async def _submit(self, msg: Submit) -> dict:
        gen = self.gen
        if self.job is not None:  # the same job id twice: the job exists; nothing is created
            if msg.notify is not None:
                self._watch(msg.notify)
            return views.submit_response(self.job, gen.base_url)
        p = msg.plan
        hold_id = str(uuid.uuid4())
        try:
            await gen.balances().ask(msg.org_id, PlaceHold(
                hold_id, p.price_uc, job_id=self.job_id, workflow_run_id=msg.workflow_run_id,
                project_id=msg.project_id, description=f"{p.capability} on {p.model} ({p.tier})"))
        except InsufficientCredits:
            self.done = True
            raise
        except BaseException:
            self.done = True
            await self._release_quietly(msg.org_id, hold_id)  # an ask that timed out may have placed it
            raise
        now = gen.clock.iso_now()
        row = {
            "id": self.job_id, "organization_id": msg.org_id, "project_id": msg.project_id,
            "capability": p.capability, "model": p.model, "backend": p.backend, "source": msg.source,
            "workflow_run_id": msg.workflow_run_id, "status": "queued", "prompt": p.prompt,
            "params": json.dumps({"resolution": p.resolution, "duration": p.duration,
                                  "aspect_ratio": p.aspect_ratio, "inputs": p.inputs, "seed": p.seed,
                                  "tier": p.tier}, separators=(",", ":")),
            "price_uc": p.price_uc, "actual_uc": None, "hold_id": hold_id, "hold_settled": 0,
            "webhook_url": msg.webhook_url, "error": None, "created_at": now, "started_at": None,
            "finished_at": None,
        }
        response = views.submit_response(row, gen.base_url)
        idem = msg.idempotency
        now_s = gen.clock.now()  # write functions may run in the writer thread: no clock there

        def tx(conn):
            sql.insert_job(conn, row)
            if idem is not None:
                idem_sql.put(conn, "idempotency_keys", {**idem, "job_id": row["id"], "response": json.dumps(response),
                                           "created_at": now_s},
                                    older_than=now_s - IDEMPOTENCY_TTL)

        try:
            await gen.store.write(tx)
        except BaseException as e:
            self.done = True
            with trio.CancelScope(shield=True):
                await self._release_quietly(msg.org_id, hold_id)
            if isinstance(e, Exception) and not isinstance(e, ServiceError):
                log.error("job %s: storing the job failed; hold %s released", self.job_id, hold_id, exc_info=e)
                raise ApiError("Something went wrong on our side.", code="request.internal_error",
                               status=500) from e
            raise
        crashpoint("hold_committed")  # hold and job row committed, not yet handed to a render
        self.job = row
        gen.node.metrics.holds.labels("placed").inc()
        gen.publish(row)
        self.done = False
        if msg.notify is not None:
            gen.jobs.watchers.setdefault(self.job_id, []).append(msg.notify)
        if gen.slots.acquire(p.model, self.job_id):
            gen.jobs.tell(self.job_id, SlotGranted())
        return response

    async def _release_quietly(self, org_id: str, hold_id: str) -> None:
        try:
            await self.gen.balances().ask(org_id, Release(hold_id), timeout=5.0)
        except Exception as e:  # noqa: BLE001 - best effort; unknown hold is fine
            log.info("hold %s: release after a failed submit: %r", hold_id, e)

    # rendering ------------------------------------------------------------------------------
    async def _resume(self) -> None:
        job = self.job
        if job is None:
            self.done = True
            return
        if self._final():
            if not job["hold_settled"]:
                await self._settle()
            self._maybe_done()
            return
        if not self.gen.can_render(job):
            log.error("job %s: backend %s is not runnable here; failing it", self.job_id, job["backend"])
            self.gen.slots.release(job["model"], self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)
            return
        if self.gen.slots.acquire(job["model"], self.job_id):
            await self._start()

    async def _start(self) -> None:
        gen, job = self.gen, self.job
        assert job is not None
        resumed = job["status"] == "rendering"
        if job["status"] == "queued":
            new, _effects = JOB.apply("queued", "start")
            now = gen.clock.iso_now()
            await gen.store.write(lambda c: sql.update_job(c, self.job_id, {"status": new, "started_at": now}))
            job.update(status=new, started_at=now)
            gen.publish(job)
        if self.job_id in gen.jobs.renders:
            return  # a render of this job is already running (actor reloaded): adopt it
        try:
            req = replace(self._render_request(), resumed=resumed)
        except Exception:  # noqa: BLE001 - e.g. an input file is missing
            log.exception("job %s: cannot build the render request", self.job_id)
            gen.slots.release(job["model"], self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)
            return
        handle = RenderHandle()
        gen.jobs.renders[self.job_id] = handle
        assert gen.jobs.background is not None
        gen.jobs.background.start_soon(_render_task, gen, self.job_id, handle, req)

    def _render_request(self) -> RenderRequest:
        gen, job = self.gen, self.job
        assert job is not None
        params = sql.params_of(job)
        slots: dict[str, list[str]] = params.get("inputs") or {}
        rows = {r["id"]: r for r in sql.assets_in_org(gen.store, job["organization_id"],
                                                      [i for ids in slots.values() for i in ids])}
        inputs = {}
        for name, ids in slots.items():
            files = []
            for i in ids:
                r = rows[i]
                path = gen.files.path(r["sha256"])
                if not path.is_file():
                    raise FileNotFoundError(f"input asset {i}: {path} is missing")
                files.append(InputFile(path, r["content_type"], r["kind"], r["width"], r["height"], r["duration_s"]))
            inputs[name] = files
        seed = params.get("seed")
        if seed is None:
            seed = uuid.UUID(self.job_id).int % (2 ** 31)
        duration = params.get("duration")
        return RenderRequest(
            job_id=self.job_id, capability=job["capability"], model=job["model"], backend=job["backend"],
            prompt=job["prompt"], seed=int(seed), aspect_ratio=params.get("aspect_ratio"),
            resolution=params["resolution"], duration=None if duration is None else float(duration),
            inputs=inputs, work_dir=gen.files.work_dir(self.job_id), test_mode=gen.settings.test_mode,
        )

    async def _render_done(self, msg: RenderDone) -> None:
        gen, job = self.gen, self.job
        if job is None or gen.jobs.renders.get(self.job_id) is not msg.token:
            return  # stale report
        del gen.jobs.renders[self.job_id]
        gen.progress_now.pop(self.job_id, None)
        gen.slots.release(job["model"], self.job_id)
        try:
            if job["status"] == "canceled":
                JOB.apply("canceled", "render_ended")  # -> webhook: the waiting row may go now
                if await gen.store.write(lambda c: sql.release_waiting_webhook(c, self.job_id)):
                    gen.webhooks.wake()
            elif job["status"] == "rendering":
                await self._render_outcome(msg)
        finally:
            await trio.to_thread.run_sync(gen.files.discard_work, self.job_id)
            self._maybe_done()

    async def _render_outcome(self, msg: RenderDone) -> None:
        outcome = msg.outcome
        if isinstance(outcome, Completed) and msg.hashed:
            crashpoint("output_produced")  # output files exist in work/, no asset stored yet
            try:
                await trio.to_thread.run_sync(self._place, msg.hashed)
            except Exception:  # noqa: BLE001
                log.exception("job %s: storing outputs failed", self.job_id)
                await self._finish("fail", error=MSG_INTERNAL)
                return
            await self._finish("finish", outputs=msg.hashed, usage=outcome.usage)
        elif isinstance(outcome, Failed):
            await self._finish("fail", error=outcome.message)
        elif isinstance(outcome, Flagged):
            await self._finish("flag")
        else:
            log.error("job %s: render ended without an outcome", self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)

    def _place(self, hashed: list) -> None:
        for output, sha, _size in hashed:
            self.gen.files.place(output.path, sha)

    # final states ---------------------------------------------------------------------------
    async def _finish(self, event: str, *, error: str | None = None, outputs: list | tuple = (),
                      usage: dict | None = None) -> None:
        gen, job = self.gen, self.job
        assert job is not None
        old = job["status"]
        new, effects = JOB.apply(old, event)
        now = gen.clock.iso_now()
        fields: dict = {"status": new, "finished_at": now}
        if event == "finish":
            fields["actual_uc"] = job["price_uc"]
            if usage:
                fields["usage"] = json.dumps(usage, separators=(",", ":"))
        if error is not None:
            fields["error"] = error
        final = {**job, **fields}
        assets = [
            {"id": str(uuid.uuid4()), "organization_id": job["organization_id"], "project_id": job["project_id"],
             "job_id": self.job_id, "position": i, "source": "generation", "kind": o.kind,
             "content_type": o.content_type, "width": o.width, "height": o.height, "duration_s": o.duration_s,
             "size_bytes": size, "sha256": sha, "created_at": now}
            for i, (o, sha, size) in enumerate(outputs)
        ]
        status = views.status_object(final, assets, gen.base_url)
        hook = None
        url = job["webhook_url"]
        if url and ("webhook" in effects or "discard_render" in effects):
            rendering = "discard_render" in effects and self.job_id in gen.jobs.renders
            state = "skipped" if not url.lower().startswith("https://") else ("waiting" if rendering else "pending")
            hook = {"id": str(uuid.uuid4()), "job_id": self.job_id, "url": url,
                    "body": json.dumps(status, separators=(",", ":")), "state": state, "created_at": now}
            if state == "skipped":
                hook.update(error="not an https URL; job webhooks only call https", error_class="insecure_url")

        def tx(conn):
            sql.update_job(conn, self.job_id, fields)
            for a in assets:
                sql.insert_asset(conn, a)
            if hook is not None:
                sql.insert_webhook(conn, hook)

        await gen.store.write(tx)
        self.job = final
        gen.publish(final, status)
        metrics = gen.node.metrics
        metrics.jobs.labels(job["capability"], job["model"], new).inc()
        if job["started_at"] and new != "canceled":
            metrics.render.labels(job["model"], job["backend"]).observe(
                max(0.0, gen.clock.now() - parse_iso(job["started_at"])))
        await self._settle()
        crashpoint("final_committed")  # final status and capture/release committed, webhook not sent
        if hook is not None and hook["state"] == "pending":
            gen.webhooks.wake()
        for notify in gen.jobs.watchers.pop(self.job_id, []):
            self._notify(notify, status)

    async def _settle(self) -> None:
        """Capture (completed) or release (any other final status) the hold, once."""
        gen, job = self.gen, self.job
        assert job is not None
        if job["hold_settled"]:
            return
        msg = Capture(job["hold_id"]) if job["status"] == "completed" else Release(job["hold_id"])
        try:
            await gen.balances().ask(job["organization_id"], msg)
        except (ActorGone, AskTimeout) as e:
            log.warning("job %s: settling hold %s failed (%r); retrying", self.job_id, job["hold_id"], e)
            self.retry_at = gen.clock.now() + SETTLE_RETRY_S
            return
        except ServiceError as e:
            log.error("job %s: hold %s refused %s: %r", self.job_id, job["hold_id"], type(msg).__name__, e)
        except Exception:  # noqa: BLE001 - e.g. billing not attached: retry
            log.exception("job %s: settling hold %s crashed; retrying", self.job_id, job["hold_id"])
            self.retry_at = gen.clock.now() + SETTLE_RETRY_S
            return
        await gen.store.write(lambda c: sql.update_job(c, self.job_id, {"hold_settled": 1}))
        job["hold_settled"] = 1
        gen.node.metrics.holds.labels("captured" if isinstance(msg, Capture) else "released").inc()
        self.retry_at = None

    # cancel and watch -----------------------------------------------------------------------
    async def _cancel(self, msg: Cancel) -> dict:
        gen, job = self.gen, self.job
        if job is None or (msg.org_id is not None and job["organization_id"] != msg.org_id):
            if job is None:
                self.done = True
            raise NotFound("Generation request not found.")
        status = job["status"]
        if status == "queued":
            gen.slots.release(job["model"], self.job_id)
            await self._finish("cancel")
        elif status == "rendering":
            handle = gen.jobs.renders.get(self.job_id)
            if handle is not None:
                handle.scope.cancel()  # RenderDone follows; the slot is held until then
                await self._finish("cancel")
            else:  # waiting for a slot after a restart: nothing runs, the render has "ended"
                gen.slots.release(job["model"], self.job_id)
                await self._finish("cancel")  # its webhook row goes out at once
        self._maybe_done()
        return gen.status(self.job_id)  # type: ignore[return-value]

    def _watch(self, notify: Notify) -> None:
        if self._final():
            self._notify(notify, self.gen.status(self.job_id))
        elif self.job is not None:
            self.gen.jobs.watchers.setdefault(self.job_id, []).append(notify)
        else:
            self.done = True
            raise NotFound("Generation request not found.")

    def _notify(self, notify: Notify, status: dict | None) -> None:
        try:
            notify(status)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001
            log.exception("job %s: a watcher failed", self.job_id)


# -- the facade -------------------------------------------------------------------------------
class Generation:
    """The node's generation part: catalog, job registry, slots, files, signer, webhooks,
    and the uploads registry (service.actors.job_uploads)."""

    def __init__(self, node) -> None:
        self.node = node
        self.settings = node.settings
        self.store = node.store
        self.clock = node.clock
        self.catalog = node.catalog
        self.base_url = node.settings.public_base_url
        self.files = FileStore(node.settings.data_dir)
        self.signer = UrlSigner(load_secret(node.settings.data_dir), self.base_url, node.clock)
        self.jobs = JobRegistry(lambda key: JobActor(self), node.clock)
        self.uploads = Registry("uploads", lambda key: UploadsActor(self.store, self.files), node.clock)
        self.slots = ModelSlots(self._capacity, lambda job_id: self.jobs.tell(job_id, SlotGranted()))
        self.streams = node.streams
        self.large_decodes = trio.Lock()  # one large image decode at a time
        self.webhooks = JobWebhooks(node.store, node.clock, lambda: node.sender)
        self.jobs.side_tasks.append(self.webhooks.run)
        self._idem_locks = KeyedLocks()
        # CPU-bound render threads at once, per node (a limiter belongs to one trio run)
        self.render_limiter = render_limiter()
        self.progress_now: dict[str, dict] = {}  # job id -> the engine's last progress, while rendering

    def publish(self, job: dict, status: dict | None = None) -> None:
        """After a commit: the job's status object to the streams following it or its
        project (service/streams; built only when one is open)."""
        self.streams.publish((f"job:{job['id']}", f"project:{job['project_id']}"), "status",
                             lambda: status or views.status_object(job, [], self.base_url), source=job["source"])
        if job["status"] in FINAL:
            self.streams.job_ended(job["id"])

    def progress(self, job: dict, value: float, maximum: float, step: str | None = None) -> None:
        """A render's progress (an engine's steps, or a built-in's own) to the streams
        following the job, at most about 4 per second per job."""
        data = {"request_id": job["id"], "value": value, "max": maximum, "step": step}
        self.streams.progress(job["id"], (f"job:{job['id']}", f"project:{job['project_id']}"), lambda: data,
                              source=job["source"])

    def engine_progress(self, req: RenderRequest, value: float, maximum: float, step: str | None) -> None:
        """An engine's progress message: kept for the job's status (`progress`) and sent to
        the streams following it."""
        if req.job_id not in self.jobs.renders:
            return
        self.progress_now[req.job_id] = {"value": value, "max": maximum, "step": step}
        job = sql.get_job(self.store, req.job_id)
        if job is not None:
            self.progress(job, value, maximum, step)

    def balances(self) -> Registry:
        return self.node.balances

    def runnable(self, model) -> bool:
        return self.node.runnable(model)

    def can_render(self, job: dict) -> bool:
        """Whether a job left queued or rendering by a restart can still run here."""
        m = self.catalog.model(job["model"])
        if m is None or m.backend != job["backend"]:
            return runnable(job["backend"])  # a built-in the catalog no longer lists still runs
        return m.engine is not None or runnable(m.backend)

    def _capacity(self, model_id: str) -> int:
        """Jobs of a model rendering at once: `concurrency` per engine server (one server
        for built-ins)."""
        m = self.catalog.model(model_id)
        return m.concurrency * m.servers if m is not None else 1

    # reads ----------------------------------------------------------------------------------
    def status(self, job_id: str, org_id: str | None = None) -> dict | None:
        job = sql.get_job(self.store, job_id) if org_id is None else sql.job_in_org(self.store, org_id, job_id)
        if job is None:
            return None
        outputs = sql.assets_of_jobs(self.store, [job_id])[job_id]
        status = views.status_object(job, outputs, self.base_url)
        progress = self.progress_now.get(job_id)
        if progress is not None and job["status"] == "rendering":
            status["progress"] = progress
        return status

    def list_statuses(self, project_id: str, limit: int) -> list[dict]:
        jobs = sql.list_jobs(self.store, project_id, limit)
        outputs = sql.assets_of_jobs(self.store, [j["id"] for j in jobs])
        return [views.status_object(j, outputs[j["id"]], self.base_url) for j in jobs]

    def resolve_inputs(self, org_id: str) -> Callable[[list[str]], dict[str, AssetInfo]]:
        def resolve(ids: list[str]) -> dict[str, AssetInfo]:
            return {r["id"]: AssetInfo(r["id"], r["kind"], r["project_id"], r["width"], r["height"])
                    for r in sql.assets_in_org(self.store, org_id, ids)}
        return resolve

    def capabilities_view(self) -> list[dict]:
        return self.catalog.capabilities_view(self.runnable)

    def models_view(self) -> list[dict]:
        return self.catalog.models_view(self.runnable)

    def estimate(self, body: dict) -> dict:
        """`{capability, model, resolution, duration, credits, tier}` for a submit body plus
        `capability` or `model`; the submit's rules except prompt and inputs; creates nothing."""
        out = estimate(self.catalog, capability=body.get("capability"), model=None, body=body,
                       runnable=self.runnable)
        out["tier"] = tier_label(out["resolution"], out["duration"])
        return out

    def check_active_limit(self, org_id: str) -> None:
        """429 when the organization already has its limit of API and dashboard jobs queued
        or rendering (service/limits.py)."""
        limit = self.settings.max_active_jobs_per_org
        if limit > 0:
            check_active_jobs(sql.active_jobs(self.store, org_id), limit)

    async def inspect_upload(self, path, declared_type: str | None) -> MediaInfo:
        """What an uploaded file is (service.media.inspect, in a worker thread); 422 when it
        is not accepted. An image over LARGE_DECODE pixels (read from its header first)
        decodes only while no other large one does: a 40-megapixel decode holds about
        500 MB, so uploads in parallel would otherwise add up to gigabytes."""
        pixels = await trio.to_thread.run_sync(image_pixels, path)
        if pixels > LARGE_DECODE:
            async with self.large_decodes:
                return await trio.to_thread.run_sync(inspect_file, path, declared_type)
        return await trio.to_thread.run_sync(inspect_file, path, declared_type)

    # writes ---------------------------------------------------------------------------------
    def plan(self, org_id: str, project_id: str, *, capability: str | None = None, model: str | None = None,
             body: dict) -> Plan:
        return plan_submit(self.catalog, capability=capability, model=model, body=body, runnable=self.runnable,
                           resolve_inputs=self.resolve_inputs(org_id), project_id=project_id,
                           base_url=self.base_url)

    async def submit(self, plan: Plan, *, org_id: str, project_id: str, source: str = "api",
                     webhook_url: str | None = None, workflow_run_id: str | None = None,
                     notify: Notify | None = None, idempotency: dict | None = None,
                     job_id: str | None = None) -> dict:
        job_id = job_id or str(uuid.uuid4())
        return await self.jobs.ask(job_id, Submit(org_id, project_id, plan, source, workflow_run_id,
                                                  webhook_url, notify, idempotency))

    async def idempotent(self, org_id: str, key: str, request_hash: str, make: Callable) -> dict:
        """Run `await make(idempotency_row)` once per (organization, key) within 24 h.

        The same key with the same request hash returns the first 202 body (no second job or
        hold); with another hash: 422. Concurrent requests with one key are serialised.
        """
        async with self._idem_locks.hold((org_id, key)):
            stored = replay(idem_sql.get(self.store, "idempotency_keys", org_id, key), request_hash, self.clock.now(),
                            id_field="job_id", detail="request_id")
            if stored is not None:
                return stored
            return await make({"organization_id": org_id, "key": key, "request_hash": request_hash})

    async def cancel(self, org_id: str, job_id: str) -> dict:
        job = sql.job_in_org(self.store, org_id, job_id)
        if job is None:
            raise NotFound("Generation request not found.")
        if job["status"] in FINAL:
            return self.status(job_id)  # type: ignore[return-value]
        return await self.jobs.ask(job_id, Cancel(org_id))

    async def watch(self, job_id: str, notify: Notify) -> None:
        await self.jobs.ask(job_id, Watch(notify))

    # start ----------------------------------------------------------------------------------
    async def recover(self) -> None:
        """At start, before HTTP: finish interrupted uploads, clear render scratch space,
        recover the webhook outbox, continue every open job, settle every open hold."""
        files = self.files
        await trio.to_thread.run_sync(files.clear_work)
        orphans = await trio.to_thread.run_sync(files.remove_unreferenced, retention_sql.content_shas(self.store))
        if orphans:
            log.info("assets: %d content files no asset names were removed", orphans)
        parts = [p.name.removesuffix(".part") for p in files.tmp.iterdir()]
        shas = {r["id"]: r["sha256"] for r in sql.assets_by_ids(self.store, parts)} if parts else {}
        placed, dropped = await trio.to_thread.run_sync(files.recover_uploads, shas.get)
        if placed or dropped:
            log.info("uploads: %d finished, %d dropped after a stop", placed, dropped)
        cutoff = self.clock.now() - IDEMPOTENCY_TTL
        await self.store.write(lambda c: idem_sql.purge(c, "idempotency_keys", cutoff))
        await self.webhooks.recover()
        for hold in sql.orphan_holds(self.store):
            log.info("hold %s has no job (stopped while submitting); releasing it", hold["id"])
            try:
                await self.balances().ask(hold["organization_id"], Release(hold["id"]))
            except ServiceError as e:
                log.error("hold %s: release failed: %r", hold["id"], e)
        rows = sql.jobs_to_recover(self.store)
        for job in rows:
            if job["status"] in ("queued", "rendering"):
                self.slots.acquire(job["model"], job["id"])  # the line keeps this order
        for job in rows:
            self.jobs.get(job["id"])  # the actor loads and resumes itself
        if rows:
            log.info("generation: %d jobs resumed or settled after a stop", len(rows))

"""The job actor: the one owner of a generation job (machines.JOB). It holds the job's record,
its running render (a task in its `tasks` nursery, render.py), its watchers and the engine's
last progress; the facade (facade.py) only reads rows and sends it messages (messages.py).

Job lifecycle (machines.JOB)
============================

- Submit: PlaceHold(hold_id, price, job_id, workflow_run_id, project_id) through the
  balance actor *first* (it carries the job id); then the job row (and the idempotency
  row, if any) in one transaction. If that write fails, the hold is released.
- The job asks `ModelSlots` for a render slot of its model (fair FIFO, `concurrency` per
  model from the catalog). When granted: queued -> rendering (committed), and a render
  task in the actor's `tasks` nursery runs `backends.render` (worker thread) and
  reports `RenderDone` back as a message, so Cancel is handled at once.
- Completion: output files are hashed (worker thread), placed content-addressed under
  DATA_DIR/assets/, then one transaction writes the asset rows, the final status,
  `credits.actual`, `finished_at` and the job-webhook outbox row (`waiting`); then the hold
  is captured (completed) or released (failed, nsfw, canceled) and `hold_settled` recorded,
  and only then is the webhook row made `pending` (due), so a receiver that reads the
  balance on the webhook sees the hold settled.
  A settle that fails is retried every few seconds and again at the next start.
- Cancel: queued -> canceled (hold released, no webhook); rendering -> canceled at once
  (hold released; the render task is cancelled and its output discarded; the webhook row
  waits until the render has ended, then is sent with the canceled status); final ->
  unchanged. The actor finishes (`done`) once final, settled and no render is left.
- Recovery (`Generation.recover`, a `node.recoveries` step): every queued or rendering
  job continues (rendering ones first, then queued, oldest first, through the same slot
  line; built-in models re-render); a job whose backend is not runnable here fails with
  failure message 5 and releases its hold; final jobs with an unsettled hold are settled.
  Both are rows of the table (`rendering + resume -> render`, `final + resume -> settle`).
- A crash reloads the actor from SQLite; what it owns in memory (render, watchers,
  progress) passes to its successor (`adopt`), so a running render is adopted, not doubled.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from collections.abc import Callable
from typing import Any

import trio

from service import threads
from service.actors.balance.messages import PlaceHold, Release
from service.effects import after
from service.actors.jobs.context import JobContext
from service.actors.jobs.effects import JOB_EFFECTS, JobEffects
from service.actors.jobs.messages import (Cancel, Notify, Progress, RenderDone, RenderHandle, Resume, SlotGranted,
                                          Submit, Watch)
from service.actors.jobs.record import JobRecord, job_status
from service.actors.jobs.render import render_request, render_task
from service.actors.runtime import Actor, on
from service.assets.files import StoreUnavailable
from service.backends import MSG_INCOMPLETE, MSG_INTERNAL, Completed, Failed, Flagged
from service.clock import parse_iso
from service.crash import crashpoint
from service.errors import ApiError, InsufficientCredits, NotFound, ServiceError, SpendLimitReached
from service.idempotency import KeyTaken, key_taken
from service.storage import generation as sql
from service.views import jobs as views
from service.views.shapes import JobStatus, SubmitAccepted
from service.views.shapes import Progress as ProgressView

log = logging.getLogger("service.actors.jobs")

DEFAULT_TIMEOUT_S = 600  # a job whose model left the catalog


class JobActor(JobEffects, Actor):
    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.job: JobRecord | None = None
        self.retry_at: float | None = None
        # a final state (its write, its record) that the settle commits (_finish); the record
        # becomes `job` only once committed, so no reader sees outputs not yet stored
        self.final_tx: tuple[Callable[[Any], None], JobRecord] | None = None
        # owned in memory, handed to a successor after a crash (`adopt`)
        self.render: RenderHandle | None = None  # until the actor has taken its RenderDone
        self.watchers: list[Notify] = []
        self.progress: ProgressView | None = None  # the engine's last progress, while rendering

    def adopt(self, previous: Actor) -> None:
        if isinstance(previous, JobActor):
            self.render, self.watchers, self.progress = previous.render, previous.watchers, previous.progress

    # state helpers
    @property
    def job_id(self) -> str:
        key: str = self.key
        return key

    def _final(self) -> bool:
        return self.job is not None and self.job.final

    def _maybe_done(self) -> None:
        if self.job is None or (self.job.final and self.job.hold_settled and self.render is None):
            self.done = True

    def status(self) -> JobStatus | None:
        """The job's status object (with the engine's progress while rendering)."""
        if self.job is None:
            return None
        return job_status(self.ctx.store, self.ctx.base_url, self.job.row(), self.progress)

    def _publish(self, job: JobRecord, status: JobStatus | None = None) -> None:
        """After a commit: the job's status object to the streams following it or its
        project (built only when one is open)."""
        base_url = self.ctx.base_url
        self.ctx.streams.publish((f"job:{job.id}", f"project:{job.project_id}"), "status",
                                 lambda: status or views.status_object(job.row(), [], base_url), source=job.source)
        if job.final:
            self.ctx.streams.job_ended(job.id)

    def next_deadline(self) -> float | None:
        due = [t for t in (self.retry_at, self._render_deadline()) if t is not None]
        return min(due) if due else None

    def _render_deadline(self) -> float | None:
        """When a rendering job with no outcome fails: its start plus its budget (set at
        submit from its video inputs, service/catalog/work.py), else the model's timeout."""
        job = self.job
        if job is None or job.status != "rendering" or not job.started_at:
            return None
        budget = job.settings.timeout_s
        if budget is None:
            model = self.ctx.model_for(self.job_id, job.model)
            budget = model.timeout_s if model else DEFAULT_TIMEOUT_S
        return parse_iso(job.started_at) + budget

    async def on_deadline(self) -> None:
        render_due = self._render_deadline()
        if render_due is not None and self.ctx.clock.now() >= render_due:
            await self._time_out()
        if self.retry_at is not None and self.ctx.clock.now() >= self.retry_at:
            self.retry_at = None
            await self._settle()
        self._maybe_done()

    async def _time_out(self) -> None:
        """No outcome within the model's timeout (an engine that neither finishes nor
        fails): the job fails with the "could not complete" message and its hold is
        released; the render, if one runs, is stopped and its output discarded."""
        job = self.job
        assert job is not None
        log.warning("job %s: no outcome from %s within its timeout; failing it", self.job_id, job.model)
        if self.render is not None:
            self.render.scope.cancel()  # RenderDone follows and frees the slot
        else:
            self.ctx.slots.release(job.model, self.job_id)
        await self._finish("fail", error=MSG_INCOMPLETE)

    async def load(self) -> None:
        row = sql.get_job(self.ctx.store, self.job_id)
        self.job = None if row is None else JobRecord.from_row(row)
        if self.job is None:
            return  # nothing to own yet: the message that spawned it decides (a Submit creates it)
        if self.job.final and self.job.hold_settled and self.render is None:
            self.done = True
        else:
            self.ctx.jobs.tell(self.job_id, Resume())

    async def handle(self, msg: Any) -> Any:
        try:
            return await self.handler_for(msg)(msg)
        finally:
            self._maybe_done()

    # submit ---------------------------------------------------------------------------------
    @on(Submit)
    async def _submit(self, msg: Submit) -> SubmitAccepted:
        ctx = self.ctx
        if self.job is not None:  # the same job id twice: the job exists; nothing is created
            if msg.notify is not None:
                self._watch(Watch(msg.notify))
            return views.submit_response(self.job.row(), ctx.base_url)
        p = msg.plan
        hold_id = str(uuid.uuid4())
        try:
            await ctx.balances.ask(msg.org_id, PlaceHold(
                hold_id, p.price_uc, job_id=self.job_id, workflow_run_id=msg.workflow_run_id,
                project_id=msg.project_id, description=f"{p.capability} on {p.model} ({p.settings.tier})",
                api_key_id=msg.api_key_id))
        except (InsufficientCredits, SpendLimitReached):
            raise
        except BaseException:
            await self._release_quietly(msg.org_id, hold_id)  # an ask that timed out may have placed it
            raise
        now = ctx.clock.iso_now()
        row: dict[str, Any] = {
            "id": self.job_id, "organization_id": msg.org_id, "project_id": msg.project_id,
            "capability": p.capability, "model": p.model, "backend": p.backend, "source": msg.source,
            "workflow_run_id": msg.workflow_run_id, "status": "queued", "prompt": p.prompt,
            "params": p.settings.to_json(),
            "price_uc": p.price_uc, "actual_uc": None, "hold_id": hold_id, "hold_settled": 0,
            "webhook_url": msg.webhook_url, "error": None, "created_at": now, "started_at": None,
            "finished_at": None,
        }
        response = views.submit_response(row, ctx.base_url)
        idem = msg.idempotency
        now_s = ctx.clock.now()  # write functions may run in the writer thread: no clock there

        def tx(conn: Any) -> None:
            sql.insert_job(conn, row)
            if idem is not None:
                ctx.keys.put(conn, idem, row["id"], response, now_s)

        try:
            await ctx.store.write(tx)
        except BaseException as e:
            with trio.CancelScope(shield=True):
                await self._release_quietly(msg.org_id, hold_id)
            if idem is not None and isinstance(e, Exception) and key_taken(e):
                raise KeyTaken() from e  # the key's flow answers as the winner did
            if isinstance(e, Exception) and not isinstance(e, ServiceError):
                log.error("job %s: storing the job failed; hold %s released", self.job_id, hold_id, exc_info=e)
                raise ApiError("Something went wrong on our side.", code="request.internal_error",
                               status=500) from e
            raise
        crashpoint("hold_committed")  # hold and job row committed, not yet handed to a render
        job = self.job = JobRecord.from_row(row)
        ctx.metrics.holds.labels("placed").inc()
        self._publish(job)
        if msg.notify is not None:
            self.watchers.append(msg.notify)
        if ctx.slots.acquire(p.model, self.job_id):
            ctx.jobs.tell(self.job_id, SlotGranted())
        return response

    async def _release_quietly(self, org_id: str, hold_id: str) -> None:
        try:
            await self.ctx.balances.ask(org_id, Release(hold_id), timeout=5.0)
        except Exception as e:  # noqa: BLE001 - best effort; unknown hold is fine
            log.info("hold %s: release after a failed submit: %r", hold_id, e)

    # rendering ------------------------------------------------------------------------------
    @on(Resume)
    async def _resume(self, msg: Resume) -> None:
        job = self.job
        if job is None:
            return
        if job.final:
            if not job.hold_settled:
                await after(JOB_EFFECTS.apply(self, job.status, "resume"))  # capture or release
            return
        if not self.ctx.can_render(job.model, job.backend):
            log.error("job %s: backend %s is not runnable here; failing it", self.job_id, job.backend)
            self.ctx.slots.release(job.model, self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)
            return
        if self.ctx.slots.acquire(job.model, self.job_id):
            await self._start()

    @on(SlotGranted)
    async def _slot_granted(self, msg: SlotGranted) -> None:
        # `rendering` too: after a restart a job that was rendering may wait in line
        job = self.job
        if job is not None and job.status in ("queued", "rendering") and self.ctx.slots.holds(job.model, self.job_id):
            await self._start()

    async def _start(self) -> None:
        ctx, job = self.ctx, self.job
        assert job is not None
        if job.status != "queued":  # left rendering by a stop: the table's resume row renders again
            await after(JOB_EFFECTS.apply(self, job.status, "resume"))
            return
        step = JOB_EFFECTS.apply(self, "queued", "start")
        now = ctx.clock.iso_now()
        job_id = self.job_id
        await ctx.store.write(lambda c: sql.update_job(c, job_id, {"status": step.new, "started_at": now}))
        job = self.job = replace(job, status=step.new, started_at=now)
        ctx.queues.started(job.model, parse_iso(now) - parse_iso(job.created_at))
        self._publish(job)
        await after(step)

    async def _render(self, *, resumed: bool) -> None:
        ctx, job = self.ctx, self.job
        assert job is not None
        if self.render is not None:
            return  # a render of this job is already running (actor reloaded): adopt it
        try:
            req = render_request(ctx, job, resumed=resumed)
        except Exception:  # noqa: BLE001 - e.g. an input file is missing
            log.exception("job %s: cannot build the render request", self.job_id)
            ctx.slots.release(job.model, self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)
            return
        handle = self.render = RenderHandle()
        self.tasks.start_soon(render_task, ctx, self.job_id, handle, req)

    @on(Progress)
    async def _progress(self, msg: Progress) -> None:
        """An engine's progress: kept for the job's status and sent to the streams following
        it, at most about 4 per second per job (service/streams)."""
        job = self.job
        if job is None or self.render is None:
            return
        self.progress = {"value": msg.value, "max": msg.maximum, "step": msg.step}
        data = {"request_id": job.id, "value": msg.value, "max": msg.maximum, "step": msg.step}
        self.ctx.streams.progress(job.id, (f"job:{job.id}", f"project:{job.project_id}"), lambda: data,
                                  source=job.source)

    @on(RenderDone)
    async def _render_done(self, msg: RenderDone) -> None:
        ctx, job = self.ctx, self.job
        if job is None or self.render is not msg.token:
            return  # stale report
        self.render = None
        self.progress = None
        ctx.slots.release(job.model, self.job_id)
        discarded = False
        try:
            if job.status == "canceled":
                await after(JOB_EFFECTS.apply(self, "canceled", "render_ended"))
            elif job.status == "rendering":
                discarded = await self._render_outcome(msg)
        finally:
            if not discarded:
                await threads.run_sync(ctx.files.discard_work, self.job_id)

    async def _render_outcome(self, msg: RenderDone) -> bool:
        """Ends the job as its render did; True when its scratch directory is already gone."""
        outcome = msg.outcome
        if isinstance(outcome, Completed) and msg.hashed:
            crashpoint("output_produced")  # output files exist in work/, no asset stored yet
            try:
                await threads.run_sync(self._place, msg.hashed)
            except StoreUnavailable as e:  # the asset store is down: no asset row, hold released
                log.error("job %s: storing outputs failed: %s", self.job_id, e)
                await self._finish("fail", error=MSG_INCOMPLETE)
                return False
            except Exception:  # noqa: BLE001
                log.exception("job %s: storing outputs failed", self.job_id)
                await self._finish("fail", error=MSG_INTERNAL)
                return False
            await self._finish("finish", outputs=msg.hashed, usage=outcome.usage)
            return True
        elif isinstance(outcome, Failed):
            await self._finish("fail", error=outcome.message)
        elif isinstance(outcome, Flagged):
            await self._finish("flag")
        else:
            log.error("job %s: render ended without an outcome", self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)
        return False

    def _place(self, hashed: list[Any]) -> None:
        """The outputs into the store, then the job's scratch directory away, in one worker
        thread hop (the outputs were all it held that a job needs)."""
        assert self.job is not None
        for output, sha, _size in hashed:
            self.ctx.files.place(output.path, sha, self.job.organization_id)  # its org's object (assets.scopes)
        self.ctx.files.discard_work(self.job_id)

    # final states ---------------------------------------------------------------------------
    async def _finish(self, event: str, *, error: str | None = None, outputs: list[Any] | tuple[Any, ...] = (),
                      usage: dict[str, Any] | None = None) -> None:
        ctx, job = self.ctx, self.job
        assert job is not None
        step = JOB_EFFECTS.apply(self, job.status, event)
        new = step.new
        now = ctx.clock.iso_now()
        fields: dict[str, Any] = {"status": new, "finished_at": now}
        if event == "finish":
            fields["actual_uc"] = job.price_uc
            if usage:
                fields["usage"] = json.dumps(usage, separators=(",", ":"))
        if error is not None:
            fields["error"] = error
        final = replace(job, **fields)
        assets = [
            {"id": str(uuid.uuid4()), "organization_id": job.organization_id, "project_id": job.project_id,
             "job_id": self.job_id, "position": i, "source": "generation", "kind": o.kind,
             "content_type": o.content_type, "width": o.width, "height": o.height, "duration_s": o.duration_s,
             "frames": o.frames, "size_bytes": size, "sha256": sha, "created_at": now}
            for i, (o, sha, size) in enumerate(outputs)
        ]
        status = views.status_object(final.row(), assets, ctx.base_url)
        hook: dict[str, Any] | None = None
        hook_due_after_settle = False
        url = job.webhook_url
        if url and step.facts.hook_state is not None:
            state = "skipped" if not url.lower().startswith("https://") else step.facts.hook_state
            hook = {"id": str(uuid.uuid4()), "job_id": self.job_id, "url": url,
                    "body": json.dumps(status, separators=(",", ":")), "state": state, "created_at": now}
            if state == "skipped":
                hook.update(error="not an https URL; job webhooks only call https", error_class="insecure_url")
            elif state == "pending":  # due once the hold is settled (below)
                hook["state"], hook_due_after_settle = "waiting", True
        job_id = self.job_id

        def tx(conn: Any) -> None:
            sql.update_job(conn, job_id, fields)
            for a in assets:
                sql.insert_asset(conn, a)
            if hook is not None:
                sql.insert_webhook(conn, hook)

        # every final move settles the hold (capture or release, machines.JOB), and the final
        # state commits with it in the balance's transaction (effects._settle): one write, and
        # no moment in which the job is final and its hold not yet settled
        self.final_tx = (tx, final)
        try:
            await after(step)  # the hold's capture or release
        finally:
            if self.final_tx is not None:  # the settle did not run: the final state still commits
                self.final_tx = None
                await ctx.store.write(tx)
                self.job = final
        # the streams hear of the final status once it and the hold's settlement are
        # committed (or the settling failed and will be retried): a client that reads its
        # balance on `completed` sees the charge. Not from a `finally`: a final state whose
        # commit failed is not the job's (the actor restarts from its row)
        self._publish(final, status)
        ctx.metrics.jobs.labels(job.capability, job.model, new).inc()
        if job.started_at and new != "canceled":
            ctx.metrics.render.labels(job.model, job.backend).observe(
                max(0.0, ctx.clock.now() - parse_iso(job.started_at)))
        crashpoint("final_committed")  # final status and capture/release committed, webhook not due yet
        if hook_due_after_settle and self.job is not None and self.job.hold_settled:
            # the store wakes the job-webhook dispatcher after this commit; a settle that
            # failed leaves the row waiting for its retry (effects._settle)
            await ctx.store.write(lambda c: sql.release_waiting_webhook(c, job_id))
        watchers, self.watchers = self.watchers, []
        for notify in watchers:
            self._notify(notify, status)

    # cancel and watch -----------------------------------------------------------------------
    @on(Cancel)
    async def _cancel(self, msg: Cancel) -> JobStatus | None:
        job = self.job
        if job is None or (msg.org_id is not None and job.organization_id != msg.org_id):
            raise NotFound("Generation request not found.")
        if not job.final:
            if self.render is None:  # queued, or waiting for a slot after a restart
                self.ctx.slots.release(job.model, self.job_id)
            await self._finish("cancel")  # a running render: see _on_discard_render
        return self.status()

    @on(Watch)
    async def _watch_msg(self, msg: Watch) -> None:
        self._watch(msg)

    def _watch(self, msg: Watch) -> None:
        if self._final():
            self._notify(msg.notify, self.status())
        elif self.job is not None:
            self.watchers.append(msg.notify)
        else:
            raise NotFound("Generation request not found.")

    def _notify(self, notify: Notify, status: JobStatus | None) -> None:
        try:
            notify(status)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001
            log.exception("job %s: a watcher failed", self.job_id)

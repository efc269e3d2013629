"""Generation jobs: one actor per job (machines.JOB), a per-model slot line, renders off the
actor loop (service/actors/job_render.py). The facade routes call is `Generation`
(service/actors/generation.py); the messages are in service/actors/job_messages.py.

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
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from service.actors.billing_messages import PlaceHold, Release
from service.actors.job_messages import Cancel, Notify, RenderDone, Resume, SlotGranted, Submit, Watch
from service.actors.job_render import RenderHandle, render_request, render_task
from service.actors.job_effects import JOB_EFFECTS, JobEffects, after
from service.actors.runtime import Actor
from service.assets.files import StoreUnavailable
from service.backends import MSG_INCOMPLETE, MSG_INTERNAL, Completed, Failed, Flagged
from service.clock import parse_iso
from service.crash import crashpoint
from service.errors import ApiError, InsufficientCredits, NotFound, ServiceError, SpendLimitReached
from service.idempotency import KeyTaken, key_taken
from service.storage import generation as sql
from service.views import jobs as views
from service.views.shapes import JobStatus, SubmitAccepted

if TYPE_CHECKING:
    from service.actors.generation import Generation

log = logging.getLogger(__name__)

FINAL = views.FINAL
DEFAULT_TIMEOUT_S = 600  # a job whose model left the catalog


# -- the actor --------------------------------------------------------------------------------
class JobActor(JobEffects, Actor):
    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.job: dict | None = None
        self.retry_at: float | None = None

    # state helpers
    @property
    def job_id(self) -> str:
        return self.key

    def _final(self) -> bool:
        return self.job is not None and self.job["status"] in FINAL

    def _maybe_done(self) -> None:
        if self.job is None or (self._final() and self.job["hold_settled"] and self.job_id not in self.gen.jobs.renders):
            self.done = True

    def next_deadline(self) -> float | None:
        due = [t for t in (self.retry_at, self._render_deadline()) if t is not None]
        return min(due) if due else None

    def _render_deadline(self) -> float | None:
        """When a rendering job with no outcome fails: its start plus its budget (set at
        submit from its video inputs, service/catalog/work.py), else the model's timeout."""
        job = self.job
        if job is None or job["status"] != "rendering" or not job["started_at"]:
            return None
        budget = sql.params_of(job).get("timeout_s")
        if budget is None:
            model = self.gen.model_for(self.job_id, job["model"])
            budget = model.timeout_s if model else DEFAULT_TIMEOUT_S
        return parse_iso(job["started_at"]) + budget

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
    async def _submit(self, msg: Submit) -> SubmitAccepted:
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
                project_id=msg.project_id, description=f"{p.capability} on {p.model} ({p.tier})",
                api_key_id=msg.api_key_id))
        except (InsufficientCredits, SpendLimitReached):
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
                                  "tier": p.tier, "timeout_s": p.timeout_s}, separators=(",", ":")),
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
                gen.keys.put(conn, idem, row["id"], response, now_s)

        try:
            await gen.store.write(tx)
        except BaseException as e:
            self.done = True
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
        if job["status"] != "queued":  # left rendering by a restart: the start's effect again
            await self._render(resumed=True)
            return
        step = JOB_EFFECTS.apply(self, "queued", "start")
        now = gen.clock.iso_now()
        await gen.store.write(lambda c: sql.update_job(c, self.job_id, {"status": step.new, "started_at": now}))
        job.update(status=step.new, started_at=now)
        gen.queues.started(job["model"], parse_iso(now) - parse_iso(job["created_at"]))
        gen.publish(job)
        await after(step)

    async def _render(self, *, resumed: bool) -> None:
        gen, job = self.gen, self.job
        assert job is not None
        if self.job_id in gen.jobs.renders:
            return  # a render of this job is already running (actor reloaded): adopt it
        try:
            req = replace(render_request(gen, self.job_id, job), resumed=resumed)
        except Exception:  # noqa: BLE001 - e.g. an input file is missing
            log.exception("job %s: cannot build the render request", self.job_id)
            gen.slots.release(job["model"], self.job_id)
            await self._finish("fail", error=MSG_INTERNAL)
            return
        handle = RenderHandle()
        gen.jobs.renders[self.job_id] = handle
        assert gen.jobs.background is not None
        gen.jobs.background.start_soon(render_task, gen, self.job_id, handle, req)


    async def _render_done(self, msg: RenderDone) -> None:
        gen, job = self.gen, self.job
        if job is None or gen.jobs.renders.get(self.job_id) is not msg.token:
            return  # stale report
        del gen.jobs.renders[self.job_id]
        gen.progress_now.pop(self.job_id, None)
        gen.slots.release(job["model"], self.job_id)
        try:
            if job["status"] == "canceled":
                await after(JOB_EFFECTS.apply(self, "canceled", "render_ended"))
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
            except StoreUnavailable as e:  # the asset store is down: no asset row, hold released
                log.error("job %s: storing outputs failed: %s", self.job_id, e)
                await self._finish("fail", error=MSG_INCOMPLETE)
                return
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
        step = JOB_EFFECTS.apply(self, job["status"], event)
        new = step.new
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
             "frames": o.frames, "size_bytes": size, "sha256": sha, "created_at": now}
            for i, (o, sha, size) in enumerate(outputs)
        ]
        status = views.status_object(final, assets, gen.base_url)
        hook = None
        hook_due_after_settle = False
        url = job["webhook_url"]
        if url and "hook_state" in step.facts:
            state = "skipped" if not url.lower().startswith("https://") else step.facts["hook_state"]
            hook = {"id": str(uuid.uuid4()), "job_id": self.job_id, "url": url,
                    "body": json.dumps(status, separators=(",", ":")), "state": state, "created_at": now}
            if state == "skipped":
                hook.update(error="not an https URL; job webhooks only call https", error_class="insecure_url")
            elif state == "pending":  # due once the hold is settled (below)
                hook["state"], hook_due_after_settle = "waiting", True

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
        await after(step)  # the hold's capture or release
        crashpoint("final_committed")  # final status and capture/release committed, webhook not due yet
        if hook_due_after_settle:  # the store wakes the job-webhook dispatcher after this commit
            await gen.store.write(lambda c: sql.release_waiting_webhook(c, self.job_id))
        for notify in gen.jobs.watchers.pop(self.job_id, []):
            self._notify(notify, status)

    # cancel and watch -----------------------------------------------------------------------
    async def _cancel(self, msg: Cancel) -> dict:
        gen, job = self.gen, self.job
        if job is None or (msg.org_id is not None and job["organization_id"] != msg.org_id):
            if job is None:
                self.done = True
            raise NotFound("Generation request not found.")
        if not self._final():
            if self.job_id not in gen.jobs.renders:  # queued, or waiting for a slot after a restart
                gen.slots.release(job["model"], self.job_id)
            await self._finish("cancel")  # a running render: see _on_discard_render
        self._maybe_done()
        return gen.status(self.job_id)

    def _watch(self, notify: Notify) -> None:
        if self._final():
            self._notify(notify, self.gen.status(self.job_id))
        elif self.job is not None:
            self.gen.jobs.watchers.setdefault(self.job_id, []).append(notify)
        else:
            self.done = True
            raise NotFound("Generation request not found.")

    def _notify(self, notify: Notify, status: JobStatus | None) -> None:
        try:
            notify(status)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001
            log.exception("job %s: a watcher failed", self.job_id)

"""The run actor: the one owner of a product run (machines.RUN / machines.STEP; registry
`node.runs`, key = run id). It holds the run, its steps and its running op tasks (in its
`tasks` nursery); the facade (facade.py) only reads rows and sends it messages
(messages.py); op steps are in ops.py, effects in effects.py.

The run (machines.RUN / machines.STEP)
======================================

- The run keeps the product version it started with (`product_by_version`) to the end.
- Advance: the steps whose `needs` are all completed start together (`ready_steps`). The
  first start moves the run `queued` -> `running`. Starting steps are committed `running`
  first (a capability step with the id its job will get), then started:
  - a capability step is an ordinary generation job, `source` `workflow`, with the run's
    id as `workflow_run_id`, submitted with `gen.submit(..., job_id=<the step's
    request_id>)`; the job's submit places its hold. A refusal at that moment (402 when the
    balance was used up meanwhile, or a 422/503 of the submit rules) fails the step and the
    run. The job tells the run when it ends (`StepJobEnded`).
  - an op step (free local processing) runs in a worker thread in the actor's `tasks`
    nursery and reports `OpDone`; its output is stored as an asset of the run's project
    (`source` `workflow`, no job) in the same transaction as the step's completion.
- A step's `outputs` are committed as soon as it completes. When every step is completed
  the run is `completed` with `outputs` (output name -> asset ids) and `credits.actual`
  (Σ what the step jobs were charged).
- A failing step fails the run: `error` = "<step key>: <reason>", where the reason is the
  job's failure message (flagged content and a job canceled outside the run have their
  own messages below; a refused hold says how many credits were missing; a failed op step
  gives failure message 5, "Generation failed due to an internal error. ..."). Unfinished steps
  become `canceled`; their in-flight jobs are canceled (holds released) and op tasks
  stopped. The first round of asks gets `CANCEL_ANSWER_S` (it runs inside the owner's cancel
  request); an ask that fails (AskTimeout, ActorGone) or was not reached is asked again
  (backoff `CANCEL_RETRY_S`) until the job is final, for `CANCEL_TRIES` rounds; the actor
  stays up meanwhile. Past them the run stops asking: the next start's recovery cancels it. A step job that
  turns out to have completed anyway is recorded `completed` (it stays charged, as
  completed steps do), never `canceled`; one that failed or was canceled keeps the step's
  status. A job's own capture or release settles its hold, once: the run never touches it.
- Cancel: the same for a `canceled` run; a finished run is returned unchanged.
- `credits.actual` is written when the run ends in any final state (what its completed
  steps were charged; 0.00 when none completed).

Restart: a run actor loads its run and, when the run is not final, resumes (a deadline of
"now"): each running capability step re-watches its job (a job already final notifies at
once, from its stored status); a step whose job was never created is submitted again under
its `request_id`; running op steps start again; then the run advances. At start-up the
recovery step wakes every open run and cancels step jobs still open under a final run.
A final run's actor, loaded, asks again for each capability step it ended whose job is
open or completed, so a crash between a failed cancel and its retry loses nothing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, Callable, Mapping

import trio

from service.effects import after
from service.actors.runs.context import RunContext
from service.actors.runs.effects import RUN_EFFECTS, STEP_EFFECTS, RunEffects, RunMove, StepMove, actual_uc
from service.actors.runs.messages import Advance, CancelRun, Create, OpDone, OpHandle, StepJobEnded
from service.actors.runs.ops import op_task
from service.actors.runs.record import RunRecord, StepRecord, to_json
from service.actors.runtime import Actor, on
from service.backends import MSG_INTERNAL
from service.catalog import products as catalog_products
from service.catalog.product_types import Product
from service.catalog.request import SubmitRequest
from service.crash import crashpoint
from service.errors import (ActorGone, ApiError, AskTimeout, InsufficientCredits, NotFound, ServiceError,
                            SpendLimitReached)
from service.idempotency import KeyTaken, key_taken
from service.machines import JOB
from service.storage import generation as gen_sql
from service.storage import products as sql
from service.views.shapes import ProductRun

log = logging.getLogger(__name__)

MSG_FLAGGED = "Generation was flagged by the content filter. Credits were released."
MSG_JOB_CANCELED = "The step's generation job was canceled. Credits were released."
MSG_VERSION_GONE = "The product version this run started with is no longer defined."

# Seconds between cancel asks to a step job the run ended while the ask fails; the last
# repeats (an actor past its restart limit answers ActorGone until the node restarts).
CANCEL_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# Rounds of cancel asks before the run stops asking (the last 408 s after the first with
# CANCEL_RETRY_S): a job actor down that long stays down until the node restarts, and the
# start-up recovery (`Products.recover`) cancels the open step jobs of final runs; the job's
# own watcher still wakes the run if the job ends meanwhile.
CANCEL_TRIES = 12


def insufficient_message(e: InsufficientCredits) -> str:
    d = e.details or {}
    return (f"Not enough credits to start this step (required {d.get('required')}, "
            f"available {d.get('available')}).")


def limit_message(e: SpendLimitReached) -> str:
    d = e.details or {}
    return (f"{e.message} The step needs {d.get('required')}; {d.get('spent')} of the {d.get('limit')} limit "
            "is spent.")


# -- the actor --------------------------------------------------------------------------------
class RunActor(RunEffects, Actor):
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.run: RunRecord | None = None  # the committed records (record.py), replaced after each commit
        self.steps: dict[str, StepRecord] = {}
        self.product: Product | None = None
        self.values: dict[str, Any] = {}
        self.resume_due = False
        self.ops: dict[str, OpHandle] = {}  # step key -> its running op, until its OpDone is taken
        # step key -> job id: a step job this run ended, not yet known final (effects.py)
        self.stopping: dict[str, str] = {}
        self.stop_at: float | None = None  # service time of the next cancel round
        self.stop_tries = 0

    def adopt(self, previous: Actor) -> None:
        if isinstance(previous, RunActor):
            self.ops = previous.ops

    @property
    def run_id(self) -> str:
        key: str = self.key
        return key

    def notifier(self, key: str, job_id: str) -> Callable[[dict[str, Any]], None]:
        """A step job's watcher: its ending comes back to this run as a message."""
        runs, run_id = self.ctx.runs, self.run_id

        def notify(status: dict[str, Any]) -> None:
            runs.tell(run_id, StepJobEnded(key, job_id, status))

        return notify

    def _publish(self, view: ProductRun | None = None) -> None:
        """After a commit: the run object to the streams following it or its project (its
        view, which reads the run's assets, is built only when one is open)."""
        run, steps = self.run, list(self.steps.values())
        assert run is not None
        self.ctx.streams.publish((f"run:{run.id}", f"project:{run.project_id}"), "run",
                                 lambda: view or self.ctx.view_of(run, steps), source="workflow")

    def _final(self) -> bool:
        return self.run is not None and self.run.final

    def _maybe_done(self) -> None:
        if self.run is None or (self._final() and not self.ops and not self.stopping):
            self.done = True

    # loading and resuming -------------------------------------------------------------------
    async def load(self) -> None:
        row = sql.get_run(self.ctx.store, self.run_id)
        if row is None:
            self.run = None
            return
        steps = [StepRecord.from_row(s) for s in sql.steps_of(self.ctx.store, self.run_id)]
        self._hold(RunRecord.from_row(row), steps)
        if self._final():
            self._find_stopping()
            self._maybe_done()
        else:
            self.resume_due = True

    def _hold(self, run: RunRecord, steps: list[StepRecord]) -> None:
        self.run = run
        self.steps = {s.key: s for s in steps}
        self.values = run.values
        self.product = catalog_products.product_by_version(run.product, run.product_version)

    def _find_stopping(self) -> None:
        """A final run's capability steps it ended (canceled, failed) whose job is still open
        or completed anyway: its cancel may have failed before a crash or a stop, so ask now."""
        self.stopping = {}
        for key, s in self.steps.items():
            if s.capability is None or s.request_id is None or s.status not in ("canceled", "failed"):
                continue
            job = gen_sql.get_job(self.ctx.store, s.request_id)
            if job is not None and (not JOB.is_final(job["status"]) or job["status"] == "completed"):
                self.stopping[key] = s.request_id
        self.stop_at = self.ctx.clock.now() if self.stopping else None

    def next_deadline(self) -> float | None:
        return 0.0 if self.resume_due else self.stop_at

    async def on_deadline(self) -> None:
        if self.resume_due:
            self.resume_due = False
            await self._resume()
        elif self.stop_at is not None:
            self.stop_at = None
            await self._stop_jobs()

    async def _resume(self) -> None:
        if self.run is None or self._final():
            self._maybe_done()
            return
        if self.product is None:
            first = next((k for k, s in self.steps.items() if not s.final), None)
            await self._fail(first or "run", MSG_VERSION_GONE)
            return
        for key, step in list(self.steps.items()):
            if self._final():
                return
            if step.status != "running":
                continue
            if step.capability is not None:
                if step.request_id is None:  # never: it is committed with the step's start
                    await self._fail(key, MSG_INTERNAL)
                elif gen_sql.get_job(self.ctx.store, step.request_id) is None:
                    await self._submit(key)  # stopped between the step's commit and its job's
                else:
                    await self._watch(key)
            elif key not in self.ops:
                self._start_op(key)
        await self._advance()

    # messages -------------------------------------------------------------------------------
    @on(Create)
    async def _create(self, msg: Create) -> ProductRun:
        if self.run is not None:  # the same run id twice: the run exists
            return self.ctx.view_of(self.run, self.steps.values())
        run, steps = msg.run, list(msg.steps)
        view = self.ctx.view_of(run, steps)
        idem = msg.idempotency
        now = self.ctx.clock.now()

        def tx(conn: Any) -> Any:
            sql.insert_run(conn, run.row(), [s.row() for s in steps])
            if idem is not None:
                self.ctx.keys.put(conn, idem, run.id, view, now)

        try:
            await self.ctx.store.write(tx)
        except Exception as e:
            self.done = True
            if idem is not None and key_taken(e):
                raise KeyTaken() from e
            raise
        self._hold(run, steps)
        self._publish(view)
        self.ctx.runs.tell(self.run_id, Advance())
        return view

    # advancing ------------------------------------------------------------------------------
    def _outputs_by_step(self, steps: Mapping[str, StepRecord] | None = None) -> dict[str, list[str]]:
        """Step key -> its output asset ids, of the completed steps (of `steps`: the held ones
        with the changes of a move not committed yet)."""
        return {k: s.output_ids for k, s in (steps or self.steps).items() if s.status == "completed"}

    async def _write(self, run: RunRecord | None, steps: Mapping[str, StepRecord], extra: Any = None) -> None:
        """Commit the new records of the run (None: unchanged) and of `steps` in one transaction
        (the columns they change, with `extra`'s write), then hold them and publish."""
        assert self.run is not None
        run_id = self.run_id
        run_columns = self.run.changes(run) if run is not None else {}
        step_columns = {key: self.steps[key].changes(s) for key, s in steps.items()}

        def tx(conn: Any) -> Any:
            if extra is not None:
                extra(conn)
            for key, columns in step_columns.items():
                if columns:
                    sql.update_step(conn, run_id, key, columns)
            if run_columns:
                sql.update_run(conn, run_id, run_columns)

        await self.ctx.store.write(tx)
        if run is not None:
            self.run = run
        self.steps = {**self.steps, **steps}
        self._publish()

    @on(Advance)
    async def _advance_msg(self, msg: Advance) -> None:
        await self._advance()

    async def _advance(self, finished: Mapping[str, StepRecord] | None = None, extra: Any = None) -> None:
        """Start the steps that are ready (or complete the run). `finished` is the new record
        of a step that just completed and `extra` a write of its asset: they commit in the
        same transaction as the starts, one commit per move."""
        finished = dict(finished or {})
        run = self.run
        if run is None or run.final or self.product is None:
            if finished or extra is not None:
                await self._write(None, finished, extra)
            self._maybe_done()
            return
        steps = {**self.steps, **finished}
        if all(s.status == "completed" for s in steps.values()):
            await self._complete(finished, extra)
            return
        done = {k for k, s in steps.items() if s.status == "completed"}
        started = {k for k, s in steps.items() if s.status != "pending"}
        ready = [s.key for s in catalog_products.ready_steps(self.product, done, started)]
        now = self.ctx.clock.iso_now()
        new_run: RunRecord | None = None
        if ready and run.status == "queued":
            new_run = replace(run, status=RUN_EFFECTS.apply(self, "queued", "start", RunMove(now)).new, started_at=now)
        new_steps = dict(finished)
        starts = [STEP_EFFECTS.apply(self, steps[key].status, "start", StepMove(key)) for key in ready]
        for st in starts:
            new_steps[st.facts.key] = replace(steps[st.facts.key], status=st.new, started_at=now, **st.fields)
        if new_run is not None or new_steps or extra is not None:
            await self._write(new_run, new_steps, extra)
        if finished:
            crashpoint("step_finished")
        for st in starts:
            if self._final():
                break
            await after(st)

    async def _submit(self, key: str) -> None:
        step = self.steps[key]
        run = self.run
        assert run is not None and self.product is not None and step.request_id is not None
        gen = self.ctx.jobs
        job_id = step.request_id
        definition = self.product.step(key)
        notify = self.notifier(key, job_id)
        try:
            request = SubmitRequest.of(catalog_products.step_body(definition, self.values, self._outputs_by_step()))
            plan = gen.plan(run.organization_id, run.project_id, capability=definition.capability,
                            request=request)
        except ApiError as e:
            await self._fail(key, e.message)
            return
        except Exception:  # noqa: BLE001 - a bug must not wedge the run in a reload loop
            log.exception("run %s: step %s: planning its job failed", self.run_id, key)
            await self._fail(key, MSG_INTERNAL)
            return
        try:
            # Submit under the step's own job id (chosen and committed before), so a restart
            # can tell whether the job was created; a repeated id answers the existing job.
            await gen.submit(plan, org_id=run.organization_id, project_id=run.project_id,
                             source="workflow", workflow_run_id=self.run_id, notify=notify, job_id=job_id,
                             api_key_id=run.api_key_id)
        except InsufficientCredits as e:
            await self._fail(key, insufficient_message(e))
        except SpendLimitReached as e:
            await self._fail(key, limit_message(e))
        except ApiError as e:
            await self._fail(key, e.message)
        except (AskTimeout, ActorGone) as e:
            # The job may have been created after all: a Watch queues behind the Submit in the
            # job's mailbox, so it finds the job if the submit went through.
            log.warning("run %s: step %s: submit did not answer (%r); watching", self.run_id, key, e)
            try:
                await gen.watch(job_id, notify)
            except NotFound:
                await self._fail(key, MSG_INTERNAL)
            except (AskTimeout, ActorGone):
                await self._fail(key, MSG_INTERNAL)
                self.stopping[key] = job_id  # it may exist after all: asked until known
                await self._stop_jobs([key])

    async def _watch(self, key: str) -> None:
        job_id = self.steps[key].request_id
        assert job_id is not None  # a running capability step has its job's id
        try:
            await self.ctx.jobs.watch(job_id, self.notifier(key, job_id))
        except NotFound:
            await self._fail(key, MSG_INTERNAL)

    def _start_op(self, key: str) -> None:
        run = self.run
        assert run is not None and self.product is not None
        definition = self.product.step(key)
        handle = OpHandle()
        self.ops[key] = handle
        try:
            args = catalog_products.step_body(definition, self.values, self._outputs_by_step())
            ids = args.get("video") or args.get("image") or []
            src = gen_sql.get_asset(self.ctx.store, ids[0]) if ids else None
        except Exception:  # noqa: BLE001 - reported as the step's failure
            log.exception("run %s: op step %s: bad arguments", self.run_id, key)
            src = None
        if src is None:
            self.ctx.runs.tell(self.run_id, OpDone(key, handle, None, MSG_INTERNAL))
            return
        assert definition.op is not None  # an op step names its op
        self.tasks.start_soon(op_task, self.ctx, run, key, handle, definition.op, args, src)

    # step endings ---------------------------------------------------------------------------
    @on(StepJobEnded)
    async def _job_ended(self, msg: StepJobEnded) -> None:
        st = msg.status or {}
        if self._final() and self.stopping.get(msg.key) == msg.job_id:
            if JOB.is_final(st.get("status")):  # the end of a job whose cancel was pending
                await self._settle_stopped({msg.key: st})
            return
        step = self.steps.get(msg.key)
        if (self.run is None or self._final() or step is None or step.status != "running"
                or step.request_id != msg.job_id):
            self._maybe_done()
            return  # late or repeated news (a re-registered watcher)
        status = st.get("status")
        if status == "completed":
            await self._step_completed(msg.key, [o["id"] for o in st.get("outputs", [])], actual_uc(st))
        elif status == "failed":
            await self._fail(msg.key, st.get("error") or MSG_INTERNAL)
        elif status == "nsfw":
            await self._fail(msg.key, st.get("error") or MSG_FLAGGED)
        elif status == "canceled":
            await self._fail(msg.key, MSG_JOB_CANCELED)

    @on(OpDone)
    async def _op_done(self, msg: OpDone) -> None:
        if self.ops.get(msg.key) is not msg.token:
            return  # stale report
        del self.ops[msg.key]
        step = self.steps.get(msg.key)
        if self.run is None or self._final() or step is None or step.status != "running":
            self._maybe_done()
            return
        if msg.error is not None or msg.asset is None:
            await self._fail(msg.key, msg.error or MSG_INTERNAL)
            return
        asset = {**msg.asset, "created_at": self.ctx.clock.iso_now()}
        await self._step_completed(msg.key, [asset["id"]], 0,
                                   extra=lambda conn: gen_sql.insert_asset(conn, asset))

    async def _step_completed(self, key: str, outputs: list[str], cost_uc: int, extra: Any = None) -> None:
        step = self.steps[key]
        st = STEP_EFFECTS.apply(self, step.status, "finish", StepMove(key, outputs, cost_uc))
        await self._advance({key: replace(step, status=st.new, finished_at=self.ctx.clock.iso_now(), **st.fields)},
                            extra)

    async def _complete(self, finished: Mapping[str, StepRecord] | None = None, extra: Any = None) -> None:
        run = self.run
        assert run is not None and self.product is not None
        move = RunMove(self.ctx.clock.iso_now(), steps=dict(finished or {}))
        rs = RUN_EFFECTS.apply(self, run.status, "all_done", move)
        await self._write(replace(run, status=rs.new, actual_uc=self._spent({**self.steps, **move.steps}),
                                  finished_at=move.now, **rs.fields), move.steps, extra)
        self._maybe_done()

    def _spent(self, steps: Mapping[str, StepRecord] | None = None) -> int:
        return sum(s.cost_uc or 0 for s in (steps or self.steps).values() if s.status == "completed")

    # failure and cancel ---------------------------------------------------------------------
    async def _end(self, event: str, failed_key: str | None, reason: str | None) -> None:
        """Fail (`step_failed`, the step `failed_key` failed) or cancel the run; the rest is
        the effects of the RUN row (cancel_unfinished, release_failed)."""
        run = self.run
        assert run is not None
        now = self.ctx.clock.iso_now()
        move = RunMove(now, failed_key=failed_key)
        failed = self.steps.get(failed_key) if failed_key is not None else None
        if failed is not None and not failed.final:
            move.steps[failed.key] = replace(failed, status=STEP_EFFECTS.apply(self, failed.status, "fail", StepMove(failed.key)).new,
                                             error=reason, finished_at=now)
        rs = RUN_EFFECTS.apply(self, run.status, event, move)
        error = f"{failed_key}: {reason}" if failed_key is not None else run.error
        await self._write(replace(run, status=rs.new, finished_at=now, error=error, actual_uc=self._spent(),
                                  **rs.fields), move.steps)
        await after(rs)
        self._maybe_done()

    async def _cancel_job(self, job_id: str) -> dict[str, Any] | None:
        """The job's status after a cancel ask; None when the ask got no answer (asked again
        later); NotFound when the job was never created (a refused submit)."""
        assert self.run is not None
        try:
            return await self.ctx.jobs.cancel(self.run.organization_id, job_id)
        except ServiceError as e:
            if isinstance(e, NotFound):
                raise
            log.warning("run %s: canceling job %s failed: %r; asking again", self.run_id, job_id, e)
            return None

    async def _stop_jobs(self, keys: list[str] | None = None, within: float = math.inf) -> None:
        """One round of cancel asks to the jobs in `stopping` (those of `keys`, else all),
        the asks cut at `within` seconds: a job found final settles its step
        (`_settle_stopped`); the others are asked again after the next delay of
        CANCEL_RETRY_S, for CANCEL_TRIES rounds in all."""
        ended: dict[str, dict[str, Any]] = {}
        with trio.move_on_after(within):
            for key in keys if keys is not None else list(self.stopping):
                job_id = self.stopping.get(key)
                if job_id is None:
                    continue
                try:
                    st = await self._cancel_job(job_id)
                except NotFound:
                    self.stopping.pop(key, None)
                    continue
                if st is not None and JOB.is_final(st.get("status")):
                    ended[key] = st
        await self._settle_stopped(ended)
        if not self.stopping:
            self.stop_at, self.stop_tries = None, 0
        elif self.stop_tries + 1 >= CANCEL_TRIES:
            self._give_up_stopping()
        elif self.stop_at is None:
            self.stop_at = self.ctx.clock.now() + CANCEL_RETRY_S[min(self.stop_tries, len(CANCEL_RETRY_S) - 1)]
            self.stop_tries += 1

    def _give_up_stopping(self) -> None:
        """Stop asking: the steps stay as committed; the jobs are canceled by the next
        start's recovery, and a job that ends first wakes this run through its watcher."""
        log.error("run %s: jobs %s did not answer %d cancel asks; left to the recovery at the next start",
                  self.run_id, sorted(self.stopping.values()), CANCEL_TRIES)
        self.stopping = {}
        self.stop_at, self.stop_tries = None, 0
        self._maybe_done()

    async def _settle_stopped(self, ended: Mapping[str, dict[str, Any]]) -> None:
        """Steps whose job is now known final (its status object): one that completed anyway
        is a completed step, charged what its job was; the others keep their status."""
        late: dict[str, StepRecord] = {}
        now = self.ctx.clock.iso_now()
        for key, st in ended.items():
            self.stopping.pop(key, None)
            s = self.steps[key]
            if st.get("status") == "completed" and s.status != "completed":
                late[key] = replace(s, status="completed", outputs=to_json([o["id"] for o in st.get("outputs", [])]),
                                    cost_uc=actual_uc(st), error=None, finished_at=st.get("finished_at") or now)
        if late:
            run = self.run
            assert run is not None
            await self._write(replace(run, actual_uc=self._spent({**self.steps, **late})), late)
        self._maybe_done()

    async def _fail(self, key: str, reason: str) -> None:
        if self.run is None or self._final():
            return
        await self._end("step_failed", key, reason)

    @on(CancelRun)
    async def _cancel(self, msg: CancelRun | None = None) -> ProductRun:
        if self.run is None:
            self.done = True
            raise NotFound("Run not found.")
        if not self._final():
            await self._end("cancel", None, None)
        return self.ctx.view_of(self.run, self.steps.values())

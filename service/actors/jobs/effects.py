"""What the job actor does for each effect of machines.JOB: the handlers (`JobEffects`, mixed
into `JobActor` of actor.py), settling the hold, and their binding to the table
(`JOB_EFFECTS`; tests/test_effects.py checks every effect is bound)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.actors.balance.messages import Capture, Release
from service.effects import EffectHandlers, Step
from service.actors.jobs.context import JobContext
from service.actors.jobs.messages import RenderHandle
from service.actors.jobs.record import JobRecord
from service.errors import ActorGone, AskTimeout, ServiceError, Unavailable
from service.machines import JOB
from service.storage import generation as sql

log = logging.getLogger("service.actors.jobs")

SETTLE_RETRY_S = 5.0

# final status -> "capture" or "release": the hold effect of the rows that lead to it
SETTLE_EFFECT = {dst: e for (_src, _ev), (dst, effects) in JOB.table.items() if JOB.is_final(dst)
                 for e in effects if e in ("capture", "release")}


@dataclass
class JobFacts:
    """What the JOB effects tell the job actor about a move: the state the job's webhook row
    is written in when the move writes one (`webhook`, `discard_render`); None: no row."""

    hook_state: str | None = None


class JobEffects:
    """Handlers of the JOB effects; `JobActor` provides the state (`job`, `ctx`, `job_id`,
    `retry_at`, `render`) and `_render`."""

    job: JobRecord | None
    ctx: JobContext
    retry_at: float | None
    render: RenderHandle | None
    final_tx: tuple[Callable[[Any], None], JobRecord] | None

    if TYPE_CHECKING:  # provided by JobActor
        @property
        def job_id(self) -> str: ...

        async def _render(self, *, resumed: bool) -> None: ...

    def _on_render(self, step: Step[JobFacts]) -> None:
        """start, or resume of a render a stop interrupted (the engine is told it is resumed)."""
        resumed = step.old == step.new
        step.after.append(lambda: self._render(resumed=resumed))

    def _on_settle(self, step: Step[JobFacts]) -> None:
        """capture / release: settle the hold once the final status is committed."""
        step.after.append(self._settle)

    def _on_webhook(self, step: Step[JobFacts]) -> None:
        if step.old == "canceled":  # render_ended: the row that waited for the render may go now
            step.after.append(self._release_waiting_webhook)
        else:
            step.facts.hook_state = step.facts.hook_state or "pending"

    def _on_discard_render(self, step: Step[JobFacts]) -> None:
        """Stop a running render (its RenderDone follows and frees the slot; the output is
        discarded) and keep the webhook row waiting until it has ended. With no render
        running (waiting for a slot after a restart) the render has "ended": the row goes now."""
        handle = self.render
        if handle is not None:
            handle.scope.cancel()
        step.facts.hook_state = "waiting" if handle is not None else "pending"

    async def _release_waiting_webhook(self) -> None:
        """The row becomes `pending`; the store wakes the job-webhook dispatcher after the commit.
        Not before the hold is settled: then the settle's retry releases it (`_settle`)."""
        if self.job is None or not self.job.hold_settled:
            return
        job_id = self.job_id
        await self.ctx.store.write(lambda c: sql.release_waiting_webhook(c, job_id))

    async def _settle(self) -> None:
        """Capture (completed) or release (any other final status) the hold, once. The job's
        `hold_settled` commits in the balance's own transaction (`Capture.also`): one write
        a job fewer, and no state in which the hold is settled and the job says it is not."""
        ctx, pending = self.ctx, self.final_tx
        final, job = pending if pending is not None else (None, self.job)  # a final state not yet committed
        assert job is not None
        if job.hold_settled:
            return  # (a final state still pending is committed by JobActor._finish)
        self.final_tx = None
        job_id = self.job_id
        # a retry (or a resume) releases the webhook row a failed settle left waiting, in the
        # settlement's commit; a canceled job's render still running releases it when it ends
        hook = final is None and not (job.status == "canceled" and self.render is not None)

        def final_once(conn: Any) -> None:
            # a late run of a settle whose ask timed out finds it written by the job itself
            if final is not None and not sql.job_is_final(conn, job_id):
                final(conn)

        def settled(conn: Any) -> None:
            final_once(conn)
            sql.update_job(conn, job_id, {"hold_settled": 1})
            if hook:
                sql.release_waiting_webhook(conn, job_id)

        capture = SETTLE_EFFECT[job.status] == "capture"
        msg = Capture(job.hold_id, also=settled) if capture else Release(job.hold_id, also=settled)
        try:
            await ctx.balances.ask(job.organization_id, msg)
        except (ActorGone, AskTimeout, Unavailable) as e:  # Unavailable: its commit failed, nothing settled
            log.warning("job %s: settling hold %s failed (%r); retrying", self.job_id, job.hold_id, e)
            await self._retry_settle(final_once if final is not None else None, job)
            return
        except ServiceError as e:  # refused (e.g. capture of a released hold): it will not change
            log.error("job %s: hold %s refused %s: %r", self.job_id, job.hold_id, type(msg).__name__, e)
            await ctx.store.write(settled)
        except Exception:  # noqa: BLE001 - e.g. billing not attached: retry
            log.exception("job %s: settling hold %s crashed; retrying", self.job_id, job.hold_id)
            await self._retry_settle(final_once if final is not None else None, job)
            return
        self.job = replace(job, hold_settled=1)
        ctx.metrics.holds.labels("captured" if isinstance(msg, Capture) else "released").inc()
        self.retry_at = None

    async def _retry_settle(self, final: Callable[[Any], None] | None, job: JobRecord) -> None:
        """The settle failed: the final state commits now on its own (it must not wait for
        the balance), and the settle is tried again SETTLE_RETRY_S later."""
        if final is not None:
            await self.ctx.store.write(final)
            self.job = job
        self.retry_at = self.ctx.clock.now() + SETTLE_RETRY_S


JOB_EFFECTS = EffectHandlers(JOB, JobEffects, {
    "render": "_on_render", "capture": "_on_settle", "release": "_on_settle",
    "webhook": "_on_webhook", "discard_render": "_on_discard_render",
}, facts=JobFacts)

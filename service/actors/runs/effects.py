"""What the run actor does for each effect of machines.RUN and machines.STEP: the handlers
(`RunEffects`, mixed into `RunActor` of actor.py) and their binding to the
tables (`RUN_EFFECTS`, `STEP_EFFECTS`; tests/test_effects.py checks every effect is bound)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

from service.effects import EffectHandlers, Step
from service.actors.runs.context import RunContext
from service.actors.runs.messages import OpHandle
from service.actors.runs.record import RunRecord, StepRecord, to_json
from service.catalog import products as catalog_products
from service.catalog.product_types import Product
from service.machines import RUN, STEP
from service.money import to_uc
from service.storage import generation as gen_sql

# The first round of cancel asks after a run ends its steps runs inside the owner's cancel
# request: it gets this long (a healthy job answers in milliseconds, an ask times out at
# 10 s, the run's own ask too); the jobs that did not answer are asked again by the actor.
CANCEL_ANSWER_S = 2.0


def actual_uc(status: dict[str, Any]) -> int:
    """What a step's job was charged, from its status object."""
    actual = (status.get("credits") or {}).get("actual")
    return to_uc(actual) if actual is not None else 0


@dataclass
class RunMove:
    """The facts of a RUN move: when (`now`), the step whose failure moves it (`failed_key`),
    and the new records of the steps that commit with it (the actor's and what
    `cancel_unfinished` adds; `fill_outputs` reads them with the held steps)."""

    now: str  # service time of the move (what the steps it cancels record as finished)
    failed_key: str | None = None
    steps: dict[str, StepRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class StepMove:
    """The facts of a STEP move: which step, and what a finishing step produced and cost."""

    key: str
    outputs: list[str] = field(default_factory=list)
    cost_uc: int = 0


class RunEffects:
    """Handlers of the RUN and STEP effects; `RunActor` provides the state (`run`, `steps`,
    `product`, `ctx`, `ops`, `stopping`) and the plumbing (`_submit`, `_start_op`, `_stop_jobs`)."""

    run: RunRecord | None
    steps: dict[str, StepRecord]
    product: Product | None
    ctx: RunContext
    ops: dict[str, OpHandle]
    stopping: dict[str, str]

    if TYPE_CHECKING:  # provided by RunActor
        @property
        def run_id(self) -> str: ...
        async def _stop_jobs(self, keys: list[str] | None = None, within: float = ...) -> None: ...
        def _outputs_by_step(self, steps: Mapping[str, StepRecord] | None = None) -> dict[str, list[str]]: ...
        async def _submit(self, key: str) -> None: ...
        def _start_op(self, key: str) -> None: ...

    def _on_cancel_unfinished(self, step: Step[RunMove]) -> None:
        """Every unfinished step (but the failed one) becomes canceled in the run's commit;
        after it, their jobs are canceled (holds released; asked until each is final) and op
        tasks stopped. A job that completed anyway is recorded completed (it stays charged)."""
        move = step.facts
        now = move.now
        in_flight: list[str] = []
        for key, s in self.steps.items():
            if s.final or key == move.failed_key:
                continue
            if s.status == "running":
                in_flight.append(key)
            move.steps[key] = replace(s, status=STEP_EFFECTS.apply(self, s.status, "cancel", StepMove(key)).new, finished_at=now)
        step.after.append(lambda: self._stop_in_flight(in_flight))

    async def _stop_in_flight(self, in_flight: list[str]) -> None:
        jobs: list[str] = []
        for key in in_flight:
            s = self.steps[key]
            if s.capability is None:
                handle = self.ops.get(key)
                if handle is not None:
                    handle.scope.cancel()
            elif s.request_id is not None:
                self.stopping[key] = s.request_id
                jobs.append(key)
        await self._stop_jobs(jobs, within=CANCEL_ANSWER_S)

    def _on_release_failed(self, step: Step[RunMove]) -> None:
        """The failed step's hold is released: its job's own failure released it (JOB fail,
        flag or cancel -> release) and a refused submit placed none; a job still open (its
        submit never answered) is canceled, which releases it (asked until it is final)."""
        key = step.facts.failed_key or ""
        s = self.steps.get(key)
        job_id = s.request_id if s is not None and s.capability is not None else None
        if job_id is not None:
            step.after.append(lambda: self._cancel_job_if_open(key, job_id))

    async def _cancel_job_if_open(self, key: str, job_id: str) -> None:
        job = gen_sql.get_job(self.ctx.store, job_id)
        if job is not None and job["status"] in ("queued", "rendering"):
            self.stopping[key] = job_id
            await self._stop_jobs([key])

    def _on_fill_outputs(self, step: Step[RunMove]) -> None:
        assert self.product is not None
        outputs = self._outputs_by_step({**self.steps, **step.facts.steps})
        step.fields["outputs"] = to_json(catalog_products.run_outputs(self.product, outputs))

    def _on_step_start(self, step: Step[StepMove]) -> None:
        """A capability step gets its job's id now (committed with the start), and its job is
        submitted after the commit; an op step starts its op task."""
        key = step.facts.key
        if self.steps[key].capability is not None:
            step.fields["request_id"] = str(uuid.uuid4())
            step.after.append(lambda: self._submit(key))
        else:
            step.after.append(lambda: self._start_op_soon(key))

    async def _start_op_soon(self, key: str) -> None:
        self._start_op(key)

    def _on_record_outputs(self, step: Step[StepMove]) -> None:
        step.fields.update(outputs=to_json(step.facts.outputs), cost_uc=step.facts.cost_uc)


# every RUN and STEP move names its facts (no factory: a move without them is a TypeError)
RUN_EFFECTS: EffectHandlers[RunMove] = EffectHandlers(RUN, RunEffects, {
    "cancel_unfinished": "_on_cancel_unfinished", "release_failed": "_on_release_failed",
    "fill_outputs": "_on_fill_outputs",
})
STEP_EFFECTS: EffectHandlers[StepMove] = EffectHandlers(
    STEP, RunEffects, {"start": "_on_step_start", "record_outputs": "_on_record_outputs"})

"""The render task's cancel points (service/actors/jobs/render.py, and `bound_inputs` in
service/engines/common.py): a cancel that came before the render starts lands before the
engine is asked (no prediction made for a job already cancelled), and a render that is not
cancelled reaches its engine without a scheduler step."""

from __future__ import annotations

from pathlib import Path

import trio
from conftest import steps_taken

from service.actors.jobs.messages import RenderDone, RenderHandle
from service.actors.jobs.render import render_task
from service.backends import Completed, RenderRequest


class Ctx:
    """What the render task uses of its job's context: an engine model whose render is logged."""

    def __init__(self) -> None:
        self.engine_calls: list[str] = []
        self.told: list[RenderDone] = []
        self.unpinned: list[str] = []

    def model_for(self, job_id: str, model: str):
        return type("Model", (), {"engine": "cog"})()

    async def engine_render(self, req: RenderRequest, model) -> Completed:
        self.engine_calls.append(req.job_id)
        return Completed([])

    def unpin(self, job_id: str) -> None:
        self.unpinned.append(job_id)

    @property
    def jobs(self):
        ctx = self

        class Jobs:
            def tell(self, job_id, msg):
                ctx.told.append(msg)

        return Jobs()


def request(tmp_path: Path) -> RenderRequest:
    return RenderRequest(job_id="job_1", capability="image.generate", model="m", backend="cog", prompt="p",
                         seed=1, aspect_ratio=None, resolution="1k", duration=None, inputs={},
                         work_dir=tmp_path, test_mode=True)


async def test_a_render_cancelled_before_it_starts_never_asks_its_engine(tmp_path):
    ctx, handle = Ctx(), RenderHandle()
    handle.scope.cancel()  # the job was cancelled before its render task first ran
    await render_task(ctx, "job_1", handle, request(tmp_path))  # type: ignore[arg-type]
    assert ctx.engine_calls == [] and ctx.unpinned == ["job_1"]
    assert len(ctx.told) == 1 and ctx.told[0].outcome is None


async def test_a_render_reaches_its_engine_and_reports_without_a_scheduler_step(tmp_path):
    ctx, handle = Ctx(), RenderHandle()
    with steps_taken() as steps:
        await render_task(ctx, "job_1", handle, request(tmp_path))  # type: ignore[arg-type]
    assert ctx.engine_calls == ["job_1"] and isinstance(ctx.told[0].outcome, Completed)
    assert steps.taken == 0  # `checkpoint` at the two cancel points took one each


class Bind:
    bind = {"prompt": "prompt", "seed": "seed"}


async def test_binding_a_cancelled_jobs_inputs_stops_there_and_an_uncancelled_one_takes_no_step(tmp_path):
    from service.engines.common import bound_inputs

    with trio.CancelScope() as scope:
        scope.cancel()
        await bound_inputs(request(tmp_path), Bind())  # type: ignore[arg-type]
        raise AssertionError("not reached: the cancel lands in bound_inputs")
    assert scope.cancelled_caught
    with steps_taken() as steps:
        got = await bound_inputs(request(tmp_path), Bind())  # type: ignore[arg-type]
    assert got == {"prompt": "p", "seed": 1} and steps.taken == 0

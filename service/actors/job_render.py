"""Renders off the actor loop: the job registry's background nursery, the render task (a
backend in a worker thread, or an engine), and the render request built from a job row.
The task only reports `RenderDone` to its job actor; the actor decides what it means."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Callable

import trio

from service.actors.job_messages import Notify, RenderDone, RenderHandle
from service.actors.runtime import Registry
from service.assets.files import ObjectMissing, StoreUnavailable, hash_file
from service.backends import MSG_INCOMPLETE, MSG_INTERNAL, Completed, Failed, Flagged, InputFile, RenderRequest, render
from service.storage import generation as sql

if TYPE_CHECKING:
    from service.actors.generation import Generation

log = logging.getLogger(__name__)


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


async def render_task(gen: Generation, job_id: str, handle: RenderHandle, req: RenderRequest) -> None:
    outcome: Completed | Failed | Flagged | None = None
    hashed: list = []
    try:
        with handle.scope:
            paths = [f.path for files in req.inputs.values() for f in files]
            await trio.to_thread.run_sync(gen.files.fetch_inputs, paths, abandon_on_cancel=True)
            model = gen.model_for(job_id, req.model)
            if model is not None and model.engine is not None:
                outcome = await gen.node.engines.render(req, model)
            else:
                outcome = await render(req, limiter=gen.render_limiter)
            if isinstance(outcome, Completed):
                hashed = await trio.to_thread.run_sync(_hash_outputs, outcome.outputs, abandon_on_cancel=True)
    except (StoreUnavailable, ObjectMissing) as e:
        log.error("job %s: an input could not be read from the asset store: %r", job_id, e)
        outcome, hashed = Failed(MSG_INCOMPLETE), []
    except Exception:  # noqa: BLE001 - reported as failure 5
        log.exception("job %s: render task failed", job_id)
        outcome, hashed = Failed(MSG_INTERNAL), []
    if handle.scope.cancelled_caught:
        outcome, hashed = None, []
    gen.pinned.pop(job_id, None)
    gen.jobs.tell(job_id, RenderDone(handle, outcome, hashed))


def _hash_outputs(outputs) -> list:
    out = []
    for o in outputs:
        sha, size = hash_file(o.path)
        out.append((o, sha, size))
    return out


def render_request(gen: Generation, job_id: str, job: dict) -> RenderRequest:
    """What the backend or engine needs to render `job` (its input files must exist)."""
    params = sql.params_of(job)
    slots: dict[str, list[str]] = params.get("inputs") or {}
    rows = {r["id"]: r for r in sql.assets_in_org(gen.store, job["organization_id"],
                                                  [i for ids in slots.values() for i in ids])}
    inputs = {}
    for name, ids in slots.items():
        files = []
        for i in ids:
            r = rows[i]
            path = gen.files.input_path(r["sha256"], job_id)
            files.append(InputFile(path, r["content_type"], r["kind"], r["width"], r["height"], r["duration_s"],
                                   r["frames"]))
        inputs[name] = files
    seed = params.get("seed")
    if seed is None:
        seed = uuid.UUID(job_id).int % (2 ** 31)
    duration = params.get("duration")
    return RenderRequest(
        job_id=job_id, capability=job["capability"], model=job["model"], backend=job["backend"],
        prompt=job["prompt"], seed=int(seed), aspect_ratio=params.get("aspect_ratio"),
        resolution=params["resolution"], duration=None if duration is None else float(duration),
        inputs=inputs, work_dir=gen.files.work_dir(job_id), test_mode=gen.settings.test_mode,
        chat=gen.chat_turns.get(job_id),
    )

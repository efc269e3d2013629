"""Renders off the actor loop: the render task (a backend in a worker thread, or an engine)
and the render request built from a job record. The task runs in its job actor's `tasks`
nursery and only reports `RenderDone` to the actor; the actor decides what it means."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import trio

from service import threads
from service.actors.jobs.context import JobContext
from service.actors.jobs.messages import RenderDone, RenderHandle
from service.actors.jobs.record import JobRecord
from service.assets.files import ObjectMissing, StoreUnavailable, hash_file
from service.assets.scopes import scope_of
from service.backends import MSG_INCOMPLETE, MSG_INTERNAL, Completed, Failed, Flagged, InputFile, RenderRequest, render
from service.storage import generation as sql

log = logging.getLogger("service.actors.jobs")


async def render_task(ctx: JobContext, job_id: str, handle: RenderHandle, req: RenderRequest) -> None:
    outcome: Completed | Failed | Flagged | None = None
    hashed: list[Any] = []
    try:
        with handle.scope:
            paths = [f.path for files in req.inputs.values() for f in files]
            if paths:
                await threads.run_sync(ctx.files.fetch_inputs, paths, abandon_on_cancel=True)
            else:
                # where the hop was: a cancel that came before lands here as before, without
                # the scheduler step `checkpoint` adds (a job's render is three steps shorter)
                await trio.lowlevel.checkpoint_if_cancelled()
            model = ctx.model_for(job_id, req.model)
            if model is not None and model.engine is not None:
                outcome = await ctx.engine_render(req, model)
            else:
                outcome = await render(req, limiter=ctx.render_limiter)
            if isinstance(outcome, Completed):
                if all(o.digest is not None for o in outcome.outputs):
                    hashed = _hash_outputs(outcome.outputs)  # hashed as they were written: no file read
                    await trio.lowlevel.checkpoint_if_cancelled()  # where the hop was, as above
                else:
                    hashed = await threads.run_sync(_hash_outputs, outcome.outputs, abandon_on_cancel=True)
    except (StoreUnavailable, ObjectMissing) as e:
        log.error("job %s: an input could not be read from the asset store: %r", job_id, e)
        outcome, hashed = Failed(MSG_INCOMPLETE), []
    except Exception:  # noqa: BLE001 - reported as failure 5
        log.exception("job %s: render task failed", job_id)
        outcome, hashed = Failed(MSG_INTERNAL), []
    if handle.scope.cancelled_caught:
        outcome, hashed = None, []
    ctx.unpin(job_id)
    ctx.jobs.tell(job_id, RenderDone(handle, outcome, hashed))


def _hash_outputs(outputs: list[Any]) -> list[Any]:
    """(output, sha256, size) for each; the file is read only when its writer did not hash it."""
    out = []
    for o in outputs:
        sha, size = o.digest if o.digest is not None else hash_file(o.path)
        out.append((o, sha, size))
    return out


def render_request(ctx: JobContext, job: JobRecord, *, resumed: bool) -> RenderRequest:
    """What the backend or engine needs to render `job` (its input files must exist): the
    record and its settings as the submit rules left them, the input assets found on disk."""
    settings = job.settings
    ids = [i for slot in settings.inputs.values() for i in slot]
    rows = {r["id"]: r for r in sql.assets_in_org(ctx.store, job.organization_id, ids)}
    inputs = {name: [_input_file(rows[i], ctx.files.input_path(rows[i]["sha256"], job.id, scope_of(rows[i]))) for i in slot]
              for name, slot in settings.inputs.items()}
    return RenderRequest(
        job_id=job.id, capability=job.capability, model=job.model, backend=job.backend,
        prompt=job.prompt, seed=settings.render_seed(job.id), aspect_ratio=settings.aspect_ratio,
        resolution=settings.resolution, duration=settings.duration,
        inputs=inputs, work_dir=ctx.files.work_dir(job.id), test_mode=ctx.test_mode,
        chat=ctx.chat_for(job.id), resumed=resumed,
    )


def _input_file(row: dict[str, Any], path: Path) -> InputFile:
    return InputFile(path, row["content_type"], row["kind"], row["width"], row["height"], row["duration_s"],
                     row["frames"])

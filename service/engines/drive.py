"""One job through one engine, the same way for every engine: submit, wait, outputs; on a
cancel of the job, the engine's `cancel` (shielded, at most CANCEL_S) and the cancel goes on.

A node that is stopping (`Context.stopping`) does not cancel: the engine finishes the job and
the restarted node follows it again by its id. The job's webhooks (Cog, Replicate) are
forgotten however the job ends.
"""

from __future__ import annotations

import logging
from typing import TypeVar

import httpx
import trio

from service.backends.base import Completed, RenderRequest
from service.catalog.engines import EngineTable

from .common import CANCEL_S, TooLarge, first_error, is_cancel
from .context import Context
from .protocol import Engine, EngineJob, Job

log = logging.getLogger(__name__)

C = TypeVar("C", bound=EngineTable)


async def drive(engine: Engine[C], cfg: C, ctx: Context, req: RenderRequest, url: str = "",
                concurrency: int = 1) -> Completed:
    """The job's outputs; the errors of `common.py` (or an HTTP client error) otherwise. An
    answer of another shape than the protocol's (a list where an object belongs, JSON nested
    thousands deep) is Incomplete where it is parsed (`common.json_object`, `shaped`), not
    here: an AttributeError of the node's own code is a bug, `render`'s internal error."""
    job: EngineJob | None = None
    try:
        try:
            async with trio.open_nursery() as tasks:
                job = engine.job(cfg, Job(req, url, concurrency, tasks))
                await job.submit()
                await job.wait()
                done = await job.outputs()
                tasks.cancel_scope.cancel()
            return done
        except BaseExceptionGroup as group:  # the job's tasks fail one at a time: callers map single errors
            error = first_error(group)
            if error is group:
                raise
            raise error from None
    except BaseException as e:
        if job is not None and is_cancel(e) and not ctx.stopping:
            with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_S):
                try:
                    await job.cancel()
                except (httpx.HTTPError, TooLarge) as err:
                    log.warning("job %s: cancelling it on the %s engine failed: %s", req.job_id, req.backend,
                                type(err).__name__)
        raise
    finally:
        ctx.forget_hooks(req.job_id)

"""The one shape every engine client has (ComfyUI, Cog, Replicate, fal, OpenAI, and any
engine added later): what the job path needs of an engine, nothing more.

An `Engine` is made once per node (with the node's `Context`) and says which servers a
model's table lists (pooled and health-checked) and whether one of them is healthy. For
each job it returns an `EngineJob`, which `drive.py` takes through the same steps for
every engine: `submit`, `wait`, `outputs`; `cancel` when the job is cancelled on the
node. The steps raise the errors of `common.py`, which `Engines.render` maps to the
spec's failure messages, so no engine decides a message itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

import trio

from service.backends.base import Completed, RenderRequest
from service.catalog.engines import EngineTable

from .context import Context

C_contra = TypeVar("C_contra", bound=EngineTable, contravariant=True)


@dataclass(frozen=True)
class Job:
    """One job as an engine client gets it."""

    req: RenderRequest
    url: str  # the pool's server chosen for the job; "" for a hosted API (its URL is in the table)
    concurrency: int  # the model's jobs at once per server (1: a single-slot server)
    tasks: trio.Nursery  # tasks living while the job is followed (a socket reader); cancelled after


class EngineJob(Protocol):
    """One job on one engine. Its steps run in order; any may be cancelled, and then
    `cancel` runs (shielded, bounded) with whatever the earlier steps learned."""

    async def submit(self) -> None:
        """Hand the job to the engine (or find it there again after a node restart)."""

    async def wait(self) -> None:
        """Return once the engine has the job's final state."""

    async def outputs(self) -> Completed:
        """The job's files, stored under its work dir, and what it used."""

    async def cancel(self) -> None:
        """Stop the job on the engine, as far as it got; a no-op when nothing was sent."""


class Engine(Protocol[C_contra]):
    """An engine client for one backend; `C_contra` is its `[models.engine]` table class."""

    def servers(self, cfg: C_contra) -> list[str]:
        """The servers to pool and health-check for a model; [] for a hosted API (no pool)."""

    async def health(self, cfg: C_contra, url: str) -> bool:
        """Whether one server answers ready (an error counts as down)."""

    def job(self, cfg: C_contra, job: Job) -> EngineJob:
        """The engine's side of one job (no I/O until `submit`)."""


class MakeEngine(Protocol[C_contra]):
    """How the table makes an engine: from the node's context (an engine class)."""

    def __call__(self, ctx: Context) -> Engine[C_contra]: ...


__all__ = ["Context", "Engine", "EngineJob", "Job", "MakeEngine"]

"""What a job actor is handed: exactly the node parts it uses, typed (not the node, not the
facade). Built once by `Generation` (facade.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio

from service.actors.jobs.queues import EngineQueues
from service.actors.jobs.slots import ModelSlots
from service.actors.runtime import Registry
from service.assets.files import FileStore
from service.backends import Completed, Failed, Flagged, RenderRequest
from service.backends.base import ChatTurn
from service.catalog.catalog import Model
from service.clock import Clock
from service.idempotency import Gate
from service.metrics import Metrics
from service.storage.db import Store
from service.streams import Hub

Outcome = Completed | Failed | Flagged


@dataclass(frozen=True)
class JobContext:
    store: Store
    clock: Clock
    base_url: str
    test_mode: bool
    balances: Registry[Any]  # asks go job -> balance
    jobs: Registry[Any]  # the job registry: the render task's report, a slot's grant
    slots: ModelSlots
    queues: EngineQueues
    files: FileStore
    streams: Hub
    metrics: Metrics
    keys: Gate  # idempotency keys of submits, written with the job row
    render_limiter: trio.CapacityLimiter  # built-in renders in worker threads at once
    engine_render: Callable[[RenderRequest, Model], Awaitable[Completed | Failed]]
    model_for: Callable[[str, str], Model | None]  # (job id, model id): the model it was submitted under
    unpin: Callable[[str], object]  # the job's render has ended: forget its pinned model
    chat_for: Callable[[str], ChatTurn | None]  # the front-door chat of a job, if any
    can_render: Callable[[str, str], bool]  # (model id, backend): a job left open by a stop can run here

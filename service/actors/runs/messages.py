"""The run actor's messages (service/actors/runs/actor.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from service.actors.runs.record import RunRecord, StepRecord


@dataclass(frozen=True)
class Create:
    run: RunRecord
    steps: tuple[StepRecord, ...]
    idempotency: dict[str, Any] | None = None  # {organization_id, key, request_hash}


@dataclass(frozen=True)
class CancelRun:
    pass


@dataclass(frozen=True)
class Advance:
    pass


@dataclass(frozen=True)
class StepJobEnded:
    key: str
    job_id: str
    status: dict[str, Any]


@dataclass(frozen=True)
class OpDone:
    key: str
    token: Any
    asset: dict[str, Any] | None  # the asset row to insert (created_at filled by the actor)
    error: str | None


class OpHandle:
    def __init__(self) -> None:
        self.scope = trio.CancelScope()

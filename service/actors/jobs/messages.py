"""The job actor's messages (actor.py); the facade, the render task and the slot line send them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from service.backends import Completed, Failed, Flagged
from service.catalog.rules import Plan

Notify = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Submit:
    org_id: str
    project_id: str
    plan: Plan
    source: str = "api"
    workflow_run_id: str | None = None
    webhook_url: str | None = None
    notify: Notify | None = None
    idempotency: dict[str, Any] | None = None  # {organization_id, key, request_hash}
    api_key_id: str | None = None  # the key it was submitted with: its spend limit counts the hold


@dataclass(frozen=True)
class Cancel:
    org_id: str | None = None


@dataclass(frozen=True)
class Watch:
    notify: Notify


@dataclass(frozen=True)
class Resume:
    """Continue after a load (start, crash reload): render, settle, or finish."""


@dataclass(frozen=True)
class SlotGranted:
    pass


@dataclass(frozen=True)
class Progress:
    """An engine's progress on the job's render."""

    value: float
    maximum: float
    step: str | None


@dataclass(frozen=True)
class RenderDone:
    token: Any
    outcome: Completed | Failed | Flagged | None  # None: the render was cancelled
    hashed: list[Any] = field(default_factory=list)  # [(Output, sha256, size)] for Completed


class RenderHandle:
    """A running (or finished but not yet reported) render of one job."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()

"""A job as the actor holds it: the `jobs` row, typed and frozen (a change is a new record,
made with `dataclasses.replace` once the change is committed)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from service.actors.row_record import RowRecord
from service.catalog.request import JobSettings
from service.machines import JOB
from service.storage import generation as sql
from service.views import jobs as views
from service.views.shapes import JobStatus, Progress


@dataclass(frozen=True)
class JobRecord(RowRecord):
    id: str
    organization_id: str
    project_id: str
    capability: str
    model: str
    backend: str
    source: str
    workflow_run_id: str | None
    status: str
    prompt: str
    params: str  # JSON of `settings` (JobSettings.to_json)
    price_uc: int
    actual_uc: int | None
    hold_id: str
    hold_settled: int
    webhook_url: str | None
    error: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    usage: str | None = None  # JSON: what an engine reported it used (completed jobs)

    @property
    def final(self) -> bool:
        return JOB.is_final(self.status)

    @cached_property
    def settings(self) -> JobSettings:
        """The decoded `params` (decoded once: the deadline reads it on every message)."""
        return JobSettings.from_json(self.params)


def job_status(store: Any, base_url: str, job: dict[str, Any], progress: Progress | None) -> JobStatus:
    """The status object of a job row, its outputs read from the store; an engine's last
    progress is shown while the job renders. An open job has none: its outputs are written
    in the transaction of its final state, so only a final job's are read."""
    outputs = [] if job["status"] in sql.OPEN else sql.assets_of_jobs(store, [job["id"]])[job["id"]]
    status = views.status_object(job, outputs, base_url)
    if progress is not None and job["status"] == "rendering":
        status["progress"] = progress
    return status

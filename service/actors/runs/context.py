"""What a run actor is handed: exactly the node parts it uses, typed. Jobs are reached
through `JobsPort`, the four calls of the generation facade a run makes (so the run
package never imports the job package: asks flow run -> job)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from service.actors.runs.record import RunRecord, StepRecord
from service.assets.files import FileStore
from service.catalog.request import SubmitRequest
from service.catalog.rules import Plan
from service.clock import Clock
from service.idempotency import Gate
from service.storage import generation as gen_sql
from service.storage.db import Store
from service.streams import Hub
from service.views import runs as run_views
from service.views.shapes import ProductRun

Notify = Callable[[dict[str, Any]], None]


class JobsPort(Protocol):
    def plan(self, org_id: str, project_id: str, *, capability: str | None = None, model: str | None = None,
             request: SubmitRequest) -> Plan: ...

    async def submit(self, plan: Plan, *, org_id: str, project_id: str, source: str = "api",
                     webhook_url: str | None = None, workflow_run_id: str | None = None,
                     notify: Notify | None = None, idempotency: dict[str, Any] | None = None,
                     job_id: str | None = None, api_key_id: str | None = None) -> dict[str, Any]: ...

    async def watch(self, job_id: str, notify: Notify) -> None: ...

    async def cancel(self, org_id: str, job_id: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RunContext:
    store: Store
    clock: Clock
    base_url: str
    runs: Any  # the run registry (Registry[RunActor]): a job's or an op's report comes back through it
    jobs: JobsPort
    files: FileStore
    streams: Hub
    keys: Gate  # idempotency keys of run starts, written with the run

    def view_of(self, run: RunRecord, steps: Iterable[StepRecord]) -> ProductRun:
        """The ProductRun object (service/views/runs.py) of a run and its steps."""
        return run_view(self.store, self.base_url, run.row(), [s.row() for s in steps])


def run_view(store: Store, base_url: str, run: dict[str, Any], steps: list[dict[str, Any]]) -> ProductRun:
    """The view of a run row and its step rows (as read, or a record's `row()`)."""
    ids = run_views.asset_ids_of(run, steps)
    assets = {r["id"]: r for r in gen_sql.assets_in_org(store, run["organization_id"], ids)} if ids else {}
    return run_views.run_view(run, steps, assets, base_url)

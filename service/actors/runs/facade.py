"""The products facade: what routes call for products and runs.

Interfaces
==========

    view  = await products.start(org_id, user_id, slug, inputs, project, idempotency_key=None,
                                 request_hash=None)
        The route has resolved the project (404 unknown, 409 archived). Checks, in this
        order: product known (404), inputs (422, input name in
        `details.input`), product available for those inputs (503
        `request.service_unavailable`, details `product`, `reasons`), the balance covers the
        whole estimate (402 `billing.insufficient_credits`, details `required`, `available`;
        nothing reserved), then the key's (`api_key_id`) and the project's spend limits do
        (402 `billing.spend_limit_reached`; nothing reserved; each step's hold is checked
        again), then fewer than `max_active_jobs_per_org` of the organization's runs are open (429
        `request.rate_limited`, details `open_runs_limit`). Then the run actor persists the run `queued` with every step `pending` and
        answers the ProductRun (HTTP 202). With an Idempotency-Key: the same key and the same
        request within 24 h answer the first 202 body and start nothing;
        another request under that key is 422.
    view  = await products.cancel(org_id, run_id)     spec's cancel rules; 404 NotFound
    view  = products.get(org_id, run_id)              any project of the organization
    views = products.list_runs(project_id, limit, product=None)
    (the merged feed of GET /v1/runs is `service.views.run_feed`)
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from service.actors.balance.messages import SpendCheck
from service.actors.runs.actor import RunActor
from service.actors.runs.context import RunContext, run_view
from service.actors.runs.messages import CancelRun, Create
from service.actors.runs.record import RunRecord, StepRecord
from service.actors.runtime import Registry
from service.assets.signing import load_secret
from service.catalog import products as catalog_products
from service.catalog.catalog import Model
from service.errors import InsufficientCredits, NotFound, RateLimited, ServiceError
from service.idempotency import Claim, Gate
from service.idempotency import request_hash as idem_hash
from service.machines import RUN
from service.money import fmt, to_uc
from service.storage import billing as billing_sql
from service.storage import generation as gen_sql
from service.storage import products as sql
from service.views import runs as run_views
from service.views.catalog_shapes import Product
from service.views.run_feed import cursor_key
from service.views.shapes import ProductRun

log = logging.getLogger(__name__)

# Runs of one organization queued or running at once: at most `max_active_jobs_per_org`
# (the setting's own bound on jobs; 0 turns both off). A start reserves nothing (each step's
# hold is placed as it starts), and a run's steps are not counted among the jobs, so without
# it the balance check let a member start any number (an actor, rows and a job each). Read at
# each start: starts racing at the cap may pass it by the few in flight at once, as jobs may.
OPEN_RUNS_RETRY_S = 5


class Products:
    """The node's product part: the run registry and what the HTTP routes call."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.store = node.store
        self.clock = node.clock
        self.base_url: str = node.settings.public_base_url
        self.runs: Registry[RunActor] = Registry("runs", lambda key: RunActor(self.context), node.clock)
        self.cursor_key = cursor_key(load_secret(node.settings.data_dir))
        self.keys = Gate(node.store, node.clock, table="product_run_keys", id_field="run_id", detail="run_id")
        self.context = RunContext(store=node.store, clock=node.clock, base_url=self.base_url, runs=self.runs,
                                  jobs=node.generation, files=node.generation.files, streams=node.streams,
                                  keys=self.keys)

    @property
    def generation(self) -> Any:
        return self.node.generation

    @property
    def files(self) -> Any:
        return self.node.generation.files

    @property
    def catalog(self) -> Any:
        return self.node.catalog

    # views ----------------------------------------------------------------------------------
    def view_of(self, run: dict[str, Any], steps: list[dict[str, Any]]) -> ProductRun:
        return run_view(self.store, self.base_url, run, steps)

    def views_of(self, runs: list[dict[str, Any]]) -> list[ProductRun]:
        """Many runs at once (three queries)."""
        if not runs:
            return []
        steps = sql.steps_of_runs(self.store, [r["id"] for r in runs])
        ids: list[str] = []
        for r in runs:
            ids.extend(run_views.asset_ids_of(r, steps[r["id"]]))
        assets = {row["id"]: row for row in gen_sql.assets_by_ids(self.store, ids)}
        return [run_views.run_view(r, steps[r["id"]], assets, self.base_url) for r in runs]

    def get(self, org_id: str, run_id: str) -> ProductRun:
        run = sql.run_in_org(self.store, org_id, run_id)
        if run is None:
            raise NotFound("Run not found.")
        return self.view_of(run, sql.steps_of(self.store, run_id))

    def list_runs(self, project_id: str, limit: int, product: str | None = None) -> list[ProductRun]:
        return self.views_of(sql.list_runs(self.store, project_id, limit, product))

    # products -------------------------------------------------------------------------------
    def runnable(self, model: Model) -> bool:
        ok: bool = self.node.runnable(model)
        return ok

    def product_or_404(self, slug: str) -> Any:
        p = catalog_products.product(slug)
        if p is None:
            raise NotFound("Product not found.", {"product": slug})
        return p

    def product_view(self, p: Any, values: dict[str, Any] | None = None) -> Product:
        return catalog_products.product_view(p, self.catalog, self.runnable, values)

    def values_for(self, p: Any, org_id: str, project_id: str, inputs: Any) -> dict[str, Any]:
        return catalog_products.validate_run_inputs(
            p, inputs, self.generation.resolve_inputs(org_id), project_id=project_id, base_url=self.base_url)

    def estimate(self, slug: str, org_id: str, project_id: str, inputs: Any) -> Product:
        p = self.product_or_404(slug)
        values = self.values_for(p, org_id, project_id, inputs)
        return self.product_view(p, values)

    # runs -----------------------------------------------------------------------------------
    async def start(self, org_id: str, user_id: str | None, slug: str, inputs: Any, project: dict[str, Any],
                    idempotency_key: str | None = None, request_hash: str | None = None,
                    api_key_id: str | None = None) -> dict[str, Any]:
        if idempotency_key is None:
            return await self._start(org_id, user_id, slug, inputs, project, None, api_key_id)
        if request_hash is None:
            request_hash = idem_hash({"product": slug, "project_id": project["id"], "inputs": inputs})
        return await self.keys.once(org_id, idempotency_key, request_hash,
                                    lambda claim: self._start(org_id, user_id, slug, inputs, project, claim,
                                                              api_key_id))

    async def _start(self, org_id: str, user_id: str | None, slug: str, inputs: Any, project: dict[str, Any],
                     idempotency: dict[str, Any] | None,
                     api_key_id: str | None = None) -> dict[str, Any]:
        p = self.product_or_404(slug)
        values = self.values_for(p, org_id, project["id"], inputs)
        estimate_uc = catalog_products.require_available(p, self.catalog, self.runnable, values)
        available_uc = to_uc(billing_sql.balance(self.store, org_id, self.clock.now())["available"])
        if available_uc < estimate_uc:
            raise InsufficientCredits("Not enough credits to start this run.",
                                      {"required": fmt(estimate_uc), "available": fmt(available_uc)})
        # the whole estimate against the key's and the project's spend limits (nothing held)
        await self.node.balances.ask(org_id, SpendCheck(estimate_uc, project["id"], api_key_id))
        self._check_open_runs(org_id)
        run_id = str(uuid.uuid4())
        now = self.clock.iso_now()
        run = RunRecord(
            id=run_id, organization_id=org_id, project_id=project["id"], product=p.slug,
            product_version=p.version, status="queued", inputs=json.dumps(inputs),
            run_values=json.dumps(values), outputs=None, estimate_uc=estimate_uc, actual_uc=None,
            error=None, created_by=user_id, created_at=now, started_at=None, finished_at=None,
            api_key_id=api_key_id,
        )
        steps = tuple(
            StepRecord(run_id=run_id, key=s.key, position=i, capability=s.capability, op=s.op,
                       model=s.model, status="pending", request_id=None, outputs="[]", cost_uc=None,
                       error=None, started_at=None, finished_at=None)
            for i, s in enumerate(p.steps)
        )
        view: dict[str, Any] = await self.runs.ask(run_id, Create(run, steps, idempotency))
        return view

    def _check_open_runs(self, org_id: str) -> None:
        limit = self.node.settings.max_active_jobs_per_org
        if limit <= 0:
            return
        if sql.open_runs(self.store, org_id) >= limit:
            raise RateLimited(f"Too many product runs in progress for this organization (at most {limit} "
                              "queued or running). Retry when some have finished.", OPEN_RUNS_RETRY_S,
                              {"open_runs_limit": limit})

    async def cancel(self, org_id: str, run_id: str) -> ProductRun:
        run = sql.run_in_org(self.store, org_id, run_id)
        if run is None:
            raise NotFound("Run not found.")
        if RUN.is_final(run["status"]):
            return self.view_of(run, sql.steps_of(self.store, run_id))
        view: ProductRun = await self.runs.ask(run_id, CancelRun())
        return view

    # start ----------------------------------------------------------------------------------
    async def recover(self) -> None:
        """At start, after the job recovery: purge old idempotency keys, wake every open run
        (it resumes itself), cancel step jobs still open under a run that is final, then wake
        that run too: loaded, it asks again if the cancel failed and records a job that
        completed anyway as a completed step."""
        await self.keys.purge()
        open_ids = sql.open_run_ids(self.store)
        for run_id in open_ids:
            self.runs.get(run_id)
        for job in sql.open_jobs_of_final_runs(self.store):
            log.info("job %s is open under final run %s; canceling it", job["id"], job["workflow_run_id"])
            try:
                await self.generation.cancel(job["organization_id"], job["id"])
            except ServiceError as e:
                log.error("job %s: cancel failed: %r", job["id"], e)
            self.runs.get(job["workflow_run_id"])
        if open_ids:
            log.info("products: %d runs resumed after a stop", len(open_ids))

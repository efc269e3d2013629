"""Cog: Replicate's open-source model server.

- Create with `PUT /predictions/{id}` (idempotent: the job id is the prediction id, so a
  restarted node re-attaches instead of starting a second one) and
  `Prefer: respond-async`; the outcome arrives only by webhook to this node (Cog has no
  GET of a prediction).
- The create is tried again after a transient fault (`common.patiently`): Cog answers a
  PUT of the prediction it is running with that prediction.
- 409 "At capacity" is backpressure: wait and try again, the job is not failed.
- While waiting, `/health-check` is polled: a server that stops answering (every check
  failing for ~30 s, `sum(RETRY_S)`: a reset or a slow answer is no outcome) fails the
  job as unavailable; an idle single-slot server (`READY`) that has sent no outcome for a
  few checks has lost the job (a restart), which fails it as incomplete.
- Cancel: `POST /predictions/{id}/cancel`.
- Inputs are bound by name (`[models.engine.bind]`); an input asset goes as a data URL.
  Outputs: data URLs or http(s) URLs become files; plain strings are text (a
  `text.llm` reply).
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import trio

from service.backends.base import Completed
from service.catalog.engines import CogEngine

from . import common
from .common import Incomplete, Unreachable, check, collect, inputs_of, patiently
from .context import Context, Hooks
from .protocol import Job

log = logging.getLogger(__name__)

BUSY_RETRY_S = (0.05, 2.0)  # first and largest wait after a 409
LOST_AFTER = 5  # idle health checks with no outcome (Cog retries a final webhook for a while)
DOWN_AFTER = 2  # failed health checks, failing for sum(RETRY_S) seconds
FINAL = ("succeeded", "failed", "canceled")


class Cog:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def servers(self, cfg: CogEngine) -> list[str]:
        return list(cfg.urls)

    async def health(self, cfg: CogEngine, url: str) -> bool:
        resp = await self.ctx.http.get(f"{url}/health-check", timeout=5.0)
        return resp.status_code == 200 and resp.json().get("status") in ("READY", "BUSY")

    def job(self, cfg: CogEngine, job: Job) -> CogJob:
        return CogJob(self.ctx, cfg, job)


class CogJob:
    def __init__(self, ctx: Context, cfg: CogEngine, job: Job) -> None:
        self.ctx, self.cfg, self.req, self.url = ctx, cfg, job.req, job.url
        self.single_slot = job.concurrency == 1
        self.hooks: Hooks | None = None
        self.prediction: dict[str, Any] = {}

    async def submit(self) -> None:
        req = self.req
        self.hooks = self.ctx.expect_hooks(req.job_id)
        body = {"id": req.job_id, "input": await trio.to_thread.run_sync(inputs_of, req, self.cfg),
                "webhook": self.ctx.hook_url(req.job_id), "webhook_events_filter": ["start", "completed"]}
        self.prediction = await self._create(body)

    async def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        http, where = self.ctx.http, f"{self.url}/predictions/{self.req.job_id}"
        wait = BUSY_RETRY_S[0]
        while True:
            resp = await patiently(lambda: http.put(where, json=body, headers={"Prefer": "respond-async"},
                                                    timeout=self.cfg.timeout_s))
            if resp.status_code != 409:
                answer: dict[str, Any] = check(resp).json()
                return answer
            await trio.sleep(wait)  # at capacity: another job holds its slot
            wait = min(wait * 2, BUSY_RETRY_S[1])

    async def wait(self) -> None:
        """The final prediction from the webhooks, or an error when the server dies or forgets it."""
        if self.prediction.get("status") in FINAL:
            return
        assert self.hooks is not None
        cfg, url = self.cfg, self.url
        failed = idle = 0
        failing_since = 0.0
        while True:
            with trio.move_on_after(cfg.poll_s):
                async for payload in self.hooks:
                    if payload.get("status") in FINAL:
                        self.prediction = payload
                        return
                    idle = 0  # a `start`/`processing` hook: it is working on it
            try:
                resp = await self.ctx.http.get(f"{url}/health-check", timeout=min(cfg.timeout_s, 5.0))
                status = resp.json().get("status") if resp.status_code == 200 else None
                failed = 0
            except (httpx.TransportError, ValueError):
                failed, status = failed + 1, None
                failing_since = failing_since if failed > 1 else trio.current_time()
                if failed >= DOWN_AFTER and trio.current_time() - failing_since >= sum(common.RETRY_S):
                    raise Unreachable(f"Cog server {url} stopped answering") from None
            idle = idle + 1 if self.single_slot and status == "READY" else 0
            if idle >= LOST_AFTER:
                raise Incomplete(f"Cog server {url} is idle and sent no outcome (restarted?)")

    async def outputs(self) -> Completed:
        final = self.prediction
        status = final.get("status")
        if status != "succeeded":
            raise Incomplete(f"Cog prediction {status}: {str(final.get('error') or '')[:300]}")
        return Completed(await collect(self.ctx.http, self.req, final.get("output"), self.cfg.timeout_s))

    async def cancel(self) -> None:
        await self.ctx.http.post(f"{self.url}/predictions/{self.req.job_id}/cancel", timeout=common.CANCEL_S)

"""Sketch: a small made-up engine, added the way docs/engines.md ("Adding an engine") says:
this one module (its `[models.engine]` table and its client) and one table row, registered
by tests/test_engines_added.py. Its server (tests/peers/sketch.py) speaks a plain job API:

    PUT    /jobs/{id}     {"id", ...bound fields}  -> {"state": "running" | "done" | "failed", "file"?}
    GET    /jobs/{id}     the job's state
    DELETE /jobs/{id}     cancel it
    GET    /ready         200 when it takes jobs
"""

from __future__ import annotations

from typing import Any

import httpx
import trio
from pydantic import Field

from service.backends.base import Completed
from service.catalog.engines import Pooled
from service.engines.common import (CANCEL_S, Incomplete, NoOutput, check, inputs_of, patiently, read,
                                    store_output)
from service.engines.context import Context
from service.engines.protocol import Job


class SketchTable(Pooled):
    """`urls`, `bind` and `timeout_s` as every pooled engine, and how often to look."""

    poll_s: float = Field(default=0.05, gt=0, le=60)


class Sketch:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def servers(self, cfg: SketchTable) -> list[str]:
        return list(cfg.urls)

    async def health(self, cfg: SketchTable, url: str) -> bool:
        return (await self.ctx.http.get(f"{url}/ready", timeout=5.0)).status_code == 200

    def job(self, cfg: SketchTable, job: Job) -> SketchJob:
        return SketchJob(self.ctx.http, cfg, job)


class SketchJob:
    def __init__(self, http: httpx.AsyncClient, cfg: SketchTable, job: Job) -> None:
        self.http, self.cfg, self.req = http, cfg, job.req
        self.where = f"{job.url}/jobs/{job.req.job_id}"
        self.url = job.url
        self.state: dict[str, Any] = {}

    async def submit(self) -> None:
        body = {"id": self.req.job_id, **inputs_of(self.req, self.cfg)}
        # keyed by the job id, so a PUT whose answer was lost may be sent again
        self.state = check(await patiently(lambda: self.http.put(self.where, json=body,
                                                                 timeout=self.cfg.timeout_s))).json()

    async def wait(self) -> None:
        while self.state.get("state") == "running":
            await trio.sleep(self.cfg.poll_s)
            self.state = (await read(self.http, self.where, self.cfg.timeout_s)).json()

    async def outputs(self) -> Completed:
        if self.state.get("state") != "done":
            raise Incomplete(f"sketch job {self.req.job_id} ended {self.state.get('state')!r}")
        data = (await read(self.http, f"{self.url}{self.state['file']}", self.cfg.timeout_s)).content
        out = await store_output(self.req, 0, data, "out.png")
        if out is None:
            raise NoOutput(f"sketch job {self.req.job_id}: its file is not one this node stores")
        return Completed([out])

    async def cancel(self) -> None:
        await self.http.delete(self.where, timeout=CANCEL_S)

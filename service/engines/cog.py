"""Cog: Replicate's open-source model server.

- Create with `PUT /predictions/{id}` (idempotent: the job id is the prediction id, so a
  restarted node re-attaches instead of starting a second one) and
  `Prefer: respond-async`; the outcome arrives only by webhook to this node (Cog has no
  GET of a prediction).
- Or, with `outcome = "response"`, the PUT without `Prefer` waits for the prediction and
  answers its end: no webhook, so one HTTP exchange a job fewer for the node (-25 % of its
  CPU a job, bench/README.md "Throughput V") and the node need not be reachable from Cog.
  The price: Cog cancels a prediction whose request is gone, so a node restart or a broken
  connection runs it again (charged once) instead of re-attaching. A PUT answered `202`
  finds a prediction of this id that an earlier, gone request started and no one follows:
  it is cancelled and the PUT sent again. Health checks go on meanwhile, for a server that
  hangs with the connection open.
- The create is tried again after a transient fault (`common.patiently`): Cog answers a
  PUT of the prediction it is running with that prediction.
- 409 "At capacity" is backpressure: wait and try again, the job is not failed.
- While waiting, `/health-check` is polled: a server that stops answering (every check
  failing for ~30 s, `sum(RETRY_S)`: a reset or a slow answer is no outcome) fails the
  job as unavailable; an idle single-slot server (`READY`) that has sent no outcome for a
  few checks has lost the job (a restart), which fails it as incomplete. The jobs waiting
  on one server share its checks (`Cog.status`): one at a time, and an answer to a check
  begun less than `poll_s` ago serves every job that asks, so a server running 64 jobs is
  asked about once per `poll_s`, not 64 times; each job still sees a new answer each turn.
- Cancel: `POST /predictions/{id}/cancel`.
- Inputs are bound by name (`[models.engine.bind]`); an input asset goes as a data URL.
  Outputs: data URLs or http(s) URLs become files; plain strings are text (a
  `text.llm` reply).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from service.backends.base import Completed
from service.catalog.engines import CogEngine

from . import common
from .common import Incomplete, Unreachable, bound_inputs, bounded, check, collect, json_object, patiently
from .context import Context, Hooks
from .protocol import Job
from .transport import send_plain

log = logging.getLogger(__name__)

BUSY_RETRY_S = (0.05, 2.0)  # first and largest wait after a 409
LOST_AFTER = 5  # idle health checks with no outcome (Cog retries a final webhook for a while)
DOWN_AFTER = 2  # failed health checks, failing for sum(RETRY_S) seconds
FINAL = ("succeeded", "failed", "canceled")
# A health check's answer: `status` and the setup's logs, which Cog repeats in every answer
# (a long setup's download progress takes a few hundred KiB); past it the check has failed.
HEALTH_MAX_BYTES = 4 * common.MiB


class _Down:
    """A server's failed health checks in a row: down once unanswered for sum(RETRY_S),
    over DOWN_AFTER checks at least (a reset or a slow answer is not yet an outcome)."""

    def __init__(self, url: str) -> None:
        self.url, self.failed, self.since = url, 0, 0.0

    def seen(self, answered: bool) -> None:
        if answered:
            self.failed = 0
            return
        self.failed += 1
        self.since = self.since if self.failed > 1 else trio.current_time()
        if self.failed >= DOWN_AFTER and trio.current_time() - self.since >= sum(common.RETRY_S):
            raise Unreachable(f"Cog server {self.url} stopped answering") from None


@dataclass
class _Check:
    """One health check of a server, shared by the jobs that wait on it."""

    started: float
    done: trio.Event = field(default_factory=trio.Event)
    answer: tuple[bool, str | None] | None = None  # (answered, status); None: the check was cancelled


class Cog:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._checks: dict[tuple[str, float], _Check] = {}  # the last check per (server, timeout)

    async def status(self, url: str, timeout_s: float, fresh_s: float) -> tuple[bool, str | None]:
        """(answered, status) of the server's `/health-check`: (False, None) when it could
        not be read, status None for an answer other than 200. A check of the same server
        under way (however long it takes: one at a time), or begun less than `fresh_s` ago,
        gives its answer instead of a new one."""
        key = (url, timeout_s)
        while (check := self._checks.get(key)) is not None and (
                not check.done.is_set() or trio.current_time() - check.started < fresh_s):
            await check.done.wait()
            if check.answer is not None:
                return check.answer
            if self._checks.get(key) is check:  # its job was cancelled mid-check: ask anew
                break
        check = self._checks[key] = _Check(trio.current_time())
        try:
            try:
                resp = await send_plain(self.ctx.http, "GET", f"{url}/health-check", timeout=timeout_s,
                                        limit=HEALTH_MAX_BYTES)
                answer: tuple[bool, str | None] = (True, _status(resp) if resp.status_code == 200 else None)
            except (httpx.TransportError, ValueError, Incomplete):  # TooLarge, or not a JSON object
                answer = (False, None)
            check.answer = answer
        finally:
            check.done.set()
        return answer

    def servers(self, cfg: CogEngine) -> list[str]:
        return list(cfg.urls)

    async def health(self, cfg: CogEngine, url: str) -> bool:
        resp = await send_plain(self.ctx.http, "GET", f"{url}/health-check", timeout=5.0, limit=HEALTH_MAX_BYTES)
        return resp.status_code == 200 and _status(resp) in ("READY", "BUSY")

    def job(self, cfg: CogEngine, job: Job) -> CogJob:
        return CogJob(self, cfg, job)


class CogJob:
    def __init__(self, cog: Cog, cfg: CogEngine, job: Job) -> None:
        self.cog, self.ctx, self.cfg, self.req, self.url = cog, cog.ctx, cfg, job.req, job.url
        self.tasks = job.tasks
        self.single_slot = job.concurrency == 1
        self.hooks: Hooks | None = None
        self.prediction: dict[str, Any] = {}

    async def submit(self) -> None:
        req = self.req
        body: dict[str, Any] = {"id": req.job_id, "input": await bound_inputs(req, self.cfg)}
        if self.cfg.outcome == "response":
            self.prediction = await self._answered(body)
            return
        self.hooks = self.ctx.expect_hooks(req.job_id)
        body["webhook"] = self.ctx.hook_url(req.job_id)
        # the final webhook only: Cog answers its health check BUSY from the PUT's answer to
        # the prediction's end (coglet 0.23.1, tests/test_engines_cog.py), so a single-slot
        # server's lost-job rule (`wait`) needs no `start` hook; a GPU fleet of single-slot
        # servers takes one incoming connection a job fewer (bench/README.md, "Throughput XVIII")
        body["webhook_events_filter"] = ["completed"]
        self.prediction = await self._create(body, {"Prefer": "respond-async"}, self.cfg.timeout_s)

    async def _create(self, body: dict[str, Any], headers: dict[str, str],
                      timeout: float | httpx.Timeout) -> dict[str, Any]:
        http, where = self.ctx.http, f"{self.url}/predictions/{self.req.job_id}"
        wait = BUSY_RETRY_S[0]
        while True:
            resp = await patiently(lambda: send_plain(http, "PUT", where, json=body, timeout=timeout, headers=headers,
                                                      limit=common.ANSWER_MAX_BYTES))
            if resp.status_code != 409:
                return json_object(check(resp))
            await trio.sleep(wait)  # at capacity: another job holds its slot
            wait = min(wait * 2, BUSY_RETRY_S[1])

    async def _answered(self, body: dict[str, Any]) -> dict[str, Any]:
        """`outcome = "response"`: the final prediction as the PUT's answer (module docstring),
        the server's health watched meanwhile."""
        watching = trio.CancelScope()
        self.tasks.start_soon(self._watch, watching)
        try:
            wait = BUSY_RETRY_S[0]
            while (answer := await self._create(body, {}, httpx.Timeout(self.cfg.timeout_s, read=None))
                   ).get("status") not in FINAL:
                with contextlib.suppress(httpx.TransportError):  # the PUT again meets the fault, if it lasts
                    await self.cancel()  # a 202: an earlier request's prediction, followed by no one
                await trio.sleep(wait)
                wait = min(wait * 2, BUSY_RETRY_S[1])
            return answer
        finally:
            watching.cancel()

    async def _watch(self, scope: trio.CancelScope) -> None:
        """Fails the job as unreachable once the server stops answering its health checks
        (a hung server keeps the PUT's connection open and never answers it)."""
        down = _Down(self.url)
        with scope:
            while True:
                await trio.sleep(self.cfg.poll_s)
                answered, _ = await self._health()
                down.seen(answered)

    async def _health(self) -> tuple[bool, str | None]:
        """This job's turn of its server's shared health check (`Cog.status`)."""
        return await self.cog.status(self.url, min(self.cfg.timeout_s, 5.0), self.cfg.poll_s)

    async def wait(self) -> None:
        """The final prediction from the webhooks, or an error when the server dies or forgets it."""
        if self.prediction.get("status") in FINAL:
            return
        assert self.hooks is not None
        cfg, url = self.cfg, self.url
        down, idle = _Down(url), 0
        while True:
            with trio.move_on_after(cfg.poll_s):
                async for payload in self.hooks:
                    if payload.get("status") in FINAL:
                        self.prediction = payload
                        return
                    idle = 0  # a hook that is not final (a server that ignores the filter): at work
            answered, status = await self._health()
            down.seen(answered)
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
        await bounded(self.ctx.http, "POST", f"{self.url}/predictions/{self.req.job_id}/cancel",
                      timeout=common.CANCEL_S)


def _status(resp: httpx.Response) -> str | None:
    """A health check's `status`: Incomplete for an answer that is no JSON object."""
    status = json_object(resp).get("status")
    return status if isinstance(status, str) else None

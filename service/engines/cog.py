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

import httpx
import trio

from service.backends.base import Output, RenderRequest
from service.catalog.engines import CogEngine, FalEngine, ReplicateEngine

from . import common
from .common import Incomplete, Unreachable, check, collect, data_url, field_values, is_cancel, patiently
from .context import Context

log = logging.getLogger(__name__)

CANCEL_S = 5.0
BUSY_RETRY_S = (0.05, 2.0)  # first and largest wait after a 409
LOST_AFTER = 5  # idle health checks with no outcome (Cog retries a final webhook for a while)
DOWN_AFTER = 2  # failed health checks, failing for sum(RETRY_S) seconds


async def healthy(http: httpx.AsyncClient, url: str) -> bool:
    resp = await http.get(f"{url}/health-check", timeout=5.0)
    return resp.status_code == 200 and resp.json().get("status") in ("READY", "BUSY")


def inputs_of(req: RenderRequest, cfg: CogEngine | ReplicateEngine | FalEngine) -> dict:
    values = field_values(req)
    out: dict = {}
    for key, name in cfg.bind.items():
        if key.startswith("inputs."):
            files = req.inputs.get(key.removeprefix("inputs."), [])
            if files:
                out[name] = data_url(files[0])
        elif key in values:
            out[name] = values[key]
    return out


async def render(ctx: Context, req: RenderRequest, cfg: CogEngine, url: str, single_slot: bool) -> list[Output]:
    hooks = ctx.expect_hooks(req.job_id)
    try:
        body = {"id": req.job_id, "input": await trio.to_thread.run_sync(inputs_of, req, cfg),
                "webhook": ctx.hook_url(req.job_id), "webhook_events_filter": ["start", "completed"]}
        first = await _create(ctx.http, url, req.job_id, body, cfg)
        final = first if first.get("status") in ("succeeded", "failed", "canceled") else \
            await _wait(ctx.http, url, hooks, cfg, single_slot)
        return await outcome(ctx.http, req, final, cfg)
    except BaseException as e:
        if not is_cancel(e) or ctx.stopping:  # a shutdown leaves the job running: the restarted node follows it
            raise
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_S):
            try:
                await ctx.http.post(f"{url}/predictions/{req.job_id}/cancel", timeout=CANCEL_S)
            except httpx.HTTPError as e:
                log.warning("job %s: cancelling the Cog prediction failed: %s", req.job_id, type(e).__name__)
        raise
    finally:
        ctx.forget_hooks(req.job_id)


async def _create(http, url: str, job_id: str, body: dict, cfg: CogEngine) -> dict:
    wait = BUSY_RETRY_S[0]
    while True:
        resp = await patiently(lambda: http.put(f"{url}/predictions/{job_id}", json=body,
                                                headers={"Prefer": "respond-async"}, timeout=cfg.timeout_s))
        if resp.status_code != 409:
            return check(resp).json()
        await trio.sleep(wait)  # at capacity: another job holds its slot
        wait = min(wait * 2, BUSY_RETRY_S[1])


async def _wait(http, url: str, hooks: trio.MemoryReceiveChannel, cfg: CogEngine, single_slot: bool) -> dict:
    """The final prediction from the webhooks, or an error when the server dies or forgets it."""
    failed = idle = 0
    failing_since = 0.0
    while True:
        with trio.move_on_after(cfg.poll_s):
            async for payload in hooks:
                if payload.get("status") in ("succeeded", "failed", "canceled"):
                    return payload
                idle = 0  # a `start`/`processing` hook: it is working on it
        try:
            resp = await http.get(f"{url}/health-check", timeout=min(cfg.timeout_s, 5.0))
            status = resp.json().get("status") if resp.status_code == 200 else None
            failed = 0
        except (httpx.TransportError, ValueError):
            failed, status = failed + 1, None
            failing_since = failing_since if failed > 1 else trio.current_time()
            if failed >= DOWN_AFTER and trio.current_time() - failing_since >= sum(common.RETRY_S):
                raise Unreachable(f"Cog server {url} stopped answering") from None
        idle = idle + 1 if single_slot and status == "READY" else 0
        if idle >= LOST_AFTER:
            raise Incomplete(f"Cog server {url} is idle and sent no outcome (restarted?)")


async def outcome(http, req: RenderRequest, final: dict, cfg: CogEngine) -> list[Output]:
    status = final.get("status")
    if status != "succeeded":
        raise Incomplete(f"Cog prediction {status}: {str(final.get('error') or '')[:300]}")
    return await collect(http, req, final.get("output"), cfg.timeout_s)

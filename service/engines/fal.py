"""fal: the hosted queue API (`Authorization: Key <token>`).

- Submit: `POST {url}/{app}` with the bound input. The answer carries `request_id`,
  `status_url`, `response_url` and `cancel_url`; those URLs are used as returned and
  never rebuilt (an app's sub-path is not part of them, and fal may move them).
- `status_url` is polled every `poll_s`: `IN_QUEUE` / `IN_PROGRESS` / `COMPLETED`.
  Then `response_url` gives the model's output, or an HTTP error (a failed run): that
  error fails the job with its status. The output's file URLs become assets.
- What a hosted queue shows while things propagate is read again with a short backoff
  (`common.get_settled`), not taken as an answer: a 404 from `status_url` just after
  the submit, a 400 "Request is still in progress" from `response_url` just after
  `COMPLETED`, a 404 from an output file URL.
- A transient fault (a timeout, a reset, a 502/503/504) on `status_url`, `response_url`
  or a file is tried again for ~30 s (`common.patiently`): the request runs on at fal
  meanwhile. The submit is not (fal's queue has no idempotent submit, and a request whose
  submit answer was lost cannot be found): its answer is waited for `timeout_s +
  sum(RETRY_S)`. A 500 from
  `response_url` is the run's failure, not a fault.
- Cancel: `PUT cancel_url`. fal answers `CANCELLATION_REQUESTED` (a request, not a
  result) or `ALREADY_COMPLETED`; the job is canceled here either way.
- The token is read from the environment for each call: it is in no log or error.
"""

from __future__ import annotations

import logging
import os

import httpx
import trio

from service.backends.base import Output, RenderRequest
from service.catalog.engines import FalEngine

from .cog import inputs_of
from .common import RETRY_S, Incomplete, Unreachable, check, collect, get_settled, is_cancel
from .context import Context

log = logging.getLogger(__name__)

CANCEL_S = 5.0


def _in_progress(resp: httpx.Response) -> bool:
    """fal's answer for a result not yet readable (also seen just after `COMPLETED`)."""
    return resp.status_code == 400 and "still in progress" in resp.text


def _auth(cfg: FalEngine) -> dict:
    token = os.environ.get(cfg.token_env)
    if not token:
        raise Unreachable(f"the variable {cfg.token_env} is not set")
    return {"Authorization": f"Key {token}"}


async def render(ctx: Context, req: RenderRequest, cfg: FalEngine) -> list[Output]:
    http = ctx.http
    queued: dict = {}
    try:
        body = await trio.to_thread.run_sync(inputs_of, req, cfg)
        # not repeatable (a lost answer leaves a request we cannot find): its answer is waited
        # for as long as a read would be tried again
        queued = check(await http.post(f"{cfg.url}/{cfg.app}", json=body, headers=_auth(cfg),
                                       timeout=cfg.timeout_s + sum(RETRY_S))).json()
        for name in ("status_url", "response_url"):
            if not isinstance(queued.get(name), str):
                raise Incomplete(f"fal's submit answer has no {name}")
        while True:
            status = (await get_settled(http, queued["status_url"], cfg.timeout_s, _auth(cfg))).json()
            if status.get("status") == "COMPLETED":
                break
            if status.get("status") not in ("IN_QUEUE", "IN_PROGRESS"):
                raise Incomplete(f"fal request {queued.get('request_id')}: status {str(status.get('status'))[:40]}")
            await trio.sleep(cfg.poll_s)
        result = (await get_settled(http, status.get("response_url") or queued["response_url"], cfg.timeout_s,
                                    _auth(cfg), not_yet=_in_progress)).json()
        return await collect(http, req, result, cfg.timeout_s)
    except BaseException as e:
        cancel = queued.get("cancel_url")
        if is_cancel(e) and isinstance(cancel, str) and not ctx.stopping:
            with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_S):
                try:
                    resp = await http.put(cancel, headers=_auth(cfg), timeout=CANCEL_S)
                    log.info("job %s: fal cancel answered %s", req.job_id, resp.status_code)
                except httpx.HTTPError as err:
                    log.warning("job %s: cancelling the fal request failed: %s", req.job_id, type(err).__name__)
        raise

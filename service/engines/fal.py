"""fal: the hosted queue API (`Authorization: Key <token>`).

- Submit: `POST {url}/{app}` with the bound input. The answer carries `request_id`,
  `status_url`, `response_url` and `cancel_url`; those URLs are used as returned and
  never rebuilt (an app's sub-path is not part of them, and fal may move them).
- `status_url` is polled every `poll_s`: `IN_QUEUE` / `IN_PROGRESS` / `COMPLETED`.
  Then `response_url` gives the model's output, or an HTTP error (a failed run): that
  error fails the job with its status. The output's File objects (`{url, ...}`) become
  assets; their URLs off fal's origin are fetched from public addresses only
  (`common.collect`).
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
from typing import Any

import httpx
import trio

from service.backends.base import Completed
from service.catalog.engines import FalEngine

from .common import (
    CANCEL_S,
    RETRY_S,
    Incomplete,
    auth,
    bound_inputs,
    bounded,
    check,
    collect,
    get_settled,
    json_object,
)
from .context import Context
from .protocol import Job

log = logging.getLogger(__name__)


def _in_progress(resp: httpx.Response) -> bool:
    """fal's answer for a result not yet readable (also seen just after `COMPLETED`)."""
    return resp.status_code == 400 and "still in progress" in resp.text


def _auth(cfg: FalEngine) -> dict[str, str]:
    return auth("Key", cfg.token_env)


def _files(value: object) -> list[str]:
    """The `url` of each of fal's File objects (`{url, content_type, ...}`) in an output:
    the other strings are no files (fal echoes the input's `prompt`, which must not have
    the node fetch a URL a client wrote)."""
    if isinstance(value, list):
        return [u for v in value for u in _files(v)]
    if isinstance(value, dict):
        url = value.get("url")
        return [url] if isinstance(url, str) else [u for v in value.values() for u in _files(v)]
    return []


class Fal:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def servers(self, cfg: FalEngine) -> list[str]:
        return []  # a hosted API: no pool

    async def health(self, cfg: FalEngine, url: str) -> bool:
        return True

    def job(self, cfg: FalEngine, job: Job) -> FalJob:
        return FalJob(self.ctx.http, cfg, job, self.ctx.allow_private)


class FalJob:
    def __init__(self, http: httpx.AsyncClient, cfg: FalEngine, job: Job, allow_private: bool = False) -> None:
        self.http, self.cfg, self.req = http, cfg, job.req
        self.allow_private = allow_private  # output URLs on private addresses (`collect`)
        self.queued: dict[str, Any] = {}
        self.status: dict[str, Any] = {}

    async def submit(self) -> None:
        cfg = self.cfg
        body = await bound_inputs(self.req, cfg)
        # not repeatable (a lost answer leaves a request we cannot find): its answer is waited
        # for as long as a read would be tried again
        self.queued = json_object(check(await bounded(self.http, "POST", f"{cfg.url}/{cfg.app}", json=body,
                                                      headers=_auth(cfg), timeout=cfg.timeout_s + sum(RETRY_S))))
        for name in ("status_url", "response_url"):
            if not isinstance(self.queued.get(name), str):
                raise Incomplete(f"fal's submit answer has no {name}")

    async def wait(self) -> None:
        cfg = self.cfg
        while True:
            self.status = json_object(await get_settled(self.http, self.queued["status_url"], cfg.timeout_s,
                                                        _auth(cfg)))
            state = self.status.get("status")
            if state == "COMPLETED":
                return
            if state not in ("IN_QUEUE", "IN_PROGRESS"):
                raise Incomplete(f"fal request {self.queued.get('request_id')}: status {str(state)[:40]}")
            await trio.sleep(cfg.poll_s)

    async def outputs(self) -> Completed:
        cfg = self.cfg
        where = self.status.get("response_url")
        result = json_object(await get_settled(self.http, where if isinstance(where, str) and where
                                               else self.queued["response_url"], cfg.timeout_s, _auth(cfg),
                                               not_yet=_in_progress))
        try:
            output = result if self.req.capability == "text.llm" else _files(result)
        except RecursionError:  # nested thousands deep
            raise Incomplete("fal's result is nested too deep") from None
        return Completed(await collect(self.http, self.req, output, cfg.timeout_s, api=cfg.url,
                                       allow_private=self.allow_private))

    async def cancel(self) -> None:
        cancel = self.queued.get("cancel_url")
        if isinstance(cancel, str):
            resp = await bounded(self.http, "PUT", cancel, headers=_auth(self.cfg), timeout=CANCEL_S)
            log.info("job %s: fal cancel answered %s", self.req.job_id, resp.status_code)

"""Replicate: the hosted predictions API (`Authorization: Bearer <token>`).

- Create: `POST {url}/models/{owner}/{name}/predictions` (a `model`) or
  `POST {url}/predictions` with `version`, and `Prefer: wait=5`: the API holds the
  request open up to 5 s, so a fast model answers with its outcome at once. Not the
  full 60 s: the create is shielded from a cancel until it answers (its answer is the
  only way to learn the prediction's id, hence to cancel it), and a cancel should
  reach Replicate soon.
- Otherwise the prediction is followed two ways: the webhook this node gave it
  (`completed` events only, checked against Replicate's signing secret, Standard
  Webhooks) and a poll of the returned `urls.get` every `poll_s`, since webhooks can
  be lost. The returned URLs are used as given, never rebuilt. A completed webhook may
  come before the create's answer, or while `urls.get` still says `processing` or
  answers 404 (a new prediction propagating): the first final state from either path
  wins, and a 404 from `urls.get` or from an output URL is read again with a short
  backoff (`common.get_settled`). A transient fault (a timeout, a reset, a 502/503/504)
  on `urls.get`, an output file or the signing secret is tried again for ~30 s
  (`common.patiently`); the create is not (Replicate has no idempotent create). A create
  that was sent but whose answer was lost (reset, timed out) may have made a prediction:
  its `completed` webhook (to this job's own URL) is waited for (`LOST_CREATE_S`).
- Cancel: `POST urls.cancel`.
- Inputs are bound by name; an input asset goes as a data URL. Outputs that are URLs
  (or data URLs) become files; plain strings are text (a `text.llm` reply). An output
  URL is a model author's choice: off the API's origin, it is fetched from public
  addresses only (`common.collect`).
- The token is read from the environment for each call: it is in no log or error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from service.backends.base import Completed, RenderRequest
from service.catalog.engines import ReplicateEngine

from .common import (
    CANCEL_S,
    Incomplete,
    Upstream,
    auth,
    bound_inputs,
    bounded,
    check,
    collect,
    get_settled,
    json_object,
    read,
    shaped,
)
from .context import Context, Hooks, Payload, Verify
from .protocol import Job

log = logging.getLogger(__name__)

WAIT_S = 5
FINAL = ("succeeded", "failed", "canceled", "aborted")
LOST_CREATE_S = 120  # how long a create whose answer was lost waits for the prediction's webhook
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)  # the request never left
TOLERANCE_S = 300  # Standard Webhooks: a signed timestamp older or newer than this is refused


async def _outcome_by_hook(hooks: Hooks, req: RenderRequest, lost: httpx.TransportError) -> Payload:
    """The create was sent but its answer lost (reset, timed out): Replicate may have made
    the prediction, and only its webhook (to this job's own URL) can tell. It is waited for
    up to LOST_CREATE_S; none: the fault fails the job. The create is not sent again."""
    log.info("job %s: the answer to the Replicate create was lost (%s); waiting for its webhook", req.job_id,
             type(lost).__name__)
    with trio.move_on_after(LOST_CREATE_S):
        async for payload in hooks:
            if payload.get("status") in FINAL:
                return payload
    raise lost


def _auth(cfg: ReplicateEngine) -> dict[str, str]:
    return auth("Bearer", cfg.token_env)


class SigningKeys:
    """Replicate's webhook signing secret (`GET {url}/webhooks/default/secret`), fetched
    once per API URL and token variable."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str], bytes] = {}

    async def get(self, http: httpx.AsyncClient, cfg: ReplicateEngine) -> bytes:
        where = (cfg.url, cfg.token_env)
        if where not in self._keys:
            resp = await read(http, f"{cfg.url}/webhooks/default/secret", cfg.timeout_s, _auth(cfg))
            secret = str(json_object(resp)["key"])
            self._keys[where] = base64.b64decode(secret.removeprefix("whsec_"))
        return self._keys[where]


def verifier(key: bytes) -> Verify:
    """The Standard Webhooks check of one webhook (`webhook-id`, `webhook-timestamp`,
    `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, several
    signatures allowed, space separated)."""

    def verify(headers: Mapping[str, str], body: bytes) -> bool:
        msg_id, stamp, sigs = (headers.get(h, "") for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
        try:
            if abs(time.time() - int(stamp)) > TOLERANCE_S:
                return False
        except ValueError:
            return False
        expected = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest())
        return any(s.startswith("v1,") and hmac.compare_digest(s[3:].encode(), expected) for s in sigs.split())

    return verify


class Replicate:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.keys = SigningKeys()

    def servers(self, cfg: ReplicateEngine) -> list[str]:
        return []  # a hosted API: no pool

    async def health(self, cfg: ReplicateEngine, url: str) -> bool:
        return True

    def job(self, cfg: ReplicateEngine, job: Job) -> ReplicateJob:
        return ReplicateJob(self.ctx, self.keys, cfg, job)


class ReplicateJob:
    def __init__(self, ctx: Context, keys: SigningKeys, cfg: ReplicateEngine, job: Job) -> None:
        self.ctx, self.keys, self.cfg, self.req = ctx, keys, cfg, job.req
        self.hooks: Hooks | None = None
        self.prediction: Payload = {}

    async def submit(self) -> None:
        ctx, cfg, req = self.ctx, self.cfg, self.req
        key = await self.keys.get(ctx.http, cfg)
        self.hooks = hooks = ctx.expect_hooks(req.job_id, verifier(key))
        body: dict[str, Any] = {"input": await bound_inputs(req, cfg),
                                "webhook": ctx.hook_url(req.job_id, public=True), "webhook_events_filter": ["completed"]}
        if cfg.version:
            body["version"] = cfg.version
            create = f"{cfg.url}/predictions"
        else:
            create = f"{cfg.url}/models/{cfg.model}/predictions"
        lost: httpx.TransportError | None = None
        with trio.CancelScope(shield=True):  # a cancel waits for the id it needs
            try:
                resp = await bounded(ctx.http, "POST", create, json=body,
                                     headers={**_auth(cfg), "Prefer": f"wait={WAIT_S}"}, timeout=cfg.timeout_s + WAIT_S)
            except NOT_SENT:
                raise
            except httpx.TransportError as e:  # sent, its answer lost: the prediction may exist
                lost = e
            else:
                self.prediction = json_object(check(resp))
        await trio.lowlevel.checkpoint()  # a cancel that came meanwhile lands here
        if lost is not None:
            self.prediction = await _outcome_by_hook(hooks, req, lost)

    async def wait(self) -> None:
        assert self.hooks is not None
        while self.prediction.get("status") not in FINAL:
            self.prediction = await _next(self.ctx.http, self.hooks, self.prediction, self.cfg)

    async def outputs(self) -> Completed:
        prediction = self.prediction
        if prediction["status"] != "succeeded":
            raise Incomplete(f"Replicate prediction {prediction.get('id')} {prediction['status']}: "
                             f"{str(prediction.get('error') or '')[:300]}")
        return Completed(await collect(self.ctx.http, self.req, prediction.get("output"), self.cfg.timeout_s,
                                       api=self.cfg.url, allow_private=self.ctx.allow_private))

    async def cancel(self) -> None:
        cancel = shaped(self.prediction.get("urls") or {}).get("cancel")
        if isinstance(cancel, str) and cancel:
            await bounded(self.ctx.http, "POST", cancel, headers=_auth(self.cfg), timeout=CANCEL_S)


async def _next(http: httpx.AsyncClient, hooks: Hooks, prediction: Payload, cfg: ReplicateEngine) -> Payload:
    """The prediction's next state: a (verified) webhook, or a poll of `urls.get`."""
    with trio.move_on_after(cfg.poll_s):
        async for payload in hooks:
            if payload.get("id") == prediction.get("id") and payload.get("status") in FINAL:
                return payload
    url = shaped(prediction.get("urls") or {}).get("get")
    if not isinstance(url, str) or not url:
        raise Incomplete(f"Replicate prediction {prediction.get('id')} has no urls.get")
    try:  # 404 while it propagates; transient faults tried again
        return json_object(await get_settled(http, url, cfg.timeout_s, _auth(cfg)))
    except (httpx.TransportError, Upstream):
        for payload in _waiting(hooks):  # a webhook that came while the reads failed still ends the job
            if payload.get("id") == prediction.get("id") and payload.get("status") in FINAL:
                return payload
        raise


def _waiting(hooks: Hooks) -> list[Payload]:
    out = []
    while True:
        try:
            out.append(hooks.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return out

"""What an engine client may use of the node: its HTTP client, the job's progress, and
the engine webhooks this node receives (Cog tells outcomes only by webhook).

A webhook URL carries the job id and a token derived from a node secret
(HMAC-SHA256), so only the engine given that URL can report on that job; nothing
is stored per job.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import trio

from service.backends.base import RenderRequest

Progress = Callable[[RenderRequest, float, float, str | None], None]
Payload = dict[str, Any]  # a webhook's JSON body, as the engine sent it
Hooks = trio.MemoryReceiveChannel[Payload]
Verify = Callable[[Mapping[str, str], bytes], bool]  # (headers, raw body) -> signed by the engine?
HOOK_PATH = "/engine-hooks"
Refusal = tuple[int, str, str]  # (status, code, message): the answer to a hook not taken
NOT_JSON: Refusal = (400, "request.bad_request", "Body must be a JSON object.")
BAD_SIGNATURE: Refusal = (401, "request.unauthorized", "Invalid webhook signature.")
UNKNOWN: Refusal = (404, "request.not_found", "Not found.")


class BadSignature(Exception):
    """A webhook for a job whose engine signs its webhooks, without a valid signature."""


class Context:
    def __init__(self, http: httpx.AsyncClient, base_url: Callable[[], str], secret: bytes,
                 progress: Progress, hook_base: Callable[[], str | None] = lambda: None,
                 allow_private: bool = False) -> None:
        self.http = http
        # the operator's GENSERVICE_WEBHOOK_ALLOW_PRIVATE: a hosted API's output URLs may
        # then be on private addresses too (common.collect)
        self.allow_private = allow_private
        self._base_url = base_url
        # where the operator's own engine servers send their hooks (the hook gate,
        # service/hookgate/), when it runs; the node's own address otherwise
        self._hook_base = hook_base
        self._secret = secret
        self.progress = progress
        # set when the node shuts down: engine jobs are then left running (not cancelled),
        # and the restarted node follows them again by their ids
        self.stopping = False
        self._hooks: dict[str, trio.MemorySendChannel[Payload]] = {}
        self._verify: dict[str, Verify] = {}

    def token(self, job_id: str) -> str:
        return hmac.new(self._secret, f"engine-hook:{job_id}".encode(), hashlib.sha256).hexdigest()[:40]

    def hook_url(self, job_id: str, public: bool = False) -> str:
        """`public`: for a hosted API (Replicate), which reaches the node only at its public
        address, never at the hook gate's (a private address, as a rule)."""
        base = None if public else self._hook_base()
        return f"{base or self._base_url()}{HOOK_PATH}/{job_id}/{self.token(job_id)}"

    def expect_hooks(self, job_id: str, verify: Verify | None = None) -> Hooks:
        """Where the webhooks for this job arrive until `forget_hooks`; with `verify`, only
        those it accepts (an engine that signs its webhooks: Replicate)."""
        send, receive = trio.open_memory_channel[Payload](16)
        self._hooks[job_id] = send
        if verify is not None:
            self._verify[job_id] = verify
        return receive

    def forget_hooks(self, job_id: str) -> None:
        self._verify.pop(job_id, None)
        send = self._hooks.pop(job_id, None)
        if send is not None:
            send.close()

    def judge(self, job_id: str, token: str, body: bytes, headers: Mapping[str, str]) -> Refusal | None:
        """A hook's raw body delivered as `POST /engine-hooks/...` takes it; None when taken,
        else the refusal. One rule for the route, the front and the hook gate."""
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested thousands deep
            return NOT_JSON
        if not isinstance(payload, dict):
            return NOT_JSON
        try:
            known = self.deliver(job_id, token, payload, headers, body)
        except BadSignature:  # Replicate signs its webhooks (Standard Webhooks)
            return BAD_SIGNATURE
        return None if known else UNKNOWN

    def deliver(self, job_id: str, token: str, payload: Payload, headers: Mapping[str, str] | None = None,
                body: bytes = b"") -> bool:
        """A webhook for a job; False when its token is wrong, BadSignature when the job's
        engine signs its webhooks and this one is not signed right. A hook for a job nobody
        waits for any more (ended, or a duplicate) is accepted and dropped."""
        if not hmac.compare_digest(token.encode(), self.token(job_id).encode()):
            return False
        verify = self._verify.get(job_id)
        if verify is not None and not verify(headers or {}, body):
            raise BadSignature(job_id)
        send = self._hooks.get(job_id)
        if send is not None:
            try:
                send.send_nowait(payload)
            except (trio.WouldBlock, trio.ClosedResourceError):
                pass
        return True

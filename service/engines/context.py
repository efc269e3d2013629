"""What an engine client may use of the node: its HTTP client, the job's progress, and
the engine webhooks this node receives (Cog tells outcomes only by webhook).

A webhook URL carries the job id and a token derived from a node secret
(HMAC-SHA256), so only the engine given that URL can report on that job; nothing
is stored per job.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import httpx
import trio

from service.backends.base import RenderRequest

Progress = Callable[[RenderRequest, float, float, str | None], None]
HOOK_PATH = "/engine-hooks"


class Context:
    def __init__(self, http: httpx.AsyncClient, base_url: Callable[[], str], secret: bytes,
                 progress: Progress) -> None:
        self.http = http
        self._base_url = base_url
        self._secret = secret
        self.progress = progress
        # set when the node shuts down: engine jobs are then left running (not cancelled),
        # and the restarted node follows them again by their ids
        self.stopping = False
        self._hooks: dict[str, trio.MemorySendChannel] = {}

    def token(self, job_id: str) -> str:
        return hmac.new(self._secret, f"engine-hook:{job_id}".encode(), hashlib.sha256).hexdigest()[:40]

    def hook_url(self, job_id: str) -> str:
        return f"{self._base_url()}{HOOK_PATH}/{job_id}/{self.token(job_id)}"

    def expect_hooks(self, job_id: str) -> trio.MemoryReceiveChannel:
        """Where the webhooks for this job arrive until `forget_hooks`."""
        send, receive = trio.open_memory_channel(16)
        self._hooks[job_id] = send
        return receive

    def forget_hooks(self, job_id: str) -> None:
        send = self._hooks.pop(job_id, None)
        if send is not None:
            send.close()

    def deliver(self, job_id: str, token: str, payload: dict) -> bool:
        """A webhook for a job; False when its token is wrong. A hook for a job nobody
        waits for any more (ended, or a duplicate) is accepted and dropped."""
        if not hmac.compare_digest(token.encode(), self.token(job_id).encode()):
            return False
        send = self._hooks.get(job_id)
        if send is not None:
            try:
                send.send_nowait(payload)
            except (trio.WouldBlock, trio.ClosedResourceError):
                pass
        return True

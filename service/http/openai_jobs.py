"""The jobs of one front-door call: submitted through the same facade as `/v1` submits
(holds, roles, projects, limits alike), followed to their end, and canceled when the call
ends first (answer refused, client gone, engine stream abandoned) so their holds are
released, never captured for an answer nobody receives."""

from __future__ import annotations

from contextlib import aclosing

import logging
import math
import uuid
from typing import Any

import trio

from service.assets.scopes import scope_of
from service.backends.base import ChatTurn
from service.catalog.catalog import Model
from service.errors import ServiceError
from service.http.auth import principal
from service.http.openai_compat import FrontError, model_not_found
from service.storage import generation as sql
from service.views.jobs import FINAL

log = logging.getLogger(__name__)

WAIT_LIMIT = 900  # seconds a non-streamed call may wait for its jobs (a model's timeout_s is 600 by default)


def pick_model(gen, model_id: str | None, capability: str) -> Model:
    """The named model if it serves `capability` (else 404 `model_not_found`); without a
    name, the capability's first available model."""
    if model_id is None:
        models = gen.catalog.models_for(capability)
        available = [m for m in models if gen.runnable(m)] or models
        if not available:
            raise FrontError(404, f"No model serves {capability} on this node.", code="model_not_found",
                             param="model")
        return available[0]
    model = gen.catalog.model(model_id)
    if model is None or model.capability != capability:
        raise model_not_found(model_id)
    return model


class FrontJobs:
    """Jobs submitted for one call; `events()` yields `("text", piece)` from a chat's engine
    and `("end", status)` once per job; `close()` cancels those not yet final."""

    def __init__(self, gen, org_id: str, project_id: str) -> None:
        self.gen, self.org_id, self.project_id = gen, org_id, project_id
        self.api_key_id = principal().key_id  # the calling key's spend limit counts, as on `/v1`
        self._send, self._recv = trio.open_memory_channel[tuple[str, Any]](math.inf)
        self.jobs: list[str] = []
        self.ended: dict[str, dict] = {}

    def chat_turn(self, messages: list[dict], max_tokens: int | None, temperature: float | None) -> ChatTurn:
        return ChatTurn(messages, max_tokens, temperature, on_text=lambda piece: self._send.send_nowait(("text", piece)))

    async def submit(self, plan, turn: ChatTurn | None = None) -> str:
        job_id = str(uuid.uuid4())
        self.jobs.append(job_id)  # before the ask: an ask that times out may still have made it
        if turn is not None:
            self.gen.chat_turns[job_id] = turn
        await self.gen.submit(plan, org_id=self.org_id, project_id=self.project_id, source="api",
                              notify=lambda st: self._send.send_nowait(("end", st)), job_id=job_id,
                              api_key_id=self.api_key_id)
        return job_id

    async def events(self):
        while len(self.ended) < len(self.jobs):
            kind, value = await self._recv.receive()
            if kind == "end":  # the committed row: the notified object may lack the engine's usage
                value = self.gen.status(value["request_id"]) or value
                self.ended[value["request_id"]] = value
            yield kind, value

    async def wait_all(self) -> list[dict]:
        async with aclosing(self.events()) as events:
            async for _ in events:
                pass
        return [self.ended[j] for j in self.jobs]

    async def close(self) -> None:
        for job_id in self.jobs:
            self.gen.chat_turns.pop(job_id, None)
        with trio.CancelScope(shield=True):
            for job_id in self.jobs:
                if job_id in self.ended:
                    continue
                try:
                    st = await self.gen.cancel(self.org_id, job_id)
                except ServiceError as e:  # never made (refused, timed out): nothing to release
                    log.info("front door: job %s not canceled: %s", job_id, type(e).__name__)
                    continue
                if st is not None and st.get("status") not in FINAL:
                    log.warning("front door: job %s still %s after its cancel", job_id, st.get("status"))

    def output_file(self, output: dict) -> tuple[bytes, str]:
        """An output's bytes and content type, through the asset store's own API (an object
        store has no local file; its read leaves no copy on the node's disk). A worker thread."""
        row = sql.asset_in_org(self.gen.store, self.org_id, output["id"])
        if row is None:
            raise FrontError(500, "The output is missing.", "server_error", "internal_error")
        return self.gen.files.read_bytes(row["sha256"], row["size_bytes"], scope_of(row)), row["content_type"]


def job_failure(st: dict) -> FrontError:
    """A job that ended without an answer, in OpenAI's terms (its hold is already released)."""
    if st["status"] == "canceled":
        return FrontError(500, "The request was canceled.", "server_error", "canceled")
    if st["status"] == "nsfw":
        return FrontError(400, st.get("error") or "The output was flagged by the content filter.",
                          code="content_policy_violation")
    return FrontError(500, st.get("error") or "Generation failed.", "server_error", "generation_failed")

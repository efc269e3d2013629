"""OpenAI-compatible servers (llama.cpp, llama-cpp-python, vLLM, Ollama, LocalAI, ...).

- `text.llm`: `POST {url}/chat/completions` with the prompt as the one user message,
  the job's seed, `stream: true` and `stream_options.include_usage`. The reply is
  read as it streams, so cancelling a job closes a stream the server is writing to:
  servers that generate token by token stop at their next write (a non-streaming
  request would run to `max_tokens` after the client left). A reply is whole once a
  choice has a `finish_reason`: a stream that then ends without `data: [DONE]`, or
  whose connection drops, still completes (without usage if it never came); one that
  ends or drops before any `finish_reason` fails as incomplete. The reply becomes one
  `text/plain; charset=utf-8` asset; `usage` (token counts) is kept on the job.
  The whole answer comes back on the request itself: `submit` sends it and reads the
  answer, `wait` has nothing left to wait for, and a cancel closes the connection.
- `image.generate`: `POST {url}/images/generations` (`b64_json` asked; a `url`
  answer is fetched); `image.edit`: multipart `POST {url}/images/edits` with the
  input image. A `url` answer's file is read with transient faults tried again
  (`common.get_settled`); the generating call itself is not repeated.
- `Authorization: Bearer <token>` only when `token_env` is set; the token is read
  from the environment for each call and never logged.
"""

from __future__ import annotations

import base64
import codecs
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio
from httpx._decoders import LineDecoder  # the splitting of httpx's own aiter_lines

from service.backends.base import Completed, Output
from service.catalog.engines import OpenAIEngine

from .common import (
    ANSWER_MAX_BYTES,
    MAX_OUTPUTS,
    OUTPUT_MAX_BYTES,
    Incomplete,
    NoOutput,
    TooLarge,
    Upstream,
    auth,
    bounded,
    capped,
    check,
    dimensions,
    get_settled,
    json_object,
    shaped,
    store_output,
    store_text,
)
from .context import Context
from .protocol import Job

log = logging.getLogger(__name__)


class OpenAI:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def servers(self, cfg: OpenAIEngine) -> list[str]:
        return [cfg.url.rstrip("/")]

    async def health(self, cfg: OpenAIEngine, url: str) -> bool:
        resp = await bounded(self.ctx.http, "GET", f"{url}/models", headers=_auth(cfg), timeout=5.0)
        return resp.status_code == 200

    def job(self, cfg: OpenAIEngine, job: Job) -> OpenAIJob:
        return OpenAIJob(self.ctx.http, cfg, job)


class OpenAIJob:
    def __init__(self, http: httpx.AsyncClient, cfg: OpenAIEngine, job: Job) -> None:
        self.http, self.cfg, self.req, self.url = http, cfg, job.req, job.url
        self.text: str | None = None  # a chat's reply
        self.usage: dict[str, int] = {}
        self.answer: dict[str, Any] = {}  # an images answer

    async def submit(self) -> None:
        req, cfg, url = self.req, self.cfg, self.url
        if req.capability == "text.llm":
            await self._chat()
            return
        if req.capability == "image.generate":
            body = {"model": cfg.model, "prompt": req.prompt, "n": 1, "response_format": "b64_json",
                    "size": "{}x{}".format(*dimensions(req.resolution, req.aspect_ratio))}
            resp = await bounded(self.http, "POST", f"{url}/images/generations", json=body, headers=_auth(cfg),
                                 timeout=cfg.timeout_s, limit=OUTPUT_MAX_BYTES)  # the answer carries the file
        elif req.capability == "image.edit":
            image = req.inputs["image"][0]
            data = await trio.to_thread.run_sync(image.path.read_bytes)
            resp = await bounded(
                self.http, "POST", f"{url}/images/edits", headers=_auth(cfg), timeout=cfg.timeout_s,
                limit=OUTPUT_MAX_BYTES,
                files={"image": (f"image{image.path.suffix or '.png'}", data, image.content_type)},
                data={"model": cfg.model, "prompt": req.prompt, "n": "1", "response_format": "b64_json"})
        else:
            raise Incomplete(f"an OpenAI-compatible server does not serve {req.capability}")
        self.answer = json_object(check(resp))

    async def wait(self) -> None:
        """The answer came back on the request itself."""

    async def outputs(self) -> Completed:
        if self.text is not None:
            return Completed([await store_text(self.req, 0, self.text)], self.usage)
        return Completed(await self._images())

    async def cancel(self) -> None:
        """Leaving the stream closes it: a server writing a reply stops at its next write."""

    async def _chat(self) -> None:
        req, cfg, url = self.req, self.cfg, self.url
        turn = req.chat  # a front-door chat: its own messages and sampling, its reply streamed on
        messages = turn.messages if turn is not None else [{"role": "user", "content": req.prompt}]
        body: dict[str, object] = {"model": cfg.model, "messages": messages, "seed": req.seed,
                                   "stream": True, "stream_options": {"include_usage": True}}
        caps = [t for t in (cfg.max_tokens, turn.max_tokens if turn is not None else None) if t is not None]
        if caps:  # the operator's cap stays a cap
            body["max_tokens"] = min(caps)
        temperature = turn.temperature if turn is not None and turn.temperature is not None else cfg.temperature
        if temperature is not None:
            body["temperature"] = temperature
        parts: list[str] = []
        finish = None
        done = False
        try:  # a reset after the request went out, before or during the body: the server had it
            async with self.http.stream("POST", f"{url}/chat/completions", json=body, headers=_auth(cfg),
                                        timeout=cfg.timeout_s) as resp:
                if resp.status_code >= 400:
                    detail = b"".join([chunk async for chunk in capped(resp, ANSWER_MAX_BYTES)])
                    raise Upstream(resp.status_code, detail.decode("utf-8", "replace"))
                async for line in _lines(resp, ANSWER_MAX_BYTES):
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]" or done:  # read on to the end: the connection stays clean
                        done = True
                        continue
                    chunk = json_object(payload)
                    if chunk.get("error"):
                        raise Incomplete(f"the server reported an error mid-stream: {str(chunk['error'])[:200]}")
                    for choice in chunk.get("choices") or []:
                        choice = shaped(choice)
                        piece = shaped(choice.get("delta") or {}).get("content") or ""
                        parts.append(piece)
                        if piece and turn is not None and turn.on_text is not None:
                            turn.on_text(piece)
                        finish = choice.get("finish_reason") or finish
                    if chunk.get("usage"):
                        usage = shaped(chunk["usage"])
                        self.usage = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                                      if isinstance(usage.get(k), int)}
        except (httpx.RemoteProtocolError, httpx.ReadError) as e:  # the connection dropped
            if finish is None:
                raise Incomplete(f"the chat stream was broken off ({type(e).__name__})") from None
            log.info("job %s: the chat stream was broken off after its finish_reason; the reply is whole",
                     req.job_id)
        if not done and finish is None:  # the server broke off (llama-cpp-python: an error after the 200)
            raise Incomplete("the chat stream ended before [DONE]")
        text = "".join(parts)
        if turn is not None:
            turn.finish_reason = finish or "stop"
        if not text:
            raise NoOutput(f"the chat ended ({finish}) with no text")
        self.text = text

    async def _images(self) -> list[Output]:
        outputs: list[Output] = []
        for item in (self.answer.get("data") or [])[:MAX_OUTPUTS]:
            item = shaped(item)
            if item.get("b64_json"):
                data = base64.b64decode(item["b64_json"])
            elif item.get("url"):
                try:  # 404 while it propagates
                    data = (await get_settled(self.http, item["url"], self.cfg.timeout_s,
                                              limit=OUTPUT_MAX_BYTES)).content
                except TooLarge as e:
                    log.warning("job %s: an engine output is not stored: %s", self.req.job_id, e)
                    continue
            else:
                continue
            out = await store_output(self.req, len(outputs), data)
            if out is not None:
                outputs.append(out)
        if not outputs:
            raise NoOutput("the server returned no image")
        return outputs


def _auth(cfg: OpenAIEngine) -> dict[str, str]:
    return auth("Bearer", cfg.token_env, required=False)


async def _lines(resp: httpx.Response, limit: int) -> AsyncIterator[str]:
    """The stream's lines, as `aiter_lines` splits them, of at most `limit` bytes in all
    (`common.capped`): a server that streams on past `max_tokens`, or one line without end,
    is cut off rather than held in memory until the job's timeout."""
    text, lines = codecs.getincrementaldecoder("utf-8")("replace"), LineDecoder()
    async for chunk in capped(resp, limit):
        for line in lines.decode(text.decode(chunk)):
            yield line
    for line in [*lines.decode(text.decode(b"", final=True)), *lines.flush()]:
        yield line

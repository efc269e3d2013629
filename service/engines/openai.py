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
- `image.generate`: `POST {url}/images/generations` (`b64_json` asked; a `url`
  answer is fetched); `image.edit`: multipart `POST {url}/images/edits` with the
  input image. A `url` answer's file is read with transient faults tried again
  (`common.get_settled`); the generating call itself is not repeated.
- `Authorization: Bearer <token>` only when `token_env` is set; the token is read
  from the environment for each call and never logged.
"""

from __future__ import annotations

import base64
import json
import logging
import os

import httpx
import trio

from service.backends.base import Output, RenderRequest
from service.catalog.engines import OpenAIEngine

from .common import Incomplete, NoOutput, Upstream, check, dimensions, get_settled, store_output, store_text

log = logging.getLogger(__name__)


async def healthy(http: httpx.AsyncClient, url: str, cfg: OpenAIEngine) -> bool:
    resp = await http.get(f"{url}/models", headers=_auth(cfg), timeout=5.0)
    return resp.status_code == 200


async def render(http: httpx.AsyncClient, req: RenderRequest, cfg: OpenAIEngine, url: str) -> tuple[list[Output], dict]:
    """The outputs and what to keep on the job (`usage` for a chat)."""
    if req.capability == "text.llm":
        return await _chat(http, req, cfg, url)
    if req.capability == "image.generate":
        body = {"model": cfg.model, "prompt": req.prompt, "n": 1, "response_format": "b64_json",
                "size": "{}x{}".format(*dimensions(req.resolution, req.aspect_ratio))}
        resp = await http.post(f"{url}/images/generations", json=body, headers=_auth(cfg), timeout=cfg.timeout_s)
    elif req.capability == "image.edit":
        image = req.inputs["image"][0]
        data = await trio.to_thread.run_sync(image.path.read_bytes)
        resp = await http.post(f"{url}/images/edits", headers=_auth(cfg), timeout=cfg.timeout_s,
                               files={"image": (f"image{image.path.suffix or '.png'}", data, image.content_type)},
                               data={"model": cfg.model, "prompt": req.prompt, "n": "1", "response_format": "b64_json"})
    else:
        raise Incomplete(f"an OpenAI-compatible server does not serve {req.capability}")
    return await _images(http, req, cfg, check(resp).json()), {}


async def _chat(http: httpx.AsyncClient, req: RenderRequest, cfg: OpenAIEngine, url: str) -> tuple[list[Output], dict]:
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
    usage: dict = {}
    finish = None
    done = False
    try:  # a reset after the request went out, before or during the body: the server had it
        async with http.stream("POST", f"{url}/chat/completions", json=body, headers=_auth(cfg),
                               timeout=cfg.timeout_s) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise Upstream(resp.status_code, resp.text)
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]" or done:  # read on to the end: the connection stays clean
                    done = True
                    continue
                chunk = json.loads(payload)
                if chunk.get("error"):
                    raise Incomplete(f"the server reported an error mid-stream: {str(chunk['error'])[:200]}")
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                    parts.append(piece)
                    if piece and turn is not None and turn.on_text is not None:
                        turn.on_text(piece)
                    finish = choice.get("finish_reason") or finish
                if chunk.get("usage"):
                    usage = {k: chunk["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                             if isinstance(chunk["usage"].get(k), int)}
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
    return [await store_text(req, 0, text)], ({"usage": usage} if usage else {})


async def _images(http: httpx.AsyncClient, req: RenderRequest, cfg: OpenAIEngine, answer: dict) -> list[Output]:
    outputs: list[Output] = []
    for item in answer.get("data") or []:
        if item.get("b64_json"):
            data = base64.b64decode(item["b64_json"])
        elif item.get("url"):
            data = (await get_settled(http, item["url"], cfg.timeout_s)).content  # 404 while it propagates
        else:
            continue
        out = await store_output(req, len(outputs), data)
        if out is not None:
            outputs.append(out)
    if not outputs:
        raise NoOutput("the server returned no image")
    return outputs


def _auth(cfg: OpenAIEngine) -> dict:
    token = os.environ.get(cfg.token_env) if cfg.token_env else None
    return {"Authorization": f"Bearer {token}"} if token else {}

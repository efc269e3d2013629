"""A protocol-faithful peer of the OpenAI images API (from openai-python's types:
`image_generate_params.py`, `image_edit_params.py`, `images_response.py`), plus a
minimal streamed chat for the engines bench when no real server is built.

- `Authorization: Bearer <token>` when the peer has a token: else 401
  `{error: {message, type: "invalid_request_error", code: "invalid_api_key"}}`.
- `GET /v1/models` -> `{object: "list", data: [{id, object: "model", owned_by}]}`.
- `POST /v1/images/generations` JSON `{prompt, model?, n?, size?, response_format?:
  url|b64_json, ...}` -> `{created, data: [{b64_json | url, revised_prompt}]}`. The
  model `url-only` answers URLs whatever was asked (as some servers do); URLs are
  served by the peer at `/files/...`. A bad `size` is 400 `invalid_request_error`.
- `POST /v1/images/edits` multipart `image` (or `image[]`), `prompt`, `mask?`, `n`,
  `size`, `response_format`: the edit inverts the input image (same size).
- `POST /v1/chat/completions` (minimal): streamed chunks of the prompt's words, then a
  usage chunk (`stream_options.include_usage`) and `[DONE]`.

Prompt knobs: `[fail]` -> 500 `{error: {message, type: "server_error"}}`; `[empty]` ->
`data: []`. How real servers end a chat stream: `[nodone]` ends it after the
`finish_reason` and usage chunks without `data: [DONE]` (as some servers do);
`[reset]` breaks the connection off after the `finish_reason` chunk (no usage, no
`[DONE]`, no end of the chunked body); `[cut]` breaks it off after the first word.
`peer.file_404_reads`: an image URL answers 404 for its first N reads (propagating).
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
import uuid
from contextlib import asynccontextmanager

from PIL import Image, ImageOps
from quart import Response, request
from quart_trio import QuartTrio

from .hosting import picture, serving


class BrokenOff(Exception):
    """Raised inside a streamed answer: the server drops the connection mid-body."""


class Peer:
    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.url = ""
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, dict]] = []  # (route, what was asked)
        self.file_404_reads = 0
        self.reads: dict[str, int] = {}  # per image URL path: reads so far


def _error(status: int, message: str, kind: str, code: str | None = None) -> Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Response(json.dumps(body), status=status, content_type="application/json")


def create_app(peer: Peer) -> QuartTrio:
    app = QuartTrio(__name__)

    @app.before_request
    async def auth():
        if request.path.startswith("/files/") or peer.token is None:
            return None
        if request.headers.get("Authorization") != f"Bearer {peer.token}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return None

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "peer"}
                                           for m in ("peer-image", "url-only", "peer-chat")]}

    def answer(model: str, prompt: str, fmt: str, images: list[bytes]) -> Response:
        if "[fail]" in prompt:
            return _error(500, "The server had an error while processing your request.", "server_error")
        data = []
        for png in [] if "[empty]" in prompt else images:
            if fmt == "url" or model == "url-only":
                name = f"{uuid.uuid4().hex}.png"
                peer.files[name] = png
                data.append({"url": f"{peer.url}/files/{name}", "revised_prompt": prompt})
            else:
                data.append({"b64_json": base64.b64encode(png).decode(), "revised_prompt": prompt})
        return Response(json.dumps({"created": int(time.time()), "data": data}), content_type="application/json")

    def size_of(value: str | None) -> tuple[int, int] | None:
        m = re.fullmatch(r"(\d{2,4})x(\d{2,4})", value or "1024x1024")
        return (int(m.group(1)), int(m.group(2))) if m else None

    @app.post("/v1/images/generations")
    async def generations():
        body = await request.get_json(force=True, silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            return _error(400, "'prompt' is a required property", "invalid_request_error")
        size = size_of(body.get("size"))
        if size is None:
            return _error(400, f"Invalid value: '{body.get('size')}'.", "invalid_request_error")
        peer.calls.append(("generations", body))
        n = int(body.get("n") or 1)
        pngs = [picture(body["prompt"], i, *size) for i in range(n)]
        return answer(str(body.get("model", "")), body["prompt"], body.get("response_format") or "url", pngs)

    @app.post("/v1/images/edits")
    async def edits():
        form, files = await request.form, await request.files
        upload = files.get("image") or files.get("image[]")
        if upload is None or not form.get("prompt"):
            return _error(400, "image and prompt are required", "invalid_request_error")
        try:
            image = Image.open(io.BytesIO(upload.read())).convert("RGB")
        except OSError:
            return _error(400, "Invalid input image - format must be in ['png', 'jpeg', 'webp'].",
                          "invalid_request_error")
        peer.calls.append(("edits", {**form.to_dict(), "image": (upload.filename, image.size)}))
        out = io.BytesIO()
        ImageOps.invert(image).save(out, "PNG")
        return answer(form.get("model", ""), form["prompt"], form.get("response_format") or "url",
                      [out.getvalue()] * int(form.get("n") or 1))

    @app.get("/files/<name>")
    async def files_(name: str):
        peer.reads[request.path] = peer.reads.get(request.path, 0) + 1
        if name not in peer.files or peer.reads[request.path] <= peer.file_404_reads:
            return Response("not found", status=404)
        return Response(peer.files[name], content_type="image/png")

    @app.post("/v1/chat/completions")
    async def chat():
        body = await request.get_json(force=True, silent=True) or {}
        prompt = str(((body.get("messages") or [{}])[-1]).get("content", ""))
        if "[fail]" in prompt:
            return _error(500, "The server had an error while processing your request.", "server_error")
        words = prompt.split()[: int(body.get("max_tokens") or 10**6)]
        cid = f"chatcmpl-{uuid.uuid4().hex}"

        async def stream():
            base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": body.get("model")}
            for i, word in enumerate(words):
                delta = {"content": (" " if i else "") + word}
                yield f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode()
                if "[cut]" in prompt:
                    raise BrokenOff("the stream is broken off after the first word")
            end = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            yield f"data: {json.dumps(end)}\n\n".encode()
            if "[reset]" in prompt:
                raise BrokenOff("the stream is broken off after its finish_reason")
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words),
                         "total_tokens": len(prompt.split()) + len(words)}
                yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
            if "[nodone]" not in prompt:
                yield b"data: [DONE]\n\n"

        return Response(stream(), content_type="text/event-stream")

    return app


@asynccontextmanager
async def run_peer(token: str | None = None):
    peer = Peer(token)
    async with serving(create_app(peer)) as url:
        peer.url = url
        yield peer


def main() -> None:
    """`python -m peers.openai_images --port P` (from tests/): prints `ready URL`."""
    import argparse

    import trio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    async def run():
        peer = Peer(None)
        async with serving(create_app(peer), port=args.port) as url:
            peer.url = url
            print(f"ready {url}", flush=True)
            await trio.sleep_forever()

    trio.run(run)


if __name__ == "__main__":
    main()

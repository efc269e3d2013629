"""A protocol-faithful peer of fal's queue API (from its public docs:
https://fal.ai/docs/model-apis/inference/queue, /inference-api/queue/cancel, and the
fal_client source).

- `Authorization: Key <token>`; anything else is 401 `{detail}`.
- Submit `POST /{owner}/{app}[/{path}]` with the model's JSON input -> 200
  `{request_id, response_url, status_url, cancel_url, queue_position}`.
- `GET status_url` -> `{status: IN_QUEUE|IN_PROGRESS|COMPLETED, queue_position?,
  response_url}`; `GET response_url` -> the model's output, or an HTTP error with
  `{detail}` (a failed run); before COMPLETED it is 400 "Request is still in progress".
- `PUT cancel_url` -> 202 `{status: CANCELLATION_REQUESTED}` (queued: removed; running:
  stopped) or 400 `{status: ALREADY_COMPLETED}`.
- The returned URLs live under a path that differs from the obvious rebuild
  (`{base}/{app}/requests/{id}/status`): a client that rebuilds them gets 404s.
- One request runs at a time (the others are `IN_QUEUE` with their position).

The "model" draws a PNG from `prompt` and `seed` and answers fal's image shape
`{images:[{url, width, height, content_type}], seed, prompt}`; its URL is a public file
URL served by the peer. Prompt knobs: `[slow:S]`, `[fail]` (500 with a detail),
`[reject]` (422, as a validation error), `[empty]` (`images: []`).

Propagation (what a hosted queue shows while a new object reaches its readers), each
the number of reads answered so before the real answer: `peer.status_404_reads` (a
request's `status_url` is 404 just after the submit), `peer.result_lag_reads`
(`response_url` still says 400 "Request is still in progress" after `COMPLETED`),
`peer.file_404_reads` (an output file URL is 404 at first).
"""

from __future__ import annotations

import json
import re
import uuid
from functools import partial

import trio
from quart import Response, request
from quart_trio import QuartTrio

from .hosting import picture, require_token, serve_peer


class Peer:
    def __init__(self, token: str) -> None:
        self.token = token
        self.url = ""
        self.requests: dict[str, dict] = {}
        self.auth_seen: list[str] = []
        self.canceled: set[str] = set()
        self.files: dict[str, bytes] = {}
        self.status_404_reads = self.result_lag_reads = self.file_404_reads = 0
        self.reads: dict[str, int] = {}  # per URL: reads so far (for the propagation knobs)
        self.nursery: trio.Nursery | None = None
        self._slot = trio.Lock()

    async def run(self, rid: str) -> None:
        r = self.requests[rid]
        with trio.CancelScope() as scope:
            r["_scope"] = scope
            async with self._slot:
                r["status"] = "IN_PROGRESS"
                prompt = str(r["input"].get("prompt", ""))
                slow = re.search(r"\[slow:([\d.]+)\]", prompt)
                await trio.sleep(float(slow.group(1)) if slow else 0.01)
                if "[fail]" in prompt:
                    r["_result"] = (500, {"detail": "Internal error in the app: it was asked to fail"})
                elif "[reject]" in prompt:
                    r["_result"] = (422, {"detail": [{"loc": ["body", "prompt"], "msg": "rejected", "type": "value_error"}]})
                elif "[empty]" in prompt:
                    r["_result"] = (200, {"images": [], "seed": 0, "prompt": prompt})
                else:
                    w, h = int(r["input"].get("width", 64)), int(r["input"].get("height", 64))
                    name = f"{uuid.uuid4().hex}.png"
                    self.files[name] = picture(prompt, int(r["input"].get("seed", 0)), w, h)
                    r["_result"] = (200, {"images": [{"url": f"{self.url}/files/{name}", "width": w, "height": h,
                                                      "content_type": "image/png"}],
                                          "seed": r["input"].get("seed", 0), "prompt": prompt})
        if scope.cancelled_caught:
            r["_result"] = (400, {"detail": "Request was cancelled"})
        r["status"] = "COMPLETED"

    def propagating(self, url: str, reads: int) -> bool:
        """True for the first `reads` reads of this URL."""
        self.reads[url] = self.reads.get(url, 0) + 1
        return self.reads[url] <= reads

    def position(self, rid: str) -> int:
        queued = [k for k, v in self.requests.items() if v["status"] == "IN_QUEUE"]
        return queued.index(rid) if rid in queued else 0


def _json(status: int, body: dict) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def create_app(peer: Peer) -> QuartTrio:
    app = QuartTrio(__name__)

    require_token(app, peer, f"Key {peer.token}", "/files/",
                  lambda: _json(401, {"detail": "No user found for Key ID and Secret"}))

    def find(slug: str, rid: str) -> dict | None:
        r = peer.requests.get(rid)
        return r if r is not None and r["_slug"] == slug else None

    @app.get("/_q/<slug>/r/<rid>/state")
    async def status(slug: str, rid: str):
        r = find(slug, rid)
        if r is None or peer.propagating(request.path, peer.status_404_reads):
            return _json(404, {"detail": "Request not found"})
        body = {"status": r["status"], "request_id": rid, "response_url": r["response_url"]}
        if r["status"] == "IN_QUEUE":
            body["queue_position"] = peer.position(rid)
        if "logs" in request.args:
            body["logs"] = []
        return _json(200, body)

    @app.get("/_q/<slug>/r/<rid>/out")
    async def result(slug: str, rid: str):
        r = find(slug, rid)
        if r is None:
            return _json(404, {"detail": "Request not found"})
        if r["status"] != "COMPLETED" or peer.propagating(request.path, peer.result_lag_reads):
            return _json(400, {"detail": "Request is still in progress"})
        code, body = r["_result"]
        return _json(code, body)

    @app.put("/_q/<slug>/r/<rid>/stop")
    async def cancel(slug: str, rid: str):
        r = find(slug, rid)
        if r is None:
            return _json(404, {"detail": "Request not found"})
        if r["status"] == "COMPLETED":
            return _json(400, {"status": "ALREADY_COMPLETED"})
        peer.canceled.add(rid)
        if "_scope" in r:
            r["_scope"].cancel()
        return _json(202, {"status": "CANCELLATION_REQUESTED"})

    @app.get("/files/<name>")
    async def files(name: str):
        if name not in peer.files or peer.propagating(request.path, peer.file_404_reads):
            return Response("not found", status=404)
        return Response(peer.files[name], content_type="image/png")

    @app.post("/<owner>/<path:app_path>")
    async def submit(owner: str, app_path: str):
        body = await request.get_json(force=True, silent=True)
        if not isinstance(body, dict):
            return _json(422, {"detail": [{"loc": ["body"], "msg": "value is not a valid dict"}]})
        rid = str(uuid.uuid4())
        slug = uuid.uuid4().hex[:10]  # the returned URLs cannot be guessed from the app's name
        base = f"{peer.url}/_q/{slug}/r/{rid}"
        r = {"_slug": slug, "app": f"{owner}/{app_path}", "input": body, "status": "IN_QUEUE",
             "status_url": f"{base}/state", "response_url": f"{base}/out", "cancel_url": f"{base}/stop"}
        peer.requests[rid] = r
        peer.nursery.start_soon(peer.run, rid)
        return _json(200, {"request_id": rid, "gateway_request_id": rid, "status": "IN_QUEUE",
                           "response_url": r["response_url"], "status_url": r["status_url"],
                           "cancel_url": r["cancel_url"], "queue_position": peer.position(rid)})

    return app


run_peer = partial(serve_peer, Peer, create_app)  # async with run_peer(token) as peer

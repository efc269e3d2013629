"""A protocol-faithful peer of Replicate's hosted predictions API (from its public docs:
https://replicate.com/docs/reference/http, /topics/predictions, /topics/webhooks).

- `Authorization: Bearer <token>`; anything else is 401 `{title, detail, status}`.
- `POST /v1/predictions {version, input, webhook?, webhook_events_filter?}` and
  `POST /v1/models/{owner}/{name}/predictions {input, ...}`: 201 with the prediction
  (`id, model, version, input, status, output, error, logs, created_at, started_at,
  completed_at, urls{get,cancel,stream,web}`). `Prefer: wait` (60 s) or `wait=N` holds
  the answer until the prediction ends or N seconds pass; without it the answer is at
  once, `starting`. An unknown model is 404; an input that is not an object is 422.
- `GET /v1/predictions/{id}`; `POST /v1/predictions/{id}/cancel` (the run stops;
  `canceled`).
- `GET /v1/webhooks/default/secret` -> `{key: "whsec_..."}`; webhooks are signed the
  Standard Webhooks way (`webhook-id` stable across retries, `webhook-timestamp`,
  `webhook-signature: v1,<base64 HMAC-SHA256>`), filtered by `webhook_events_filter`,
  retried on a non-2xx answer (`webhook_answers` keeps what the receiver said).
- Outputs are file URLs served by the peer (as replicate.delivery serves them: no auth).

The "model" draws a PNG from prompt and seed. Knobs in the prompt: `[slow:S]` runs S
seconds; `[fail]` ends `failed` with an error; `[empty]` ends with no output. Test knobs:
`peer.sign_with` (a wrong key: every webhook fails verification), `peer.webhooks = False`.

Orderings a hosted API shows: `peer.hook_before_answer` (the create answers `starting`
only after the prediction ended and its `completed` webhook was delivered: an answer
held up on its way), `peer.get_404_reads` (a prediction's `urls.get` is 404 for its
first N reads: it is still propagating), `peer.file_404_reads` (an output URL is 404
for its first N reads).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from datetime import UTC, datetime
from functools import partial

import httpx
import trio
from quart import Response, request
from quart_trio import QuartTrio

from .hosting import picture, require_token, serve_peer

MODELS = {"acme/pictures": "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Peer:
    def __init__(self, token: str) -> None:
        self.token = token
        self.secret = secrets.token_bytes(24)
        self.sign_with: bytes | None = None  # a wrong key, to test the receiver's check
        self.webhooks = True
        self.hook_before_answer = False
        self.get_404_reads = self.file_404_reads = 0
        self.reads: dict[str, int] = {}  # per URL path: reads so far (for the propagation knobs)
        self.url = ""
        self.predictions: dict[str, dict] = {}
        self.canceled: set[str] = set()
        self.webhook_answers: list[int] = []
        self.webhook_answered_at: list[float] = []  # time.time() of each answer, in the same order
        self.auth_seen: list[str] = []
        self._cancel: dict[str, trio.CancelScope] = {}
        self._done: dict[str, trio.Event] = {}
        self._hooked: dict[str, trio.Event] = {}
        self.nursery: trio.Nursery | None = None

    def propagating(self, path: str, reads: int) -> bool:
        """True for the first `reads` reads of this URL."""
        self.reads[path] = self.reads.get(path, 0) + 1
        return self.reads[path] <= reads

    def public(self, p: dict) -> dict:
        return {k: v for k, v in p.items() if not k.startswith("_")}

    async def run(self, pid: str) -> None:
        p = self.predictions[pid]
        prompt = str(p["input"].get("prompt", ""))
        with trio.CancelScope() as scope:
            self._cancel[pid] = scope
            p.update(status="processing", started_at=_now())
            await self.hook(p, "start")
            slow = re.search(r"\[slow:([\d.]+)\]", prompt)
            await trio.sleep(float(slow.group(1)) if slow else 0.01)
            if "[fail]" in prompt:
                p.update(status="failed", error="RuntimeError: the model was asked to fail")
            elif "[empty]" in prompt:
                p.update(status="succeeded", output=None)
            else:
                name = f"{pid}.png"
                p["_file"] = picture(prompt, int(p["input"].get("seed", 0)),
                                     int(p["input"].get("width", 64)), int(p["input"].get("height", 64)))
                p.update(status="succeeded", output=[f"{self.url}/delivery/{uuid.uuid4().hex}/{name}"])
                p["_path"] = p["output"][0].removeprefix(self.url)
        if scope.cancelled_caught:
            p.update(status="canceled")
        p.update(completed_at=_now(), metrics={"predict_time": 0.01})
        self._done[pid].set()
        await self.hook(p, "completed")
        self._hooked[pid].set()

    async def hook(self, p: dict, event: str) -> None:
        if not p.get("webhook") or not self.webhooks:
            return
        wanted = p.get("webhook_events_filter") or ["start", "output", "logs", "completed"]
        if event not in wanted:
            return
        body = json.dumps(self.public(p)).encode()
        msg_id = f"msg_{p['id']}_{event}"
        for _attempt in range(3):
            stamp = str(int(time.time()))
            key = self.sign_with or self.secret
            sig = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest())
            headers = {"webhook-id": msg_id, "webhook-timestamp": stamp, "content-type": "application/json",
                       "webhook-signature": f"v1,{sig.decode()}"}
            try:
                async with httpx.AsyncClient() as c:
                    status = (await c.post(p["webhook"], content=body, headers=headers, timeout=5)).status_code
            except httpx.HTTPError:
                status = 0
            self.webhook_answers.append(status)
            self.webhook_answered_at.append(time.time())
            if 200 <= status < 300:
                return
            await trio.sleep(0.05)


def _problem(status: int, title: str, detail: str) -> Response:
    return Response(json.dumps({"title": title, "detail": detail, "status": status}), status=status,
                    content_type="application/problem+json")


def create_app(peer: Peer) -> QuartTrio:
    app = QuartTrio(__name__)

    require_token(app, peer, f"Bearer {peer.token}", "/delivery/",
                  lambda: _problem(401, "Unauthenticated", "You did not pass a valid authentication token"))

    @app.get("/v1/webhooks/default/secret")
    async def secret():
        return {"key": "whsec_" + base64.b64encode(peer.secret).decode()}

    async def create(model: str | None):
        body = await request.get_json(force=True, silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("input"), dict):
            return _problem(422, "Input validation failed", "input: Invalid type. Expected: object")
        version = body.get("version")
        if model is None:
            model = next((m for m, v in MODELS.items() if v == version), None)
        if model not in MODELS:
            return _problem(404, "Not found", "The requested resource could not be found.")
        pid = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(26))
        base = f"{peer.url}/v1/predictions/{pid}"
        p = {"id": pid, "model": model, "version": MODELS[model], "input": body["input"], "logs": "",
             "output": None, "error": None, "status": "starting", "created_at": _now(), "data_removed": False,
             "urls": {"get": base, "cancel": f"{base}/cancel", "stream": f"{peer.url}/stream/{pid}",
                      "web": f"https://replicate.example/p/{pid}"},
             "webhook": body.get("webhook"), "webhook_events_filter": body.get("webhook_events_filter")}
        peer.predictions[pid] = p
        peer._done[pid], peer._hooked[pid] = trio.Event(), trio.Event()
        answer = peer.public(p)
        peer.nursery.start_soon(peer.run, pid)
        if peer.hook_before_answer:
            await peer._hooked[pid].wait()
            return answer, 201
        prefer = request.headers.get("Prefer", "")
        wait = re.fullmatch(r"wait(?:=(\d+))?", prefer.strip())
        if wait:
            with trio.move_on_after(min(int(wait.group(1) or 60), 60)):
                await peer._done[pid].wait()
        return peer.public(p), 201

    @app.post("/v1/predictions")
    async def create_version():
        return await create(None)

    @app.post("/v1/models/<owner>/<name>/predictions")
    async def create_model(owner: str, name: str):
        return await create(f"{owner}/{name}")

    @app.get("/v1/predictions/<pid>")
    async def get(pid: str):
        if pid not in peer.predictions or peer.propagating(request.path, peer.get_404_reads):
            return _problem(404, "Not found", "The requested resource could not be found.")
        return peer.public(peer.predictions[pid])

    @app.post("/v1/predictions/<pid>/cancel")
    async def cancel(pid: str):
        if pid not in peer.predictions:
            return _problem(404, "Not found", "The requested resource could not be found.")
        peer.canceled.add(pid)
        scope = peer._cancel.get(pid)
        if scope is not None:
            scope.cancel()
        return peer.public(peer.predictions[pid])

    @app.get("/delivery/<path:rest>")
    async def delivery(rest: str):
        if peer.propagating(request.path, peer.file_404_reads):
            return Response("not found", status=404)
        for p in peer.predictions.values():
            if p.get("_path") == f"/delivery/{rest}":
                return Response(p["_file"], content_type="image/png")
        return Response("not found", status=404)

    return app


run_peer = partial(serve_peer, Peer, create_app)  # async with run_peer(token) as peer

"""A server for the test engine of tests/engines/sketch.py: jobs keyed by the caller's id,
each a trio task that draws the prompt's picture. `[hold]` in a prompt keeps the job
running until it is cancelled; `[fail]` ends it failed; `ready = False` fails /ready."""

from __future__ import annotations

import json
from functools import partial

import trio
from quart import Response, request
from quart_trio import QuartTrio

from .hosting import picture, serve_peer


class Peer:
    def __init__(self) -> None:
        self.url = ""
        self.ready = True
        self.jobs: dict[str, dict] = {}  # id -> {"state", "body", "file"?}
        self.files: dict[str, bytes] = {}
        self.canceled: list[str] = []
        self.puts: list[str] = []
        self.nursery: trio.Nursery | None = None

    async def run(self, job_id: str, scope: trio.CancelScope) -> None:
        job = self.jobs[job_id]
        body = job["body"]
        with scope:
            prompt = str(body.get("prompt", ""))
            if "[hold]" in prompt:
                await trio.sleep_forever()
            await trio.sleep(0.05)
            if "[fail]" in prompt:
                job["state"] = "failed"
                return
            self.files[job_id] = picture(prompt, int(body.get("seed", 0)), int(body.get("width", 64)),
                                         int(body.get("height", 64)))
            job.update(state="done", file=f"/files/{job_id}.png")
        if scope.cancelled_caught:
            job["state"] = "canceled"


def _json(status: int, body: dict) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def _view(job: dict) -> dict:
    return {k: v for k, v in job.items() if k in ("state", "file")}


def create_app(peer: Peer) -> QuartTrio:
    app = QuartTrio(__name__)

    @app.put("/jobs/<job_id>")
    async def put(job_id: str):
        peer.puts.append(job_id)
        if job_id not in peer.jobs:  # the same id again: the same job
            peer.jobs[job_id] = {"state": "running", "body": await request.get_json(), "scope": trio.CancelScope()}
            assert peer.nursery is not None
            peer.nursery.start_soon(peer.run, job_id, peer.jobs[job_id]["scope"])
        return _json(201, _view(peer.jobs[job_id]))

    @app.get("/jobs/<job_id>")
    async def get(job_id: str):
        job = peer.jobs.get(job_id)
        return _json(200, _view(job)) if job else _json(404, {"error": "no such job"})

    @app.delete("/jobs/<job_id>")
    async def delete(job_id: str):
        job = peer.jobs.get(job_id)
        if job is None:
            return _json(404, {"error": "no such job"})
        peer.canceled.append(job_id)
        job["scope"].cancel()
        return _json(200, {"state": "canceled"})

    @app.get("/files/<job_id>.png")
    async def file(job_id: str):
        return Response(peer.files[job_id], content_type="image/png")

    @app.get("/ready")
    async def ready():
        return _json(200 if peer.ready else 503, {"ready": peer.ready})

    return app


run_peer = partial(serve_peer, Peer, create_app)

"""The engines of the soak (reliability/engine_soak.py), each behind a FaultProxy, and what
each says it finished (the ground truth the node's answers are checked against).

- ComfyUI: the in-repo peer, in process; finished = its history says `success` for the
  prompt id (= the job id). The history is copied before every restart (a restart empties it).
- Cog: a real `cog.server.http` with the tests' predictor; finished = Cog's webhook to the
  node said `succeeded` for the prediction id (= the job id), seen by the HookRecorder in
  front of the node (Cog has no GET of a prediction).
- llama.cpp: a real llama-cpp-python server with the tests' tiny GGUF; finished = the
  proxy carried `data: [DONE]` of that prompt's stream to the node.
- Replicate and fal: the in-repo peers (hosted APIs: never restarted); finished = the
  peer's prediction `succeeded` / request completed with an answer, matched by prompt tag.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "tests"))

from engine_support import CogServer, LlamaServer  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402
from peers import fal as fal_peer  # noqa: E402
from peers import replicate as replicate_peer  # noqa: E402
from peers.comfyui import run_peer as run_comfy  # noqa: E402
from peers.hosting import serving  # noqa: E402

TAG = re.compile(r"soak-(\d+)")
TOKEN = "soak-engine-token"
ENGINE_TIMEOUT_S = 5  # per HTTP call to an engine; the slow fault holds answers past it
MODEL_TIMEOUT_S = 60  # a render with no outcome after this fails (the node's own timeout)

WORKFLOW = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
    "2": {"class_type": "PeerSleep", "inputs": {"image": ["1", 0], "seconds": 0.8}},
    "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
    "9": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "soak"}},
}


def catalog(p: dict[str, FaultProxy]) -> str:
    common = f'timeout_s = {MODEL_TIMEOUT_S}\nprices = [{{ resolution = "RES", credits = "PRICE" }}]\n'

    def head(mid: str, cap: str, backend: str, res: str, price: str, concurrency: int) -> str:
        return (f'[[models]]\nid = "{mid}"\ncapability = "{cap}"\nbackend = "{backend}"\nresolutions = ["{res}"]\n'
                f"concurrency = {concurrency}\n" + common.replace("RES", res).replace("PRICE", price))

    return "\n".join([
        head("soak-comfy", "image.generate", "comfyui", "64x64", "2.00", 1),
        f'[models.engine]\nurls = ["{p["comfyui"].url}"]\nworkflow = "soak-workflow.json"\npoll_s = 0.5\n'
        f"timeout_s = {ENGINE_TIMEOUT_S}\n"
        '[models.engine.bind]\nseed = "1.color"\nwidth = "1.width"\nheight = "1.height"\n',
        head("soak-cog", "image.generate", "cog", "96x64", "3.00", 1),
        f'[models.engine]\nurls = ["{p["cog"].url}"]\ntimeout_s = {ENGINE_TIMEOUT_S}\npoll_s = 0.5\n'
        '[models.engine.bind]\nprompt = "prompt"\nseed = "seed"\nwidth = "width"\nheight = "height"\n',
        head("soak-llm", "text.llm", "openai", "default", "0.20", 2),
        f'[models.engine]\nurl = "{p["llama"].url}/v1"\nmodel = "tiny"\nmax_tokens = 48\ntemperature = 0.0\n'
        f"timeout_s = {ENGINE_TIMEOUT_S}\n",
        head("soak-replicate", "image.generate", "replicate", "96x64", "2.50", 4),
        f'[models.engine]\nmodel = "acme/pictures"\ntoken_env = "SOAK_REPLICATE_TOKEN"\nurl = "{p["replicate"].url}/v1"\n'
        f'poll_s = 0.5\ntimeout_s = {ENGINE_TIMEOUT_S}\n'
        '[models.engine.bind]\nprompt = "prompt"\nseed = "seed"\nwidth = "width"\nheight = "height"\n',
        head("soak-fal", "image.generate", "fal", "96x64", "1.50", 4),
        f'[models.engine]\napp = "acme/pictures"\ntoken_env = "SOAK_FAL_TOKEN"\nurl = "{p["fal"].url}"\n'
        f'poll_s = 0.5\ntimeout_s = {ENGINE_TIMEOUT_S}\n'
        '[models.engine.bind]\nprompt = "prompt"\nseed = "seed"\nwidth = "width"\nheight = "height"\n',
    ])


ENGINE_OF = {"soak-comfy": "comfyui", "soak-cog": "cog", "soak-llm": "llama", "soak-replicate": "replicate",
             "soak-fal": "fal"}


class HookRecorder:
    """In front of the node (its GENSERVICE_BASE_URL): forwards every request to the node and
    keeps the engine webhooks' JSON bodies. 502 while the node is down (the engine retries)."""

    def __init__(self) -> None:
        self.node_url = ""
        self.hooks: list[dict] = []
        self.http = httpx.AsyncClient(timeout=30)

    def app(self):
        from quart import Response, request
        from quart_trio import QuartTrio

        app = QuartTrio("soak-hooks")

        @app.route("/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
        async def forward(rest: str):
            body = await request.get_data()
            if rest.startswith("engine-hooks/"):
                try:
                    import json
                    self.hooks.append(json.loads(body))
                except ValueError:
                    pass
            try:
                r = await self.http.request(request.method, f"{self.node_url}/{rest}", content=body,
                                            params=list(request.args.items(multi=True)),
                                            headers={k: v for k, v in request.headers.items()
                                                     if k.lower() not in ("host", "content-length")})
            except httpx.HTTPError:
                return Response("node down", status=502)
            return Response(r.content, status=r.status_code, content_type=r.headers.get("content-type"))

        return app


class Engines:
    """Starts and restarts the engines; `finished()` -> {engine: set of job ids or tags}."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.proxies: dict[str, FaultProxy] = {}
        self.comfy = None
        self.comfy_done: set[str] = set()
        self.replicate = None
        self.fal = None
        self.cog = CogServer(run_dir / "cog.log")
        self.llama = LlamaServer(run_dir)
        self.hooks = HookRecorder()
        self.hooks_url = ""

    async def start(self, nursery: trio.Nursery) -> None:
        self.comfy = await nursery.start(_hold, run_comfy(self.dir / "comfy"))
        self.replicate = await nursery.start(_hold, replicate_peer.run_peer(TOKEN))
        self.fal = await nursery.start(_hold, fal_peer.run_peer(TOKEN))
        self.hooks_url = await nursery.start(_hold, serving(self.hooks.app()))
        await trio.to_thread.run_sync(self.cog.start)
        await trio.to_thread.run_sync(self.llama.start)
        targets = {"comfyui": self.comfy.url, "cog": self.cog.url, "llama": self.llama.url,
                   "replicate": self.replicate.url, "fal": self.fal.url}
        for name, url in targets.items():
            proxy = FaultProxy(name, url, slow_s=ENGINE_TIMEOUT_S + 3)
            await nursery.start(proxy.serve)
            self.proxies[name] = proxy
        # the hosted peers build their answers' URLs (status, files) from `url`: through the proxy
        self.replicate.url = self.proxies["replicate"].url
        self.fal.url = self.proxies["fal"].url

    def keep_comfy_history(self) -> None:
        for pid, h in self.comfy.history.items():
            if h["status"]["status_str"] == "success":
                self.comfy_done.add(pid)

    async def kill_and_restart(self, engine: str, down_s: float = 2.0) -> None:
        """The engine dies mid-job (SIGKILL; ComfyUI: a restart loses queue and history) and
        comes back on the same port."""
        if engine == "comfyui":
            with trio.move_on_after(5):
                while self.comfy.running is None:
                    await trio.sleep(0.05)
            self.keep_comfy_history()
            self.comfy.restart()
            return
        server = self.cog if engine == "cog" else self.llama
        await trio.to_thread.run_sync(server.stop)
        await trio.sleep(down_s)
        await trio.to_thread.run_sync(server.start)

    async def drop_websocket(self) -> None:
        with trio.move_on_after(5):
            while self.comfy.running is None:
                await trio.sleep(0.05)
        self.comfy.drop_sockets()

    def finished(self) -> dict[str, set]:
        """Per engine, what it finished: job ids (comfyui, cog) or prompt tags (the rest)."""
        self.keep_comfy_history()
        cog = {h.get("id") for h in self.hooks.hooks if h.get("status") == "succeeded"}
        replicate = {int(m.group(1)) for p in self.replicate.predictions.values() if p["status"] == "succeeded"
                     and (m := TAG.search(str(p["input"].get("prompt", ""))))}
        fal = {int(m.group(1)) for r in self.fal.requests.values()
               if r.get("status") == "COMPLETED" and (r.get("_result") or (0,))[0] == 200
               and (m := TAG.search(str(r["input"].get("prompt", ""))))}
        return {"comfyui": set(self.comfy_done), "cog": cog, "llama": set(self.proxies["llama"].tags_done),
                "replicate": replicate, "fal": fal}

    def stop(self) -> None:
        self.cog.stop()
        self.llama.stop()


async def _hold(cm, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Enter an async context manager in a nursery task; started with what it yields."""
    async with cm as value:
        task_status.started(value)
        await trio.sleep_forever()

"""A protocol-faithful ComfyUI peer for the tests and the engines bench.

ComfyUI cannot be installed from a package registry, so the node's ComfyUI client is
tested against this peer; the same catalogs run against a real ComfyUI outside CI
(docs/engines-peers.md). What it reproduces, from ComfyUI's own server and executor:

- routes (also under `/api`): POST /prompt (validation answers with ComfyUI's error
  types and `node_errors`), GET /history[/{id}], GET /view, POST /upload/image,
  GET/POST /queue, POST /interrupt, GET /system_stats, /object_info, /prompt, /features;
  the loopback Origin check (403);
- one prompt executes at a time, in queue order; weight-free node classes run for real
  with Pillow (EmptyImage, LoadImage, ImageScale, ImageScaleBy, ImageInvert, SaveImage,
  PreviewImage) and SaveImage names files `prefix_00001_.png` as ComfyUI does;
- websocket events in ComfyUI's order; per-prompt events go only to the socket whose
  clientId is the prompt's client_id and are dropped when it is not connected (no
  replay); `executing` with `node: null` comes after the history write; without a
  client_id only the broadcast events (status, execution_interrupted) are sent;
- the output cache: a node whose class and inputs (and upstream nodes) were seen
  before is not run again, is listed in `execution_cached`, and an output node
  reports its old file names;
- `/history/{id}` is `{}` until the prompt has finished; an interrupt lands at the
  next node boundary or progress step; a restart loses the queue and the history.

Test knobs (not ComfyUI's): the node class `PeerSleep {image, seconds}` passes its
image through after `seconds`, reporting `progress` every 50 ms; `PeerFail {image}`
raises (an execution error); `peer.silent = True` stops every websocket event;
`peer.drop_sockets()` closes every socket; `peer.restart()`.

In a trio test: `async with run_peer(tmp_path) as peer: peer.url`. As a process:
`python tests/peers/comfyui.py --port 8188 --output-dir DIR` (prints `ready URL`).
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import time
import traceback
import uuid
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from PIL import Image, ImageOps
from quart import Response, request, websocket
from quart_trio import QuartTrio

METHODS = ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
RESAMPLE = {"nearest-exact": Image.NEAREST, "bilinear": Image.BILINEAR, "area": Image.BOX,
            "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
INT = ("INT", {"min": 0, "max": 16384})
# class -> (required inputs {name: spec}, output types, is output node)
NODES: dict[str, tuple[dict, tuple, bool]] = {
    "EmptyImage": ({"width": ("INT", {"min": 1, "max": 16384}), "height": ("INT", {"min": 1, "max": 16384}),
                    "batch_size": ("INT", {"min": 1, "max": 4096}), "color": ("INT", {"min": 0, "max": 0xFFFFFF})},
                   ("IMAGE",), False),
    "LoadImage": ({"image": ("FILE", {})}, ("IMAGE", "MASK"), False),
    "ImageScale": ({"image": ("IMAGE", {}), "upscale_method": (METHODS, {}), "width": INT, "height": INT,
                    "crop": (["disabled", "center"], {})}, ("IMAGE",), False),
    "ImageScaleBy": ({"image": ("IMAGE", {}), "upscale_method": (METHODS, {}),
                      "scale_by": ("FLOAT", {"min": 0.01, "max": 8.0})}, ("IMAGE",), False),
    "ImageInvert": ({"image": ("IMAGE", {})}, ("IMAGE",), False),
    "SaveImage": ({"images": ("IMAGE", {}), "filename_prefix": ("STRING", {})}, (), True),
    "PreviewImage": ({"images": ("IMAGE", {})}, (), True),
    "PeerSleep": ({"image": ("IMAGE", {}), "seconds": ("FLOAT", {"min": 0.0, "max": 3600.0})}, ("IMAGE",), False),
    "PeerFail": ({"image": ("IMAGE", {})}, ("IMAGE",), False),
}


class Interrupted(Exception):
    pass


class Abandoned(Exception):
    """The peer restarted while this prompt ran: nothing of it is kept."""


class Peer:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.out_dir, self.in_dir, self.temp_dir = self.root / "output", self.root / "input", self.root / "temp"
        for d in (self.out_dir, self.in_dir, self.temp_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.url = ""
        self.silent = False
        self.executed_prompts: list[str] = []  # prompt ids in the order they ran (for tests)
        self.epoch = 0
        self.restart()

    # -- state --------------------------------------------------------------------------------
    def restart(self) -> None:
        """What a ComfyUI restart loses: queue, running prompt, history, cache, sockets."""
        self.epoch += 1
        if hasattr(self, "_wake"):
            self._wake.set()
        self.pending: list[list] = []
        self.running: list | None = None
        self.history: dict[str, dict] = {}
        self.cache: dict[str, dict] = {}  # node signature -> {"outputs": [...], "ui": {...}}
        self.number = 0
        self.interrupt_id: str | None = None
        self.interrupt_all = False
        self._wake = trio.Event()
        for send in list(getattr(self, "sockets", {}).values()):
            send.close()
        self.sockets: dict[str, trio.MemorySendChannel] = {}

    def drop_sockets(self) -> None:
        for send in list(self.sockets.values()):
            send.close()
        self.sockets.clear()

    def queue_remaining(self) -> int:
        return len(self.pending) + (1 if self.running else 0)

    # -- events -------------------------------------------------------------------------------
    def send(self, event: str, data: dict, sid: str | None) -> None:
        """ComfyUI's send_sync: to one socket by sid (dropped if absent), or to all."""
        if self.silent:
            return
        message = json.dumps({"type": event, "data": data})
        targets = [self.sockets.get(sid)] if sid is not None else list(self.sockets.values())
        for t in targets:
            if t is not None:
                try:
                    t.send_nowait(message)
                except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                    pass

    def status(self, sid: str | None = None) -> None:
        self.send("status", {"status": {"exec_info": {"queue_remaining": self.queue_remaining()}}}, sid)

    # -- the worker ---------------------------------------------------------------------------
    async def worker(self) -> None:
        while True:
            while not self.pending:
                self._wake = trio.Event()
                await self._wake.wait()
            self.pending.sort(key=lambda item: item[0])
            item = self.pending.pop(0)
            self.running = item
            try:
                await self._execute(item, self.epoch)
            except Abandoned:
                pass

    async def _execute(self, item: list, epoch: int) -> None:
        _number, prompt_id, prompt, extra, outputs = item
        client_id = extra.get("client_id")
        self.interrupt_all, self.interrupt_id = False, None
        messages: list = []

        def add(event: str, data: dict, broadcast: bool) -> None:
            data = {**data, "timestamp": int(time.time() * 1000)}
            messages.append([event, data])
            if client_id is not None or broadcast:
                self.send(event, data, client_id)

        add("execution_start", {"prompt_id": prompt_id}, False)
        signatures = {nid: _signature(prompt, nid) for nid in prompt}
        cached = [nid for nid in prompt if signatures[nid] in self.cache]
        add("execution_cached", {"nodes": cached, "prompt_id": prompt_id}, False)
        values: dict[str, tuple] = {}
        ui: dict[str, dict] = {}
        executed: list[str] = []
        success = True
        for nid in _order(prompt, outputs):
            node = prompt[nid]
            sig = signatures[nid]
            try:
                if sig in self.cache:
                    values[nid] = self.cache[sig]["outputs"]
                    if self.cache[sig]["ui"] is not None:
                        ui[nid] = self.cache[sig]["ui"]
                        if client_id is not None:
                            self.send("executed", {"node": nid, "display_node": nid, "output": ui[nid],
                                                   "prompt_id": prompt_id}, client_id)
                    continue
                self._check_interrupt(prompt_id, epoch)
                self._progress_state(prompt_id, prompt, nid, "running", client_id)
                if client_id is not None:
                    self.send("executing", {"node": nid, "display_node": nid, "prompt_id": prompt_id}, client_id)
                args = {k: (values[v[0]][v[1]] if isinstance(v, list) else v) for k, v in node["inputs"].items()}
                result, shown = await self._run(node["class_type"], args, prompt_id, nid, client_id, epoch)
                values[nid] = result
                self.cache[sig] = {"outputs": result, "ui": shown}
                executed.append(nid)
                self._progress_state(prompt_id, prompt, nid, "finished", client_id)
                if shown is not None:
                    ui[nid] = shown
                    if client_id is not None:
                        self.send("executed", {"node": nid, "display_node": nid, "output": shown,
                                               "prompt_id": prompt_id}, client_id)
            except Abandoned:
                raise
            except Interrupted:
                add("execution_interrupted", {"prompt_id": prompt_id, "node_id": nid, "node_type": node["class_type"],
                                              "executed": executed}, True)
                success = False
                break
            except Exception as e:  # noqa: BLE001 - a node's failure is an execution_error
                add("execution_error", {"prompt_id": prompt_id, "node_id": nid, "node_type": node["class_type"],
                                        "executed": executed, "exception_message": str(e),
                                        "exception_type": f"{type(e).__module__}.{type(e).__name__}",
                                        "traceback": traceback.format_exception(e), "current_inputs": {},
                                        "current_outputs": list(values)}, False)
                success = False
                break
        else:
            add("execution_success", {"prompt_id": prompt_id}, False)
        if epoch != self.epoch:
            raise Abandoned()
        # task_done: history written and the prompt leaves the queue in one step
        self.history[prompt_id] = {
            "prompt": item, "outputs": ui, "meta": {n: {"node_id": n, "display_node": n, "parent_node": None,
                                                        "real_node_id": n} for n in ui},
            "status": {"status_str": "success" if success else "error", "completed": success, "messages": messages},
        }
        self.running = None
        self.executed_prompts.append(prompt_id)
        self.status()
        if client_id is not None:
            self.send("executing", {"node": None, "prompt_id": prompt_id}, client_id)

    def _check_interrupt(self, prompt_id: str, epoch: int) -> None:
        if epoch != self.epoch:
            raise Abandoned()
        if self.interrupt_all or self.interrupt_id == prompt_id:
            raise Interrupted()

    def _progress_state(self, prompt_id: str, prompt: dict, nid: str, state: str, client_id: str | None) -> None:
        nodes = {nid: {"value": 1 if state == "finished" else 0, "max": 1, "state": state, "node_id": nid,
                       "prompt_id": prompt_id, "display_node_id": nid, "parent_node_id": None, "real_node_id": nid}}
        self.send("progress_state", {"prompt_id": prompt_id, "nodes": nodes}, client_id)

    async def _run(self, cls: str, a: dict, prompt_id: str, nid: str, client_id: str | None,
                   epoch: int) -> tuple[tuple, dict | None]:
        if cls == "EmptyImage":
            colour = ((a["color"] >> 16) & 255, (a["color"] >> 8) & 255, a["color"] & 255)
            return ([Image.new("RGB", (a["width"], a["height"]), colour) for _ in range(a["batch_size"])],), None
        if cls == "LoadImage":
            image = ImageOps.exif_transpose(Image.open(self.in_dir / a["image"]))
            rgb = image.convert("RGB")
            alpha = image.getchannel("A") if "A" in image.getbands() else Image.new("L", image.size, 255)
            return ([rgb], [ImageOps.invert(alpha)]), None
        if cls == "ImageScale":
            return ([_scale(i, a["upscale_method"], a["width"], a["height"], a["crop"]) for i in a["image"]],), None
        if cls == "ImageScaleBy":
            return ([i.resize((round(i.width * a["scale_by"]), round(i.height * a["scale_by"])),
                              RESAMPLE[a["upscale_method"]]) for i in a["image"]],), None
        if cls == "ImageInvert":
            return ([ImageOps.invert(i) for i in a["image"]],), None
        if cls == "PeerSleep":
            steps = max(1, int(a["seconds"] / 0.05))
            for step in range(steps):
                await trio.sleep(a["seconds"] / steps)
                self.send("progress", {"value": step + 1, "max": steps, "prompt_id": prompt_id, "node": nid}, client_id)
                self._check_interrupt(prompt_id, epoch)  # ComfyUI checks in its progress callback
            return (a["image"],), None
        if cls == "PeerFail":
            raise RuntimeError("PeerFail was asked to fail")
        if cls in ("SaveImage", "PreviewImage"):
            save = cls == "SaveImage"
            folder = self.out_dir if save else self.temp_dir
            prefix = a["filename_prefix"] if save else f"ComfyUI_temp_{uuid.uuid4().hex[:5]}"
            files = []
            for image in a["images"]:
                name = f"{prefix}_{_next_counter(folder, prefix):05}_.png"
                image.save(folder / name, compress_level=4 if save else 1)
                files.append({"filename": name, "subfolder": "", "type": "output" if save else "temp"})
            return (), {"images": files}
        raise RuntimeError(f"no such node {cls}")

    # -- validation (ComfyUI's answers) -----------------------------------------------------
    def validate(self, prompt: dict) -> tuple[bool, dict | None, list, dict]:
        for nid, node in prompt.items():
            if not isinstance(node, dict) or "class_type" not in node:
                return False, _error("invalid_prompt", "Cannot execute because a node is missing the class_type "
                                     "property.", f"Node ID '#{nid}'"), [], {}
            if node["class_type"] not in NODES:
                return False, _error("invalid_prompt", f"Cannot execute because node {node['class_type']} does "
                                     "not exist.", f"Node ID '#{nid}'"), [], {}
        outputs = [nid for nid, n in prompt.items() if NODES[n["class_type"]][2]]
        if not outputs:
            return False, _error("prompt_no_outputs", "Prompt has no outputs", ""), [], []
        node_errors: dict = {}
        good = []
        for o in outputs:
            bad = {nid: errs for nid in _ancestors(prompt, o) if (errs := self._node_errors(prompt, nid))}
            if not bad:
                good.append(o)
            for nid, errs in bad.items():
                entry = node_errors.setdefault(nid, {"errors": errs, "dependent_outputs": [],
                                                     "class_type": prompt[nid]["class_type"]})
                entry["dependent_outputs"].append(o)
        if not good:
            details = "\n".join(f"{e['message']}: {e['details']}" for v in node_errors.values() for e in v["errors"])
            return False, _error("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                                 details), [], node_errors
        return True, None, good, node_errors

    def _node_errors(self, prompt: dict, nid: str) -> list[dict]:
        node = prompt[nid]
        errors = []
        for name, (kind, opts) in NODES[node["class_type"]][0].items():
            if name not in node["inputs"]:
                errors.append(_error("required_input_missing", "Required input is missing", name,
                                     {"input_name": name}))
                continue
            val = node["inputs"][name]
            if isinstance(val, list):
                if len(val) != 2 or str(val[0]) not in prompt:
                    errors.append(_error("bad_linked_input", "Bad linked input, must be a length-2 list of "
                                         "[node_id, slot_index]", name, {"input_name": name, "input_config": None,
                                                                         "received_value": val}))
                continue
            if isinstance(kind, list) and val not in kind:
                errors.append(_error("value_not_in_list", "Value not in list", f"{name}: '{val}' not in {kind}",
                                     {"input_name": name, "input_config": [kind, opts], "received_value": val}))
            elif kind in ("INT", "FLOAT"):
                try:
                    num = int(val) if kind == "INT" else float(val)
                except (TypeError, ValueError) as ex:
                    errors.append(_error("invalid_input_type", f"Failed to convert an input value to a {kind} value",
                                         f"{name}, {val}, {ex}", {"input_name": name, "received_value": val}))
                    continue
                if num < opts["min"]:
                    errors.append(_error("value_smaller_than_min", f"Value {num} smaller than min of {opts['min']}",
                                         name, {"input_name": name, "received_value": val}))
                elif num > opts["max"]:
                    errors.append(_error("value_bigger_than_max", f"Value {num} bigger than max of {opts['max']}",
                                         name, {"input_name": name, "received_value": val}))
            elif kind == "FILE" and not (self.in_dir / str(val)).is_file():
                errors.append(_error("custom_validation_failed", "Custom validation failed for node",
                                     f"image - Invalid image file: {val}", {"input_name": name}))
        return errors


# -- helpers -----------------------------------------------------------------------------------
def _error(kind: str, message: str, details: str, extra: dict | None = None) -> dict:
    return {"type": kind, "message": message, "details": details, "extra_info": extra or {}}


def _links(node: dict) -> list[str]:
    return [str(v[0]) for v in node["inputs"].values() if isinstance(v, list) and len(v) == 2]


def _ancestors(prompt: dict, nid: str, seen: set | None = None) -> list[str]:
    seen = set() if seen is None else seen
    if nid in seen or nid not in prompt:
        return []
    seen.add(nid)
    return [a for link in _links(prompt[nid]) for a in _ancestors(prompt, link, seen)] + [nid]


def _order(prompt: dict, outputs: list[str]) -> list[str]:
    seen: set = set()
    return [n for o in outputs for n in _ancestors(prompt, o, seen)]


def _signature(prompt: dict, nid: str) -> str:
    node = prompt[nid]
    parts = {k: (_signature(prompt, str(v[0])) + f":{v[1]}" if isinstance(v, list) else v)
             for k, v in sorted(node["inputs"].items())}
    return hashlib.sha256(json.dumps([node["class_type"], parts], sort_keys=True, default=str).encode()).hexdigest()


def _scale(image: Image.Image, method: str, width: int, height: int, crop: str) -> Image.Image:
    if width == 0 and height == 0:
        return image
    width = width or max(1, round(image.width * height / image.height))
    height = height or max(1, round(image.height * width / image.width))
    if crop == "center":
        return ImageOps.fit(image, (width, height), RESAMPLE[method])
    return image.resize((width, height), RESAMPLE[method])


def _next_counter(folder: Path, prefix: str) -> int:
    counters = [int(p.name[len(prefix) + 1:len(prefix) + 6]) for p in folder.glob(f"{prefix}_*_.png")
                if p.name[len(prefix) + 1:len(prefix) + 6].isdigit()]
    return max(counters, default=0) + 1


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


# -- the app -----------------------------------------------------------------------------------
def create_app(peer: Peer) -> QuartTrio:
    app = QuartTrio("comfyui-peer")

    def origin_refused(headers) -> bool:
        """ComfyUI's middleware: a loopback Host with a differing Origin is refused."""
        origin = headers.get("Origin")
        host = headers.get("Host", "")
        return bool(origin) and _loopback(host.rsplit(":", 1)[0]) and urlsplit(origin).netloc != host

    @app.before_request
    async def check_origin():
        if origin_refused(request.headers):
            return Response("", status=403)

    def route(rule: str, **kw):
        def wrap(fn):
            app.add_url_rule(rule, view_func=fn, **kw)
            app.add_url_rule("/api" + rule, endpoint="api_" + fn.__name__, view_func=fn, **kw)
            return fn
        return wrap

    @route("/prompt", methods=["POST"])
    async def post_prompt():
        try:
            body = json.loads(await request.get_data())
        except ValueError:
            return Response("500 Internal Server Error\n\nServer got itself in trouble", status=500)
        if "number" in body:
            number = float(body["number"])
        else:
            number = peer.number
            if body.get("front"):
                number = -number
            peer.number += 1
        if "prompt" not in body:
            return {"error": _error("no_prompt", "No prompt provided", "No prompt provided"), "node_errors": {}}, 400
        prompt, prompt_id = body["prompt"], str(body.get("prompt_id") or uuid.uuid4())
        ok, error, outputs, node_errors = peer.validate(prompt)
        if not ok:
            return {"error": error, "node_errors": node_errors}, 400
        extra = dict(body.get("extra_data") or {})
        if "client_id" in body:
            extra["client_id"] = body["client_id"]
        peer.pending.append([number, prompt_id, prompt, extra, outputs])
        peer.status()
        peer._wake.set()
        return {"prompt_id": prompt_id, "number": number, "node_errors": node_errors}

    @route("/prompt", methods=["GET"])
    async def get_prompt():
        return {"exec_info": {"queue_remaining": peer.queue_remaining()}}

    @route("/queue", methods=["GET"])
    async def get_queue():
        return {"queue_running": [peer.running] if peer.running else [], "queue_pending": list(peer.pending)}

    @route("/queue", methods=["POST"])
    async def post_queue():
        body = json.loads(await request.get_data() or b"{}")
        if body.get("clear"):
            peer.pending.clear()
        for pid in body.get("delete", []):
            peer.pending[:] = [i for i in peer.pending if i[1] != pid]
        peer.status()
        return Response("", status=200)

    @route("/interrupt", methods=["POST"])
    async def post_interrupt():
        data = await request.get_data()
        body = json.loads(data) if data else {}
        pid = body.get("prompt_id") if isinstance(body, dict) else None
        if pid is None:
            peer.interrupt_all = True
        elif peer.running and peer.running[1] == pid:
            peer.interrupt_id = pid
        return Response("", status=200)

    @route("/history", methods=["GET"])
    async def get_history():
        items = list(peer.history.items())
        offset = int(request.args.get("offset", 0) or 0)
        if "max_items" in request.args:
            items = items[offset:offset + int(request.args["max_items"])]
        return dict(items)

    @route("/history/<prompt_id>", methods=["GET"])
    async def get_history_one(prompt_id: str):
        return {prompt_id: peer.history[prompt_id]} if prompt_id in peer.history else {}

    @route("/history", methods=["POST"])
    async def post_history():
        body = json.loads(await request.get_data() or b"{}")
        if body.get("clear"):
            peer.history.clear()
        for pid in body.get("delete", []):
            peer.history.pop(pid, None)
        return Response("", status=200)

    @route("/view", methods=["GET"])
    async def view():
        name = request.args.get("filename", "")
        if not name or name[0] == "/" or ".." in name:
            return Response("", status=400)
        folder = {"output": peer.out_dir, "input": peer.in_dir, "temp": peer.temp_dir}.get(
            request.args.get("type", "output"), peer.out_dir)
        sub = request.args.get("subfolder", "")
        path = (folder / sub / name).resolve()
        if not str(path).startswith(str(folder.resolve())):
            return Response("", status=403)
        if not path.is_file():
            return Response("", status=404)
        return Response(path.read_bytes(), content_type="image/png",
                        headers={"Content-Disposition": f'filename="{name}"'})

    @route("/upload/image", methods=["POST"])
    async def upload_image():
        form, files = await request.form, await request.files
        image = files.get("image")
        if image is None:
            return Response("", status=400)
        folder = {"output": peer.out_dir, "temp": peer.temp_dir}.get(form.get("type", "input"), peer.in_dir)
        sub = form.get("subfolder", "")
        target = folder / sub
        target.mkdir(parents=True, exist_ok=True)
        data = image.read()
        name = image.filename
        if form.get("overwrite") not in ("true", "1"):
            stem, suffix, i = Path(name).stem, Path(name).suffix, 1
            while (target / name).exists() and (target / name).read_bytes() != data:
                name = f"{stem} ({i}){suffix}"
                i += 1
        (target / name).write_bytes(data)
        return {"name": name, "subfolder": sub, "type": form.get("type", "input")}

    @route("/system_stats", methods=["GET"])
    async def system_stats():
        return {"system": {"os": "posix", "ram_total": 0, "ram_free": 0, "comfyui_version": "peer",
                           "python_version": "", "pytorch_version": "", "embedded_python": False, "argv": []},
                "devices": [{"name": "cpu", "type": "cpu", "index": None, "vram_total": 0, "vram_free": 0,
                             "torch_vram_total": 0, "torch_vram_free": 0}]}

    @route("/features", methods=["GET"])
    async def features():
        return {"supports_preview_metadata": True, "max_upload_size": 104857600}

    @route("/object_info", methods=["GET"])
    async def object_info():
        return {c: _info(c) for c in NODES}

    @route("/object_info/<cls>", methods=["GET"])
    async def object_info_one(cls: str):
        return {cls: _info(cls)} if cls in NODES else {}

    @app.websocket("/ws")
    async def ws():
        if origin_refused(websocket.headers):
            return Response("", status=403)
        sid = websocket.args.get("clientId") or uuid.uuid4().hex
        send, receive = trio.open_memory_channel(1024)
        old = peer.sockets.pop(sid, None)
        if old is not None:
            old.close()
        peer.sockets[sid] = send
        await websocket.accept()
        await websocket.send(json.dumps({"type": "status", "data": {
            "status": {"exec_info": {"queue_remaining": peer.queue_remaining()}}, "sid": sid}}))

        async def reader(cancel):
            while True:
                message = json.loads(await websocket.receive())
                if message.get("type") == "feature_flags":
                    await websocket.send(json.dumps({"type": "feature_flags", "data": {
                        "supports_preview_metadata": True, "max_upload_size": 104857600}}))

        try:
            async with trio.open_nursery() as n:
                n.start_soon(reader, n.cancel_scope)
                async for message in receive:
                    await websocket.send(message)
                n.cancel_scope.cancel()  # closed by a restart or drop_sockets
        finally:
            if peer.sockets.get(sid) is send:
                del peer.sockets[sid]

    return app


def _info(cls: str) -> dict:
    inputs, outputs, is_output = NODES[cls]
    return {"input": {"required": {k: [v[0], v[1]] for k, v in inputs.items()}}, "input_order":
            {"required": list(inputs)}, "output": list(outputs), "output_is_list": [False] * len(outputs),
            "output_name": list(outputs), "name": cls, "display_name": cls, "description": "",
            "python_module": "nodes", "category": "peer", "output_node": is_output}


@asynccontextmanager
async def run_peer(root: Path, host: str = "127.0.0.1", port: int = 0):
    """A running peer; yields it with its `url` set."""
    peer = Peer(root)
    app = create_app(peer)
    cfg = Config()
    cfg.bind = [f"{host}:{port}"]
    cfg.accesslog = None
    cfg.errorlog = None
    async with trio.open_nursery() as n:
        urls = await n.start(partial(serve, app, cfg, shutdown_trigger=trio.sleep_forever))
        peer.url = urls[0]

        async def worker():  # restart() swaps the state; the worker follows it
            await peer.worker()

        n.start_soon(worker)
        try:
            yield peer
        finally:
            n.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8188)
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args()

    async def run():
        async with run_peer(args.output_dir, args.host, args.port) as peer:
            print(f"ready {peer.url}", flush=True)
            await trio.sleep_forever()

    trio.run(run)


if __name__ == "__main__":
    main()

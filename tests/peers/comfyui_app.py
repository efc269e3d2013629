"""The ComfyUI peer's HTTP and websocket routes, answering as ComfyUI 0.3.64's aiohttp
server does (measured: docs/comfyui-peer.md). Every route is also under `/api`."""

from __future__ import annotations

import ipaddress
import json
import mimetypes
import os
import uuid
from io import BytesIO
from urllib.parse import urlparse, urlsplit

import trio
from PIL import Image
from quart import Response, request, websocket
from quart_trio import QuartTrio

from peers.comfyui_nodes import NODES, Validation, annotated, object_info

TROUBLE = "500 Internal Server Error\n\nServer got itself in trouble"


def answer(data, status: int = 200) -> Response:
    """aiohttp's json_response: json.dumps as is, keys in insertion order."""
    return Response(json.dumps(data), status=status, content_type="application/json; charset=utf-8")


def empty(status: int = 200, content_type: str | None = None) -> Response:
    r = Response(b"", status=status)
    if content_type is None:
        del r.headers["Content-Type"]
    else:
        r.headers["Content-Type"] = content_type
    return r


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def origin_refused(headers) -> bool:
    """ComfyUI's origin-only middleware: with a loopback Host, the Origin's host (and its
    port, when both name one) must equal the Host's; any other Host is not checked."""
    host, origin = headers.get("Host"), headers.get("Origin")
    if host is None or origin is None:
        return False
    host_domain, parsed = host.lower(), urlparse(origin)
    origin_domain = parsed.netloc.lower()
    host_parsed = urlsplit("//" + host_domain)
    try:
        origin_port, host_port = parsed.port, host_parsed.port
    except ValueError:
        return False
    if origin_port is None:
        host_domain = host_parsed.hostname
    if host_port is None:
        origin_domain = parsed.hostname
    return bool(_loopback(host_parsed.hostname) and host_domain and origin_domain and host_domain != origin_domain)


def create_app(peer) -> QuartTrio:
    app = QuartTrio("comfyui-peer")

    @app.before_request
    async def check_origin():
        if origin_refused(request.headers):
            return empty(403)

    @app.errorhandler(404)
    @app.errorhandler(405)
    async def not_found(_e):
        """ComfyUI serves its web root for any GET: an unknown GET is a bare 404, any other
        method on a path without it a 405."""
        if request.method in ("GET", "HEAD"):
            return empty(404, "application/octet-stream")
        return Response("405: Method Not Allowed", status=405, content_type="text/plain; charset=utf-8")

    @app.errorhandler(500)
    async def trouble(_e):
        return Response(TROUBLE, status=500, content_type="text/plain; charset=utf-8")

    def route(rule: str, **kw):
        def wrap(fn):
            app.add_url_rule(rule, view_func=fn, **kw)
            app.add_url_rule("/api" + rule, endpoint="api_" + fn.__name__, view_func=fn, **kw)
            return fn
        return wrap

    async def body():
        """aiohttp's request.json(): anything but JSON is an error (a 500 unless caught)."""
        return json.loads(await request.get_data(as_text=True))

    @route("/prompt", methods=["POST"])
    async def post_prompt():
        data = await body()
        if "number" in data:
            number = float(data["number"])
        else:
            number = peer.number
            if "front" in data and data["front"]:
                number = -number
            peer.number += 1
        if "prompt" not in data:
            return answer({"error": {"type": "no_prompt", "message": "No prompt provided", "details":
                                     "No prompt provided", "extra_info": {}}, "node_errors": {}}, 400)
        prompt = data["prompt"]
        prompt_id = str(data.get("prompt_id", uuid.uuid4()))
        ok, error, outputs, node_errors = Validation(prompt, peer.folders).run(data.get("partial_execution_targets"))
        if not ok:
            return answer({"error": error, "node_errors": node_errors}, 400)
        extra = data.get("extra_data", {})
        if "client_id" in data:
            extra["client_id"] = data["client_id"]
        peer.put([number, prompt_id, prompt, extra, outputs])
        return answer({"prompt_id": prompt_id, "number": number, "node_errors": node_errors})

    @route("/prompt", methods=["GET"])
    async def get_prompt():
        return answer({"exec_info": {"queue_remaining": peer.queue_remaining()}})

    @route("/queue", methods=["GET"])
    async def get_queue():
        return answer({"queue_running": [peer.running] if peer.running else [], "queue_pending": list(peer.pending)})

    @route("/queue", methods=["POST"])
    async def post_queue():
        data = await body()
        if "clear" in data and data["clear"]:
            peer.clear()
        if "delete" in data:
            for pid in data["delete"]:
                peer.delete(pid)
        return empty()

    @route("/interrupt", methods=["POST"])
    async def post_interrupt():
        try:
            data = await body()
        except ValueError:
            data = {}
        peer.interrupt(data.get("prompt_id"))
        return empty()

    @route("/free", methods=["POST"])
    async def post_free():
        data = await body()
        if data.get("free_memory", False):
            peer.free_memory = True
        return empty()

    @route("/history", methods=["GET"])
    async def get_history():
        max_items, offset = request.args.get("max_items"), request.args.get("offset")
        return answer(peer.history_page(None if max_items is None else int(max_items),
                                        None if offset is None else int(offset)))

    @route("/history/<prompt_id>", methods=["GET"])
    async def get_history_one(prompt_id: str):
        return answer({prompt_id: peer.history[prompt_id]} if prompt_id in peer.history else {})

    @route("/history", methods=["POST"])
    async def post_history():
        data = await body()
        if "clear" in data:
            peer.history.clear()
        if "delete" in data:
            for pid in data["delete"]:
                peer.history.pop(pid, None)
        return empty()

    @route("/view", methods=["GET"])
    async def view():
        if "filename" not in request.args:
            return empty(404)
        name, kind = annotated(request.args["filename"])
        if not name or name[0] == "/" or ".." in name:
            return empty(400)
        folder = peer.folders.get(kind or request.args.get("type", "output"))
        if folder is None:
            return empty(400)
        folder = str(folder.resolve())
        if "subfolder" in request.args:
            full = os.path.join(folder, request.args["subfolder"])
            if os.path.commonpath((os.path.abspath(full), folder)) != folder:
                return empty(403)
            folder = full
        name = os.path.basename(name)
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return empty(404)
        return _file(path, name, request.args)

    @route("/upload/image", methods=["POST"])
    async def upload_image():
        form, files = await request.form, await request.files
        image = files.get("image")
        if image is None:
            if "image" in form:  # a part without a file name is no file: ComfyUI fails on it
                raise ValueError("an upload without a file name")
            return empty(400)
        kind = form.get("type", "input")
        folder = str(peer.folders[kind].resolve())  # any other type: KeyError, a 500 as in ComfyUI
        name = image.filename
        if not name:
            raise ValueError("an upload without a file name")
        sub = form.get("subfolder", "")
        target = os.path.join(folder, os.path.normpath(sub))
        path = os.path.abspath(os.path.join(target, name))
        if os.path.commonpath((folder, path)) != folder:
            return empty(400)
        os.makedirs(target, exist_ok=True)
        data = image.read()
        if form.get("overwrite") not in ("true", "1"):
            stem, suffix = os.path.splitext(name)
            i = 1
            while os.path.exists(path):
                with open(path, "rb") as f:
                    same = f.read() == data
                if same:
                    return answer({"name": name, "subfolder": sub, "type": kind})
                name = f"{stem} ({i}){suffix}"
                path = os.path.join(target, name)
                i += 1
        with open(path, "wb") as f:
            f.write(data)
        return answer({"name": name, "subfolder": sub, "type": kind})

    @route("/system_stats", methods=["GET"])
    async def system_stats():
        return answer({"system": {"os": "posix", "ram_total": 0, "ram_free": 0, "comfyui_version": "peer",
                                  "python_version": "", "pytorch_version": "", "embedded_python": False,
                                  "argv": []},
                       "devices": [{"name": "cpu", "type": "cpu", "index": None, "vram_total": 0, "vram_free": 0,
                                    "torch_vram_total": 0, "torch_vram_free": 0}]})

    @route("/features", methods=["GET"])
    async def features():
        return answer({"supports_preview_metadata": True, "max_upload_size": 104857600})

    @route("/object_info", methods=["GET"])
    async def get_object_info():
        return answer({c: object_info(c, peer.in_dir) for c in NODES})

    @route("/object_info/<cls>", methods=["GET"])
    async def get_object_info_one(cls: str):
        return answer({cls: object_info(cls, peer.in_dir)} if cls in NODES else {})

    @app.websocket("/ws")
    async def ws():
        if origin_refused(websocket.headers):
            return empty(403)
        sid = websocket.args.get("clientId", "") or uuid.uuid4().hex
        send, receive = trio.open_memory_channel(1024)
        peer.sockets[sid] = send  # a reconnect replaces the old socket, which stays open, silent
        await websocket.accept()
        await websocket.send(json.dumps({"type": "status", "data": {
            "status": {"exec_info": {"queue_remaining": peer.queue_remaining()}}, "sid": sid}}))
        if peer.client_id == sid and peer.last_node is not None:
            await websocket.send(json.dumps({"type": "executing", "data": {"node": peer.last_node}}))

        async def reader():
            first = True
            while True:
                try:
                    message = json.loads(await websocket.receive())
                except ValueError:
                    continue
                if first and isinstance(message, dict) and message.get("type") == "feature_flags":
                    send.send_nowait(json.dumps({"type": "feature_flags", "data": {
                        "supports_preview_metadata": True, "max_upload_size": 104857600}}))
                first = False

        try:
            async with trio.open_nursery() as n:
                n.start_soon(reader)
                async for message in receive:
                    await websocket.send(message)
                n.cancel_scope.cancel()  # closed by a restart or drop_sockets
        finally:
            if peer.sockets.get(sid) is send:
                del peer.sockets[sid]

    return app


def _file(path: str, name: str, args) -> Response:
    """/view's answer: the file, or a converted preview or channel."""
    disposition = {"Content-Disposition": f'filename="{name}"'}
    if "preview" in args:
        with Image.open(path) as img:
            info = args["preview"].split(";")
            fmt = info[0]
            if fmt not in ("webp", "jpeg") or "a" in args.get("channel", ""):
                fmt = "webp"
            quality = int(info[-1]) if info[-1].isdigit() else 90
            if fmt == "jpeg" or args.get("channel", "") == "rgb":
                img = img.convert("RGB")
            buf = BytesIO()
            img.save(buf, format=fmt, quality=quality)
        return Response(buf.getvalue(), content_type=f"image/{fmt}", headers=disposition)
    channel = args.get("channel", "rgba")
    if channel in ("rgb", "a"):
        with Image.open(path) as img:
            if channel == "rgb":
                out = Image.merge("RGB", img.split()[:3]) if img.mode == "RGBA" else img.convert("RGB")
            else:
                out = Image.new("RGBA", img.size)
                out.putalpha(img.getchannel("A") if img.mode == "RGBA" else Image.new("L", img.size, 255))
            buf = BytesIO()
            out.save(buf, format="PNG")
        return Response(buf.getvalue(), content_type="image/png", headers=disposition)
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if kind in ("text/html", "text/html-sandboxed", "application/xhtml+xml", "text/javascript", "text/css"):
        kind = "application/octet-stream"
    with open(path, "rb") as f:
        return Response(f.read(), content_type=kind, headers=disposition)

"""A protocol-faithful ComfyUI peer for the tests and the engines bench.

ComfyUI cannot be installed from a package registry, so the node's ComfyUI client is
tested against this peer, and the peer's own tests (tests/test_comfyui_peer.py,
tests/test_comfyui_conformance.py) also run against a real ComfyUI 0.3.64 to keep it
faithful (docs/comfyui-peer.md, scripts/comfyui-conformance). What it reproduces:

- the routes (also under `/api`) and their answers byte for byte where a client could
  tell: JSON as aiohttp writes it, empty bodies without a content type, 404 for any
  unknown route or method, the loopback Origin check (tests/peers/comfyui_app.py);
- validation answers (tests/peers/comfyui_nodes.py);
- one prompt at a time, the queue a heap on (number, prompt_id); `status` is broadcast
  when a prompt is queued, taken and done, and per deleted item;
- per-prompt events only to the socket whose clientId is the prompt's client_id,
  dropped if it is not connected; `progress_state` (every node started so far) and
  `progress` go to every socket when the prompt has no client_id; the end event before
  the history write, `executing null` after it; a socket reconnecting while its prompt
  runs is told the running node (`executing` without prompt_id);
- the output cache, keyed on a node's class and inputs (not its id), holding only what
  the latest prompt used: only output nodes of a cached prompt are visited (`executed`
  with the old files, then `progress_state`); LoadImage is re-run when its file changes;
- an interrupt lands when the next node starts (after its `executing`) or at the next
  progress step; `/history/{id}` is `{}` until the prompt is done; a restart loses the
  queue, the history and the cache.

Test knobs (not ComfyUI's): node `PeerSleep {image, seconds}` passes its image through
after `seconds`, reporting progress every 50 ms; `PeerFail {image}` raises;
`peer.silent = True` stops every websocket event; `peer.drop_sockets()` closes every
socket; `peer.restart()`; `peer.history_gap_s`: the wait between the end event and the
history write, the prompt still running (ComfyUI: the event from `execute()`, the
history by `task_done()` after it).

In a trio test: `async with run_peer(tmp_path) as peer: peer.url`. As a process:
`python tests/peers/comfyui.py --port 8188 --output-dir DIR` (prints `ready URL`).
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import sys
import time
import traceback
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from PIL import ImageOps

if __package__ in (None, ""):  # run as a script: make `peers` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peers import comfyui_nodes as nodes  # noqa: E402
from peers.hosting import serving  # noqa: E402


SENSITIVE = ("auth_token_comfy_org", "api_key_comfy_org")  # extra_data keys left out of the history


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
        self.folders = {"output": self.out_dir, "input": self.in_dir, "temp": self.temp_dir}
        self.url = ""
        self.silent = False
        self.history_gap_s = 0.01  # between the end event and the history write (prompt still running)
        self.executed_prompts: list[str] = []  # prompt ids in the order they ran (for tests)
        self.epoch = 0
        self.sockets: dict[str, trio.MemorySendChannel] = {}
        self.restart()

    # -- state --------------------------------------------------------------------------------
    def restart(self) -> None:
        """What a ComfyUI restart loses: queue, running prompt, history, cache, sockets."""
        self.epoch += 1
        if hasattr(self, "_wake"):
            self._wake.set()
        self.pending: list[list] = []  # a heap, as ComfyUI keeps it (and lists it)
        self.running: list | None = None
        self.history: dict[str, dict] = {}
        self.cache: dict[str, dict] = {}  # node signature -> {"outputs": ..., "ui": ...}
        self.number = 0
        self.interrupted = False
        self.free_memory = False
        self.client_id: str | None = None  # of the prompt running or last run
        self.last_node: str | None = None
        self._wake = trio.Event()
        self.drop_sockets()

    def drop_sockets(self) -> None:
        for send in list(self.sockets.values()):
            send.close()
        self.sockets.clear()

    def queue_remaining(self) -> int:
        return len(self.pending) + (1 if self.running else 0)

    def put(self, item: list) -> None:
        heapq.heappush(self.pending, item)
        self.status()
        self._wake.set()

    def delete(self, prompt_id) -> None:
        """ComfyUI deletes the first pending match; the last item goes by a wipe (two statuses)."""
        for i, item in enumerate(self.pending):
            if item[1] == prompt_id:
                if len(self.pending) == 1:
                    self.clear()
                else:
                    self.pending.pop(i)
                    heapq.heapify(self.pending)
                self.status()
                return

    def clear(self) -> None:
        self.pending = []
        self.status()

    def interrupt(self, prompt_id=None) -> None:
        if not prompt_id or (self.running is not None and self.running[1] == prompt_id):
            self.interrupted = True

    def history_page(self, max_items: int | None, offset: int | None) -> dict:
        """GET /history: without an offset, `max_items` means the newest ones."""
        offset = -1 if offset is None else offset
        if offset < 0 and max_items is not None:
            offset = len(self.history) - max_items
        out = {}
        for i, (k, v) in enumerate(self.history.items()):
            if i >= offset:
                out[k] = v
                if max_items is not None and len(out) >= max_items:
                    break
        return out

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
            item = heapq.heappop(self.pending)
            self.running = item
            self.status()
            try:
                await Execution(self, item, self.epoch).run()
            except Abandoned:
                continue
            if self.free_memory:
                self.cache.clear()
                self.free_memory = False


class Execution:
    """One prompt run, with ComfyUI's events, history entry and cache use."""

    def __init__(self, peer: Peer, item: list, epoch: int) -> None:
        self.peer, self.item, self.epoch = peer, item, epoch
        _number, self.prompt_id, self.prompt, extra, self.outputs = item
        self.client_id = extra.get("client_id")
        self.messages: list = []
        self.progress: dict[str, dict] = {}
        self.executed: list[str] = []

    def add(self, event: str, data: dict, broadcast: bool) -> None:
        data = {**data, "timestamp": int(time.time() * 1000)}
        self.messages.append([event, data])
        if self.client_id is not None or broadcast:
            self.peer.send(event, data, self.client_id)

    def to_client(self, event: str, data: dict) -> None:
        if self.client_id is not None:
            self.peer.send(event, data, self.client_id)

    def set_progress(self, nid: str, state: str, value=None, maximum=None) -> None:
        entry = self.progress.setdefault(nid, {"value": 0, "max": 1, "state": "pending"})
        if state == "running":
            entry.update(value=0.0 if value is None else value, max=1.0 if maximum is None else maximum)
        else:
            entry["value"] = entry["max"]
        entry["state"] = state
        nodes_ = {n: {**e, "node_id": n, "prompt_id": self.prompt_id, "display_node_id": n, "parent_node_id": None,
                      "real_node_id": n} for n, e in self.progress.items() if e["state"] != "pending"}
        self.peer.send("progress_state", {"prompt_id": self.prompt_id, "nodes": nodes_}, self.client_id)

    def check(self) -> None:
        if self.epoch != self.peer.epoch:
            raise Abandoned()
        if self.peer.interrupted:
            raise Interrupted()

    async def run(self) -> None:
        peer = self.peer
        peer.interrupted = False
        peer.client_id = self.client_id
        self.add("execution_start", {"prompt_id": self.prompt_id}, False)
        signatures = {nid: self.signature(nid) for nid in self.prompt}
        keep = set(signatures.values())  # ComfyUI's classic cache keeps only what this prompt uses
        peer.cache = {sig: entry for sig, entry in peer.cache.items() if sig in keep}
        self.add("execution_cached", {"nodes": [n for n in self.prompt if signatures[n] in peer.cache],
                                      "prompt_id": self.prompt_id}, False)
        current_outputs = list(self.prompt)
        values: dict[str, tuple] = {}
        for nid in self.order():
            sig = signatures[nid]
            try:
                if sig in peer.cache:
                    values[nid] = peer.cache[sig]["outputs"]
                    if nid in self.outputs:
                        ui = peer.cache[sig]["ui"]
                        self.to_client("executed", {"node": nid, "display_node": nid,
                                                    "output": ui and ui["output"], "prompt_id": self.prompt_id})
                        self.set_progress(nid, "finished")
                    continue
                await self.execute(nid, sig, values)
            except Abandoned:
                raise
            except Exception as e:  # noqa: BLE001 - interrupts and node failures end the prompt
                self.fail(nid, e, current_outputs)
                break
        else:
            self.add("execution_success", {"prompt_id": self.prompt_id}, False)
        if peer.history_gap_s:  # ComfyUI's task_done() runs after execute() has sent the end event
            await trio.sleep(peer.history_gap_s)
        if self.epoch != peer.epoch:
            raise Abandoned()
        ui = {n: peer.cache[signatures[n]]["ui"] for n in self.prompt
              if signatures[n] in peer.cache and peer.cache[signatures[n]]["ui"]}
        peer.last_node = None
        success = self.messages[-1][0] == "execution_success"
        number, pid, prompt, extra, outputs = self.item
        extra = {k: v for k, v in extra.items() if k not in SENSITIVE}  # ComfyUI keeps no keys in history
        peer.history[self.prompt_id] = {
            "prompt": [number, pid, prompt, extra, outputs], "outputs": {n: u["output"] for n, u in ui.items()},
            "status": {"status_str": "success" if success else "error", "completed": success,
                       "messages": self.messages},
            "meta": {n: u["meta"] for n, u in ui.items()}}
        peer.running = None
        peer.executed_prompts.append(self.prompt_id)
        peer.status()
        self.to_client("executing", {"node": None, "prompt_id": self.prompt_id})

    async def execute(self, nid: str, sig: str, values: dict) -> None:
        node = self.prompt[nid]
        self.set_progress(nid, "running")
        if self.client_id is not None:
            self.peer.last_node = nid
            self.to_client("executing", {"node": nid, "display_node": nid, "prompt_id": self.prompt_id})
        args = {k: (values[str(v[0])][v[1]] if isinstance(v, list) else v) for k, v in node["inputs"].items()}
        self.args = args
        self.check()  # ComfyUI checks for an interrupt as a node starts
        result, shown = await self.run_node(node["class_type"], args, nid)
        values[nid] = result
        ui = None if shown is None else {"meta": {"node_id": nid, "display_node": nid, "parent_node": None,
                                                  "real_node_id": nid}, "output": shown}
        self.peer.cache[sig] = {"outputs": result, "ui": ui}
        if shown is not None:
            self.to_client("executed", {"node": nid, "display_node": nid, "output": shown,
                                        "prompt_id": self.prompt_id})
        self.set_progress(nid, "finished")
        self.executed.append(nid)

    def fail(self, nid: str, e: Exception, current_outputs: list) -> None:
        base = {"prompt_id": self.prompt_id, "node_id": nid, "node_type": self.prompt[nid]["class_type"],
                "executed": list(self.executed)}
        if isinstance(e, Interrupted):
            self.add("execution_interrupted", base, True)
            return
        shown = {k: [v if v is None or isinstance(v, (int, float, bool, str)) else str(v)]
                 for k, v in getattr(self, "args", {}).items()}
        self.add("execution_error", {**base, "exception_message": f"{e}\n", "exception_type": nodes.type_name(e),
                                     "traceback": traceback.format_tb(e.__traceback__), "current_inputs": shown,
                                     "current_outputs": current_outputs}, False)

    async def run_node(self, cls: str, a: dict, nid: str) -> tuple[tuple, dict | None]:
        peer = self.peer
        if cls == "EmptyImage":
            colour = ((a["color"] >> 16) & 255, (a["color"] >> 8) & 255, a["color"] & 255)
            return ([nodes.Image.new("RGB", (a["width"], a["height"]), colour) for _ in range(a["batch_size"])],), None
        if cls == "LoadImage":
            name, kind = nodes.annotated(a["image"])
            return nodes.load_image(peer.folders[kind or "input"] / name), None
        if cls == "ImageScale":
            return ([nodes.scale(i, a["upscale_method"], a["width"], a["height"], a["crop"]) for i in a["image"]],), None
        if cls == "ImageScaleBy":
            return ([i.resize((round(i.width * a["scale_by"]), round(i.height * a["scale_by"])),
                              nodes.RESAMPLE[a["upscale_method"]]) for i in a["image"]],), None
        if cls == "ImageInvert":
            return ([ImageOps.invert(i) for i in a["image"]],), None
        if cls == "PeerSleep":
            steps = max(1, int(a["seconds"] / 0.05))
            for step in range(steps):
                await trio.sleep(a["seconds"] / steps)
                self.check()  # ComfyUI checks in its progress hook, before reporting
                self.set_progress(nid, "running", float(step + 1), float(steps))
                self.peer.send("progress", {"value": step + 1, "max": steps, "prompt_id": self.prompt_id,
                                            "node": nid}, self.client_id)
            return (a["image"],), None
        if cls == "PeerFail":
            raise RuntimeError("PeerFail was asked to fail")
        if cls == "SaveImage":
            return (), nodes.save_images(a["images"], peer.out_dir, a["filename_prefix"], "output", self.prompt, 4)
        if cls == "CreateVideo":
            return ({"frames": a["images"], "fps": a["fps"]},), None
        if cls == "SaveVideo":
            return (), nodes.save_video(a["video"], peer.out_dir, a["filename_prefix"], a["format"], a["codec"],
                                        self.prompt)
        if cls == "PreviewImage":
            return (), nodes.save_images(a["images"], peer.temp_dir, nodes.preview_prefix(), "temp", self.prompt, 1)
        raise RuntimeError(f"no such node {cls}")

    def order(self) -> list[str]:
        """Output nodes and, depth-first, the uncached nodes they need."""
        seen: set = set()
        out: list[str] = []

        def visit(nid: str) -> None:
            if nid in seen:
                return
            seen.add(nid)
            if self.signature(nid) not in self.peer.cache:
                for v in self.prompt[nid]["inputs"].values():
                    if isinstance(v, list):
                        visit(str(v[0]))
            out.append(nid)

        for o in self.outputs:
            visit(o)
        return out

    def signature(self, nid: str) -> str:
        node = self.prompt[nid]
        parts = {k: (self.signature(str(v[0])) + f":{v[1]}" if isinstance(v, list) else v)
                 for k, v in sorted(node["inputs"].items())}
        if node["class_type"] == "LoadImage":  # ComfyUI's IS_CHANGED: the file's hash
            parts["#file"] = nodes.file_hash(self.peer.root, str(node["inputs"].get("image")))
        return hashlib.sha256(json.dumps([node["class_type"], parts], sort_keys=True, default=str).encode()).hexdigest()


@asynccontextmanager
async def run_peer(root: Path, host: str = "127.0.0.1", port: int = 0):
    """A running peer; yields it with its `url` set."""
    from peers.comfyui_app import create_app

    peer = Peer(root)
    async with trio.open_nursery() as n, serving(create_app(peer), host, port) as url:
        peer.url = url
        n.start_soon(peer.worker)
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

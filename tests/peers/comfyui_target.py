"""Which ComfyUI the protocol tests talk to: the in-repo peer, or a real ComfyUI.

By default each test gets its own in-process peer (tests/peers/comfyui.py). With
`GENSERVICE_COMFYUI_URL` set, the same tests run against that server instead; with
`GENSERVICE_COMFYUI_CMD` also set (the shell command that starts it, listening on that
URL), the test run starts the server itself, once, and a test that needs a restart
really restarts it. How to run it: docs/comfyui-peer.md, scripts/comfyui-conformance.

Tests that need a peer-only control ask for it through `Target` and are skipped with a
reason on a real server when no real equivalent exists. Because a real server keeps its
cache, output files and history across tests and runs, every test names its own files
(`Target.tag`) so that nothing from an earlier run is served from the cache.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

from peers.comfyui import Peer, run_peer

URL_ENV, CMD_ENV = "GENSERVICE_COMFYUI_URL", "GENSERVICE_COMFYUI_CMD"
START_S = 180.0  # a real ComfyUI imports torch and every node module before it listens


def real_url() -> str | None:
    return (os.environ.get(URL_ENV) or "").rstrip("/") or None


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/system_stats", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


class RealProcess:
    """The real ComfyUI process this run started from `GENSERVICE_COMFYUI_CMD`."""

    def __init__(self, url: str, command: str) -> None:
        self.url, self.command = url, command
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if _answers(self.url):
            raise RuntimeError(f"{self.url} already answers: stop it, or unset {CMD_ENV} to use it as it is")
        self.proc = subprocess.Popen(["/bin/sh", "-c", self.command], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_S
        while not _answers(self.url):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the ComfyUI command exited with {self.proc.returncode}: {self.command}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ComfyUI did not answer at {self.url} within {START_S:.0f} s")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


class Target:
    """One server under test, as the tests see it."""

    def __init__(self, url: str, peer: Peer | None = None, process: RealProcess | None = None) -> None:
        self.url = url
        self.peer = peer
        self.process = process
        self.tag = "t" + uuid.uuid4().hex[:10]  # this test's own file names and prompt ids

    @property
    def is_peer(self) -> bool:
        return self.peer is not None

    def ws_url(self, client_id: str) -> str:
        return self.url.replace("http://", "ws://", 1) + f"/ws?clientId={client_id}"

    def id(self, name: str) -> str:
        return f"{self.tag}-{name}"

    async def restart(self) -> None:
        """A restart as ComfyUI has one: the queue, the history and the cache are gone."""
        if self.peer is not None:
            self.peer.restart()
            return
        if self.process is None:
            raise RuntimeError(f"a restart of a real ComfyUI needs {CMD_ENV}: ask for the `restartable` fixture")
        await trio.to_thread.run_sync(self.process.stop)
        await trio.to_thread.run_sync(self.process.start)

    def slow_node(self, image: list, seconds: float, salt: str) -> dict:
        """Nodes that take about `seconds` in all, ending in node "slow".

        The peer has its `PeerSleep` node (progress every 50 ms); a real ComfyUI gets a
        chain of Lanczos scales to about 4096x4096 (0.8 s a node on 2 cores, measured),
        each size distinct so that none comes from the cache, with no progress inside.
        """
        if self.peer is not None:
            return {"slow": {"class_type": "PeerSleep", "inputs": {"image": image, "seconds": seconds}}}
        nodes, src = {}, image
        count = max(3, int(seconds / 0.8))
        base = 4096 + sum(salt.encode()) % 64
        for i in range(count):
            nid = "slow" if i == count - 1 else f"slow{i}"
            size = base + (i % 2) * 8
            nodes[nid] = {"class_type": "ImageScale", "inputs": {"image": src, "upscale_method": "lanczos",
                                                                 "width": size, "height": size, "crop": "disabled"}}
            src = [nid, 0]
        return nodes


_shared: dict = {"process": None, "users": 0}


@pytest.fixture(scope="session")
def comfy_process():
    """The real ComfyUI this run started and owns (None for the peer or a server given as is).

    Each test module that imports this fixture gets its own session fixture, so the
    process is shared between them and stopped when the last one is done.
    """
    url, command = real_url(), os.environ.get(CMD_ENV)
    if url is None or not command:
        yield None
        return
    if _shared["process"] is None:
        process = RealProcess(url, command)
        process.start()
        _shared["process"] = process
    _shared["users"] += 1
    try:
        yield _shared["process"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            _shared["process"].stop()
            _shared["process"] = None


@pytest.fixture
def restartable(comfy_process) -> None:
    """For tests that restart the server: skipped on a real one this run did not start."""
    if real_url() is not None and comfy_process is None:
        pytest.skip(f"a restart of a real ComfyUI needs {CMD_ENV} (the command that starts it)")


@asynccontextmanager
async def open_target(tmp_path, process: RealProcess | None):
    url = real_url()
    if url is None:
        async with run_peer(tmp_path) as peer:
            yield Target(peer.url, peer=peer)
        return
    if process is None and not _answers(url):
        pytest.fail(f"{URL_ENV}={url} does not answer GET /system_stats")
    yield Target(url, process=process)


@pytest.fixture
async def comfy(tmp_path, comfy_process):
    async with open_target(tmp_path, comfy_process) as target:
        yield target


# -- what the tests share ------------------------------------------------------------------------
def graph(target: Target, name: str) -> dict:
    """EmptyImage -> ImageScale -> ImageInvert -> SaveImage, unique to this test and `name`."""
    colour = int(uuid.uuid5(uuid.NAMESPACE_OID, f"{target.tag}-{name}").hex[:6], 16)
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 1, "color": colour}},
        "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "lanczos", "width": 32,
                                                     "height": 24, "crop": "disabled"}},
        "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
        "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": f"{target.tag}_{name}"}},
    }


async def events_until_done(ws, prompt_id: str, timeout: float = 30) -> list[tuple[str, dict]]:
    """Every text event up to `executing {node: null}` for `prompt_id`."""
    seen = []
    with trio.fail_after(timeout):
        while True:
            message = await ws.get_message()
            if isinstance(message, bytes):
                continue
            m = json.loads(message)
            seen.append((m["type"], m["data"]))
            if m["type"] == "executing" and m["data"]["node"] is None and m["data"]["prompt_id"] == prompt_id:
                return seen


async def wait_history(client: httpx.AsyncClient, prompt_id: str, timeout: float = 30) -> dict:
    with trio.fail_after(timeout):
        while not (entry := (await client.get(f"/history/{prompt_id}")).json()):
            await trio.sleep(0.05)
    return entry[prompt_id]

"""Renders in a row through the node's public API and its ComfyUI client, against the
peer (which sends `execution_success` before it writes the history, as ComfyUI does) or
a real ComfyUI (GENSERVICE_COMFYUI_URL; scripts/comfyui-conformance). Every job ComfyUI
finished but the node failed is counted: there must be none. The figures are printed
(docs/engines.md keeps the last real run's)."""

from __future__ import annotations

import json
import os
import statistics
import uuid

import httpx
import trio

from engine_support import engine_node
from peers.comfyui_target import comfy, comfy_process  # noqa: F401 - fixtures
from test_generation_support import submit, wait_status
from waiting import wait_until

RENDERS = int(os.environ.get("GENSERVICE_COMFYUI_RENDERS", "50"))
PATH = "/v1/generation/models/comfy-renders"


def catalog(url: str) -> str:
    # poll_s is ComfyUI's default fallback (2 s): the websocket's events decide when a job ends
    return f"""
[[models]]
id = "comfy-renders"
capability = "image.generate"
backend = "comfyui"
resolutions = ["64x64"]
concurrency = 1
timeout_s = 120
prices = [{{ resolution = "64x64", credits = "1.00" }}]
[models.engine]
urls = ["{url}"]
workflow = "wf.json"
[models.engine.bind]
seed = "1.color"
"""


def workflow(prefix: str) -> dict:
    """EmptyImage -> ImageInvert -> SaveImage: weight-free; the seed (the colour) makes
    each render new to ComfyUI's cache."""
    return {"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
            "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
            "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": prefix}}}


async def comfyui_entry(c: httpx.AsyncClient, prompt_id: str) -> dict:
    """ComfyUI's own history entry once the prompt has left its queue ({} if it never
    ran): ComfyUI writes it a moment after its end event, which a job may end on."""
    async def ended() -> tuple[dict] | None:
        queue = (await c.get("/queue")).json()
        listed = [i[1] for i in queue["queue_running"] + queue["queue_pending"]]
        entry = (await c.get(f"/history/{prompt_id}")).json().get(prompt_id)
        return (entry or {},) if entry or prompt_id not in listed else None

    return (await wait_until(ended, 60, every=0.05))[0]


async def test_renders_in_a_row_lose_no_job_comfyui_finished(tmp_path, comfy, capsys):
    if comfy.is_peer:
        comfy.peer.history_gap_s = 0.05  # the real order: the end event, then the history
    first_seed = int(uuid.uuid4().hex[:6], 16) % (0xFFFFFF - RENDERS)
    files = {"wf.json": json.dumps(workflow(f"{comfy.tag}_render"))}
    outcomes: list[tuple[str, str, float]] = []  # (job status, ComfyUI's status_str, seconds)
    async with engine_node(tmp_path / "n", catalog(comfy.url), files=files) as n, \
            httpx.AsyncClient(base_url=comfy.url) as c:
        key = (await n.create_org())["api_key"]
        for i in range(RENDERS):
            started = trio.current_time()
            rid = (await submit(n, key, {"prompt": f"render {i}", "resolution": "64x64", "seed": first_seed + i},
                                path=PATH))["request_id"]
            st = await wait_status(n, key, rid, timeout=120)
            entry = await comfyui_entry(c, rid)
            outcomes.append((st["status"], (entry.get("status") or {}).get("status_str", "none"),
                             trio.current_time() - started))
    finished_but_failed = [o for o in outcomes if o[1] == "success" and o[0] != "completed"]
    seconds = sorted(o[2] for o in outcomes)
    with capsys.disabled():
        print(f"\n{RENDERS} renders on {'the peer' if comfy.is_peer else comfy.url}: "
              f"{sum(o[0] == 'completed' for o in outcomes)} completed, "
              f"{sum(o[1] == 'success' for o in outcomes)} successful in ComfyUI's history, "
              f"{len(finished_but_failed)} finished but failed; submit to final "
              f"p50 {statistics.median(seconds):.2f} s, max {seconds[-1]:.2f} s")
    assert finished_but_failed == []
    assert [o[:2] for o in outcomes] == [("completed", "success")] * RENDERS

"""The ComfyUI engine against the in-repo ComfyUI peer (tests/peers/comfyui.py): binding,
outputs, progress, cancel (pending and running), a silent or dropped websocket, a lost
prompt, execution errors, refused workflows, the cache, input uploads, a node restart."""

from __future__ import annotations

import json
from io import BytesIO

import pytest
import trio
from PIL import Image

from service.engines import common

from engine_support import engine_node
from peers.comfyui import run_peer
from test_generation_support import balance, submit, upload_ok, wait_hold, wait_status
from waiting import wait_until

UPSTREAM_400 = "Generation failed upstream (HTTP 400). Credits were released."
UNAVAILABLE = "Generation failed: the model backend is unavailable. Credits were released."
INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."
NO_OUTPUT = "Generation failed: the model returned no output. Credits were released."
PATH = "/v1/generation/models/comfy-image"
_seeds = iter(range(1, 1 << 24))


@pytest.fixture
def short_retries(monkeypatch):
    """Transient faults are tried again for ~30 s (common.RETRY_S) before a server counts as
    gone; these tests, on the real clock, take a 0.3 s bound."""
    monkeypatch.setattr(common, "RETRY_S", (0.1, 0.2))


def req(**kw) -> dict:
    """A submit body; each gets its own seed (bound to EmptyImage's colour, at most 0xFFFFFF)."""
    return {"prompt": "x", "resolution": "96x64", "seed": next(_seeds), **kw}


def solid_png(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    buf = BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def graph(slow: float | None = None, fail: bool = False, preview_only: bool = False) -> dict:
    g = {"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
         "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
         "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "gen"}}}
    last = "2"
    if slow is not None:
        g["3"] = {"class_type": "PeerSleep", "inputs": {"image": [last, 0], "seconds": slow}}
        last = "3"
    if fail:
        g["4"] = {"class_type": "PeerFail", "inputs": {"image": [last, 0]}}
        last = "4"
    g["9"]["inputs"]["images"] = [last, 0]
    if preview_only:
        g["9"] = {"class_type": "PreviewImage", "inputs": {"images": [last, 0]}}
    return g


def catalog(url: str, *, concurrency: int = 1, workflow: str = "wf.json", poll_s: float = 0.2,
            capability: str = "image.generate", binds: str = "") -> str:
    return f"""
[[models]]
id = "comfy-image"
capability = "{capability}"
backend = "comfyui"
resolutions = ["96x64", "20000x20000"]
concurrency = {concurrency}
prices = [{{ resolution = "96x64", credits = "2.00" }}, {{ resolution = "20000x20000", credits = "2.00" }}]
[models.engine]
urls = ["{url}"]
workflow = "{workflow}"
poll_s = {poll_s}
[models.engine.bind]
{binds or 'seed = "1.color"' + chr(10) + 'width = "1.width"' + chr(10) + 'height = "1.height"'}
"""


@pytest.fixture
async def peer(tmp_path):
    async with run_peer(tmp_path / "comfy") as p:
        yield p


def node(tmp_path, peer, g: dict | None = None, **kw):
    return engine_node(tmp_path / "n", catalog(peer.url, **kw), files={"wf.json": json.dumps(g or graph())})


async def asset_image(n, key, out) -> Image.Image:
    r = await n.call("GET", out["url"].removeprefix("http://testserver"), key)
    r = await n.call("GET", r.headers["Location"].removeprefix("http://testserver"), None)
    return Image.open(BytesIO(await r.get_data())).convert("RGB")


async def rendering_on_peer(peer, prompt_id: str, running: bool = True) -> None:
    await wait_until(lambda: (peer.running and peer.running[1] == prompt_id) if running
                     else any(i[1] == prompt_id for i in peer.pending), 10)


async def test_a_job_runs_the_bound_workflow_and_is_charged(tmp_path, peer):
    async with node(tmp_path, peer) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox", "seed": 0x102030, "resolution": "96x64"},
                            path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("completed", None)
        [out] = st["outputs"]
        assert (out["content_type"], out["width"], out["height"]) == ("image/png", 96, 64)
        assert (await asset_image(n, key, out)).getpixel((5, 5)) == (0xFF - 0x10, 0xFF - 0x20, 0xFF - 0x30)
        prompt = peer.history[rid]["prompt"]
        assert prompt[1] == rid and prompt[3] == {"client_id": f"genservice-{rid}"}  # our ids
        assert (await wait_hold(n, key, rid, "captured"))["amount"] == "2.00"


async def test_progress_is_kept_on_the_job_while_it_renders(tmp_path, peer):
    async with node(tmp_path, peer, graph(slow=3)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        async def with_progress():
            st = await (await n.call("GET", f"/v1/generation/requests/{rid}/status", key)).get_json()
            return st if "progress" in st else None

        st = await wait_until(with_progress, timeout=10)
        assert st["status"] == "rendering"
        assert st["progress"]["max"] == 60 and 1 <= st["progress"]["value"] <= 60 and st["progress"]["step"] == "3"
        done = await wait_status(n, key, rid)
        assert "progress" not in done and done["status"] == "completed"


async def test_cancel_removes_a_pending_prompt_and_interrupts_a_running_one(tmp_path, peer):
    async with node(tmp_path, peer, graph(slow=30), concurrency=2) as n:
        key = (await n.create_org())["api_key"]
        running = (await submit(n, key, req(prompt="a"), path=PATH))["request_id"]
        await rendering_on_peer(peer, running)
        pending = (await submit(n, key, req(prompt="b"), path=PATH))["request_id"]
        await rendering_on_peer(peer, pending, running=False)
        for rid in (pending, running):
            r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
            assert (await r.get_json())["status"] == "canceled"
            await wait_hold(n, key, rid, "released")
        await wait_until(lambda: running in peer.history, 5, every=0.02)
        assert peer.history[running]["status"]["messages"][-1][0] == "execution_interrupted"
        assert peer.pending == [] and pending not in peer.executed_prompts
        assert (await balance(n, key))["available"] == "200.00"


@pytest.mark.parametrize("trap", ["silent", "dropped"])
async def test_a_silent_or_dropped_websocket_falls_back_to_polling(tmp_path, peer, trap):
    async with node(tmp_path, peer, graph(slow=0.5)) as n:
        key = (await n.create_org())["api_key"]
        if trap == "silent":
            peer.silent = True
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        if trap == "dropped":
            await rendering_on_peer(peer, rid)
            peer.drop_sockets()
        assert (await wait_status(n, key, rid))["status"] == "completed"


async def test_a_prompt_lost_by_a_comfyui_restart_fails_the_job(tmp_path, peer):
    async with node(tmp_path, peer, graph(slow=30)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        await rendering_on_peer(peer, rid)
        peer.restart()
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("failed", INCOMPLETE)
        await wait_hold(n, key, rid, "released")


async def test_engine_failures_map_to_the_spec_messages(tmp_path, peer):
    async with node(tmp_path, peer, graph(fail=True)) as n:
        key = (await n.create_org())["api_key"]
        error = (await submit(n, key, req(), path=PATH))["request_id"]
        refused = (await submit(n, key, req(resolution="20000x20000"), path=PATH))["request_id"]
        assert (await wait_status(n, key, error))["error"] == INCOMPLETE
        assert (await wait_status(n, key, refused))["error"] == UPSTREAM_400  # width over EmptyImage's max
        for rid in (error, refused):
            await wait_hold(n, key, rid, "released")
    async with node(tmp_path / "2", peer, graph(preview_only=True)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == NO_OUTPUT  # previews are not outputs


async def test_a_server_that_goes_away_mid_job_fails_it_as_unavailable(tmp_path, short_retries):
    stop = trio.CancelScope()

    async def serve_peer(task_status=trio.TASK_STATUS_IGNORED):
        with stop:
            async with run_peer(tmp_path / "comfy") as p:
                task_status.started(p)
                await trio.sleep_forever()

    async with trio.open_nursery() as outer:
        peer = await outer.start(serve_peer)
        async with node(tmp_path, peer, graph(slow=30)) as n:
            key = (await n.create_org())["api_key"]
            rid = (await submit(n, key, req(), path=PATH))["request_id"]
            await rendering_on_peer(peer, rid)
            stop.cancel()  # the ComfyUI server is gone
            st = await wait_status(n, key, rid)
            assert (st["status"], st["error"]) == ("failed", UNAVAILABLE)
            await wait_hold(n, key, rid, "released")
            r = await n.call("POST", PATH, key, json=req())
            assert r.status_code == 503  # its only server is known down


async def test_identical_requests_are_served_from_comfyuis_cache(tmp_path, peer):
    async with node(tmp_path, peer) as n:
        key = (await n.create_org())["api_key"]
        body = {"prompt": "same", "seed": 5, "resolution": "96x64"}
        first = await wait_status(n, key, (await submit(n, key, body, path=PATH))["request_id"])
        second = await wait_status(n, key, (await submit(n, key, body, path=PATH))["request_id"])
        assert first["status"] == second["status"] == "completed"
        cached = peer.history[second["request_id"]]["status"]["messages"][1][1]["nodes"]
        assert sorted(cached) == ["1", "2", "9"]
        assert (await asset_image(n, key, first["outputs"][0])).tobytes() == \
            (await asset_image(n, key, second["outputs"][0])).tobytes()


async def test_an_input_asset_is_uploaded_and_bound(tmp_path, peer):
    edit = {"1": {"class_type": "LoadImage", "inputs": {"image": "placeholder.png"}},
            "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
            "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "edit"}}}
    async with node(tmp_path, peer, edit, capability="image.edit", binds='"inputs.image" = "1.image"') as n:
        key = (await n.create_org())["api_key"]
        asset = await upload_ok(n, key, solid_png((40, 30), (10, 20, 30)))
        rid = (await submit(n, key, {"prompt": "invert it", "resolution": "96x64", "seed": 1,
                                     "inputs": {"image": [asset["id"]]}}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        assert (await asset_image(n, key, st["outputs"][0])).getpixel((3, 3)) == (245, 235, 225)
        assert (peer.in_dir / f"genservice-{rid}-image.png").is_file()


async def test_a_node_restart_follows_the_running_prompt_instead_of_submitting_again(tmp_path, peer):
    files = {"wf.json": json.dumps(graph(slow=1.5))}
    async with engine_node(tmp_path / "n", catalog(peer.url), files=files) as n1:
        org = await n1.create_org()
        key = org["api_key"]
        rid = (await submit(n1, key, req(), path=PATH))["request_id"]
        await rendering_on_peer(peer, rid)
    assert peer.running and peer.running[1] == rid  # a node shutdown leaves the engine's job running
    async with engine_node(tmp_path / "n", catalog(peer.url), files=files) as n2:
        st = await wait_status(n2, key, rid)
        assert st["status"] == "completed"
    assert peer.executed_prompts.count(rid) == 1


async def test_prompts_whose_history_is_written_after_their_end_event_are_not_lost(tmp_path, peer, caplog):
    """ComfyUI sends execution_success / execution_error from inside execute() and writes
    the history after it (main.py, prompt_worker): a client that reads /history/{id} on
    the event reads `{}`. Every finished render completes; a failed one is read as failed."""
    peer.history_gap_s = 0.5
    async with node(tmp_path, peer) as n:
        key = (await n.create_org())["api_key"]
        rids = [(await submit(n, key, req(), path=PATH))["request_id"] for _ in range(3)]
        for rid in rids:
            st = await wait_status(n, key, rid)
            assert (st["status"], st["error"]) == ("completed", None)
            await wait_hold(n, key, rid, "captured")
        assert peer.executed_prompts == rids
    async with node(tmp_path / "2", peer, graph(fail=True)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        assert (await wait_status(n, key, rid))["error"] == INCOMPLETE
        assert f"ComfyUI reported an error: execution_error in node 4 (PeerFail)" in caplog.text


async def test_a_websocket_dropped_mid_prompt_is_opened_again(tmp_path, peer):
    async with node(tmp_path, peer, graph(slow=3), poll_s=60) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        await rendering_on_peer(peer, rid)
        peer.drop_sockets()
        await wait_until(lambda: f"genservice-{rid}" in peer.sockets, 10, every=0.02)
        assert rid in {i[1] for i in ([peer.running] if peer.running else [])}  # back before the prompt ended
        st = await wait_status(n, key, rid)  # poll_s 60: ended by the event on the new socket
        assert st["status"] == "completed"


async def test_a_prompt_interrupted_on_comfyui_itself_fails_after_its_history_is_written(tmp_path, peer, caplog):
    """Someone interrupts the prompt in ComfyUI's own UI: `execution_interrupted` comes before
    the history; the job fails as incomplete from the history entry, not from a `{}` read."""
    peer.history_gap_s = 0.5
    async with node(tmp_path, peer, graph(slow=30)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, req(), path=PATH))["request_id"]
        await rendering_on_peer(peer, rid)
        peer.interrupt()
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("failed", INCOMPLETE)
        await wait_hold(n, key, rid, "released")
    assert "ComfyUI reported an error: execution_interrupted in node 3 (PeerSleep)" in caplog.text
    assert "has no history" not in caplog.text and "lost prompt" not in caplog.text

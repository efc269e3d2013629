"""The ComfyUI peer reproduces ComfyUI's protocol (checked against ComfyUI's source and a
real ComfyUI, /work notes in docs/engines-peers.md): event order, targeting, history,
validation answers, cache, interrupt, restart. These tests drive it as a client would."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from peers.comfyui import run_peer

GRAPH = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 1, "color": 0xFF0000}},
    "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "lanczos", "width": 32,
                                                 "height": 24, "crop": "disabled"}},
    "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
    "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "t"}},
}


@pytest.fixture
async def peer(tmp_path):
    async with run_peer(tmp_path) as p:
        yield p


def ws_url(peer, client_id: str) -> str:
    return peer.url.replace("http://", "ws://") + f"/ws?clientId={client_id}"


async def events_until_done(ws, prompt_id: str) -> list[tuple[str, dict]]:
    seen = []
    with trio.fail_after(10):
        while True:
            m = json.loads(await ws.get_message())
            seen.append((m["type"], m["data"]))
            if m["type"] == "executing" and m["data"]["node"] is None and m["data"]["prompt_id"] == prompt_id:
                return seen


async def test_event_order_history_and_view(peer):
    async with httpx.AsyncClient(base_url=peer.url) as c, open_websocket_url(ws_url(peer, "me")) as ws:
        first = json.loads(await ws.get_message())
        assert first == {"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}, "sid": "me"}}
        r = await c.post("/prompt", json={"prompt": GRAPH, "client_id": "me", "prompt_id": "p1"})
        assert r.json() == {"prompt_id": "p1", "number": 0, "node_errors": {}}
        seen = await events_until_done(ws, "p1")
        kinds = [k for k, _ in seen]
        assert kinds == ["status", "execution_start", "execution_cached",
                         *["progress_state", "executing", "progress_state"] * 4,
                         "executed", "execution_success", "status", "executing"]
        assert seen[2][1]["nodes"] == []
        executed = next(d for k, d in seen if k == "executed")
        assert executed["node"] == "4" and executed["output"] == {
            "images": [{"filename": "t_00001_.png", "subfolder": "", "type": "output"}]}
        entry = (await c.get("/history/p1")).json()["p1"]
        assert entry["status"]["status_str"] == "success" and entry["status"]["completed"] is True
        assert [m[0] for m in entry["status"]["messages"]] == ["execution_start", "execution_cached",
                                                               "execution_success"]
        r = await c.get("/view", params={"filename": "t_00001_.png", "type": "output", "subfolder": ""})
        assert r.status_code == 200 and r.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert (await c.get("/view", params={"filename": "../x.png"})).status_code == 400
        assert (await c.get("/view", params={"filename": "nope.png"})).status_code == 404
        assert (await c.get("/api/history/p1")).json()["p1"]["outputs"] == entry["outputs"]


async def test_identical_graph_is_served_from_the_cache_with_the_old_file_name(peer):
    async with httpx.AsyncClient(base_url=peer.url) as c, open_websocket_url(ws_url(peer, "me")) as ws:
        await ws.get_message()
        await c.post("/prompt", json={"prompt": GRAPH, "client_id": "me", "prompt_id": "a"})
        await events_until_done(ws, "a")
        await c.post("/prompt", json={"prompt": GRAPH, "client_id": "me", "prompt_id": "b"})
        seen = await events_until_done(ws, "b")
        assert dict(seen)["execution_cached"]["nodes"] == ["1", "2", "3", "4"]
        assert "executing" not in [k for k, d in seen if d.get("node") is not None]
        assert dict(seen)["executed"]["output"]["images"][0]["filename"] == "t_00001_.png"


async def test_events_go_only_to_the_submitting_client_and_are_not_replayed(peer):
    async with httpx.AsyncClient(base_url=peer.url) as c, open_websocket_url(ws_url(peer, "other")) as other:
        await other.get_message()
        await c.post("/prompt", json={"prompt": GRAPH, "client_id": "absent", "prompt_id": "p"})
        with trio.fail_after(10):
            while not (await c.get("/history/p")).json():
                await trio.sleep(0.02)
        got = []
        with trio.move_on_after(0.3):
            while True:
                got.append(json.loads(await other.get_message())["type"])
        assert set(got) <= {"status"}  # only broadcasts reach another client
        async with open_websocket_url(ws_url(peer, "absent")) as late:  # connects after the end
            assert json.loads(await late.get_message())["type"] == "status"
            with trio.move_on_after(0.3):
                assert json.loads(await late.get_message())["type"] == "status"


async def test_validation_answers(peer):
    async with httpx.AsyncClient(base_url=peer.url) as c:
        r = await c.post("/prompt", json={"prompt": {"1": {"class_type": "Nope", "inputs": {}}}})
        assert r.status_code == 400 and r.json() == {"error": {
            "type": "invalid_prompt", "message": "Cannot execute because node Nope does not exist.",
            "details": "Node ID '#1'", "extra_info": {}}, "node_errors": {}}
        r = await c.post("/prompt", json={"prompt": {"1": GRAPH["1"]}})
        assert r.status_code == 400 and r.json()["error"]["type"] == "prompt_no_outputs"
        bad = json.loads(json.dumps(GRAPH))
        bad["2"]["inputs"]["upscale_method"] = "magic"
        r = await c.post("/prompt", json={"prompt": bad})
        assert r.status_code == 400
        body = r.json()
        assert body["error"]["type"] == "prompt_outputs_failed_validation"
        err = body["node_errors"]["2"]
        assert (err["class_type"], err["dependent_outputs"], err["errors"][0]["type"],
                err["errors"][0]["extra_info"]["received_value"]) == ("ImageScale", ["4"], "value_not_in_list", "magic")
        r = await c.post("/prompt", content=b"{not json")
        assert r.status_code == 500
        r = await c.post("/prompt", json={"prompt": GRAPH}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403


async def test_history_is_empty_while_running_interrupt_lands_at_the_next_step_and_delete_pending(peer):
    slow = {**GRAPH, "5": {"class_type": "PeerSleep", "inputs": {"image": ["3", 0], "seconds": 30}},
            "4": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "s"}}}
    async with httpx.AsyncClient(base_url=peer.url) as c, open_websocket_url(ws_url(peer, "me")) as ws:
        await ws.get_message()
        await c.post("/prompt", json={"prompt": slow, "client_id": "me", "prompt_id": "run"})
        await c.post("/prompt", json={"prompt": GRAPH, "client_id": "me", "prompt_id": "wait"})
        with trio.fail_after(10):
            while True:
                m = json.loads(await ws.get_message())
                if m["type"] == "progress":
                    break
        assert (await c.get("/history/run")).json() == {}
        q = (await c.get("/queue")).json()
        assert [i[1] for i in q["queue_running"]] == ["run"] and [i[1] for i in q["queue_pending"]] == ["wait"]
        await c.post("/queue", json={"delete": ["wait", "run"]})  # only pending items go
        q = (await c.get("/queue")).json()
        assert [i[1] for i in q["queue_running"]] == ["run"] and q["queue_pending"] == []
        await c.post("/interrupt", json={"prompt_id": "someone-else"})  # not running: nothing
        await c.post("/interrupt", json={"prompt_id": "run"})
        seen = await events_until_done(ws, "run")
        assert [k for k, _ in seen][-3:] == ["execution_interrupted", "status", "executing"]
        entry = (await c.get("/history/run")).json()["run"]
        assert (entry["status"]["status_str"], entry["status"]["completed"]) == ("error", False)
        assert (await c.get("/history/wait")).json() == {}  # deleted from the queue: no trace at all


async def test_a_restart_loses_queue_and_history(peer):
    async with httpx.AsyncClient(base_url=peer.url) as c:
        await c.post("/prompt", json={"prompt": GRAPH, "prompt_id": "x"})
        with trio.fail_after(10):
            while not (await c.get("/history/x")).json():
                await trio.sleep(0.02)
        peer.restart()
        assert (await c.get("/history/x")).json() == {}
        assert (await c.get("/queue")).json() == {"queue_running": [], "queue_pending": []}


async def test_upload_renames_a_clash_unless_overwrite_or_same_content(peer):
    async with httpx.AsyncClient(base_url=peer.url) as c:
        r1 = await c.post("/upload/image", files={"image": ("x.png", b"one", "image/png")})
        r2 = await c.post("/upload/image", files={"image": ("x.png", b"two", "image/png")})
        r3 = await c.post("/upload/image", files={"image": ("x.png", b"one", "image/png")})
        r4 = await c.post("/upload/image", files={"image": ("x.png", b"new", "image/png")}, data={"overwrite": "true"})
        assert [r.json()["name"] for r in (r1, r2, r3, r4)] == ["x.png", "x (1).png", "x.png", "x.png"]

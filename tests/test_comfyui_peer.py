"""ComfyUI's protocol as a client sees it: event order, targeting, history, validation
answers, cache, interrupt, restart. The tests run against the in-repo peer, or against a
real ComfyUI when GENSERVICE_COMFYUI_URL is set (tests/peers/comfyui_target.py,
docs/comfyui-peer.md), so the peer is held to what the real server does."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from peers.comfyui_target import comfy, comfy_process, restartable  # noqa: F401 - fixtures
from peers.comfyui_target import events_until_done, graph, wait_history


async def test_event_order_history_and_view(comfy):
    g = graph(comfy, "order")
    pid = comfy.id("p1")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        first = json.loads(await ws.get_message())
        assert first == {"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}},
                                                    "sid": comfy.tag}}
        r = await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": pid})
        body = r.json()
        assert (r.status_code, body["prompt_id"], body["node_errors"]) == (200, pid, {})
        assert isinstance(body["number"], int)
        seen = await events_until_done(ws, pid)
        kinds = [k for k, _ in seen]
        # queued and taken: two statuses; the output node's `executed` comes before its finish
        assert kinds == ["status", "status", "execution_start", "execution_cached",
                         *["progress_state", "executing", "progress_state"] * 3,
                         "progress_state", "executing", "executed", "progress_state",
                         "execution_success", "status", "executing"]
        assert [d["status"]["exec_info"]["queue_remaining"] for k, d in seen if k == "status"] == [1, 1, 0]
        assert seen[3][1]["nodes"] == []
        states = [d["nodes"] for k, d in seen if k == "progress_state"]
        assert [{n: e["state"] for n, e in s.items()} for s in states[:3]] == [
            {"1": "running"}, {"1": "finished"}, {"1": "finished", "2": "running"}]  # every node so far
        assert states[-1]["4"] == {"value": 1.0, "max": 1.0, "state": "finished", "node_id": "4", "prompt_id": pid,
                                   "display_node_id": "4", "parent_node_id": None, "real_node_id": "4"}
        assert [d["node"] for k, d in seen if k == "executing"] == ["1", "2", "3", "4", None]
        executed = next(d for k, d in seen if k == "executed")
        name = f"{comfy.tag}_order_00001_.png"
        assert executed["node"] == "4" and executed["output"] == {
            "images": [{"filename": name, "subfolder": "", "type": "output"}]}
        entry = (await c.get(f"/history/{pid}")).json()[pid]
        assert sorted(entry) == ["meta", "outputs", "prompt", "status"]
        assert entry["prompt"][1:4] == [pid, g, {"client_id": comfy.tag}]
        assert entry["prompt"][4] == ["4"]
        assert entry["status"]["status_str"] == "success" and entry["status"]["completed"] is True
        assert [m[0] for m in entry["status"]["messages"]] == ["execution_start", "execution_cached",
                                                               "execution_success"]
        assert entry["outputs"] == {"4": executed["output"]}
        assert entry["meta"] == {"4": {"node_id": "4", "display_node": "4", "parent_node": None,
                                       "real_node_id": "4"}}
        r = await c.get("/view", params={"filename": name, "type": "output", "subfolder": ""})
        assert r.status_code == 200 and r.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert r.headers["content-type"] == "image/png"
        assert (await c.get("/view", params={"filename": "../x.png"})).status_code == 400
        assert (await c.get("/view", params={"filename": f"{comfy.tag}-nope.png"})).status_code == 404
        assert (await c.get(f"/api/history/{pid}")).json()[pid]["outputs"] == entry["outputs"]


async def test_identical_graph_is_served_from_the_cache_with_the_old_file_name(comfy):
    g = graph(comfy, "cache")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": comfy.id("a")})
        await events_until_done(ws, comfy.id("a"))
        await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": comfy.id("b")})
        seen = await events_until_done(ws, comfy.id("b"))
        assert [k for k, _ in seen] == ["status", "status", "execution_start", "execution_cached", "executed",
                                        "progress_state", "execution_success", "status", "executing"]
        assert dict(seen)["progress_state"]["nodes"] == {"4": {  # only the output node is visited
            "value": 1, "max": 1, "state": "finished", "node_id": "4", "prompt_id": comfy.id("b"),
            "display_node_id": "4", "parent_node_id": None, "real_node_id": "4"}}
        assert dict(seen)["execution_cached"]["nodes"] == ["1", "2", "3", "4"]
        assert dict(seen)["executed"]["output"]["images"][0]["filename"] == f"{comfy.tag}_cache_00001_.png"
        entry = (await c.get(f"/history/{comfy.id('b')}")).json()[comfy.id("b")]
        assert entry["outputs"]["4"]["images"][0]["filename"] == f"{comfy.tag}_cache_00001_.png"


async def test_events_go_only_to_the_submitting_client_and_are_not_replayed(comfy):
    pid, absent = comfy.id("p"), comfy.id("absent")
    async with httpx.AsyncClient(base_url=comfy.url) as c, \
            open_websocket_url(comfy.ws_url(comfy.id("other"))) as other:
        await other.get_message()
        await c.post("/prompt", json={"prompt": graph(comfy, "target"), "client_id": absent, "prompt_id": pid})
        await wait_history(c, pid)
        got = []
        with trio.move_on_after(0.5):
            while True:
                got.append(json.loads(await other.get_message())["type"])
        assert set(got) == {"status"}  # only broadcasts reach another client
        async with open_websocket_url(comfy.ws_url(absent)) as late:  # connects after the end
            assert json.loads(await late.get_message())["type"] == "status"
            with trio.move_on_after(0.5):
                pytest.fail(f"a late socket got {await late.get_message()}")


async def test_validation_answers(comfy):
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        r = await c.post("/prompt", json={"prompt": {"1": {"class_type": "Nope", "inputs": {}}}})
        assert r.status_code == 400 and r.json() == {"error": {
            "type": "invalid_prompt", "message": "Cannot execute because node Nope does not exist.",
            "details": "Node ID '#1'", "extra_info": {}}, "node_errors": {}}
        g = graph(comfy, "valid")
        r = await c.post("/prompt", json={"prompt": {"1": g["1"]}})
        assert r.status_code == 400 and r.json() == {"error": {
            "type": "prompt_no_outputs", "message": "Prompt has no outputs",
            "details": "", "extra_info": {}}, "node_errors": {}}
        g["2"]["inputs"]["upscale_method"] = "magic"
        r = await c.post("/prompt", json={"prompt": g})
        assert r.status_code == 400
        body = r.json()
        assert body["error"] == {"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed "
                                 "validation", "details": "", "extra_info": {}}  # empty unless the output node fails
        assert body["node_errors"] == {"2": {"errors": [{
            "type": "value_not_in_list", "message": "Value not in list",
            "details": "upscale_method: 'magic' not in ['nearest-exact', 'bilinear', 'area', 'bicubic', 'lanczos']",
            "extra_info": {"input_name": "upscale_method", "input_config": [
                ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"], {}], "received_value": "magic"}}],
            "dependent_outputs": ["4"], "class_type": "ImageScale"}}
        r = await c.post("/prompt", content=b"{not json")
        assert r.status_code == 500
        r = await c.post("/prompt", json={"prompt": g}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403


async def test_history_is_empty_while_running_interrupt_lands_at_the_next_step_and_delete_pending(comfy):
    g = graph(comfy, "slow")
    slow = {**g, **comfy.slow_node(["3", 0], 8, comfy.tag),
            "4": {"class_type": "SaveImage", "inputs": {"images": ["slow", 0], "filename_prefix": f"{comfy.tag}_s"}}}
    run, wait = comfy.id("run"), comfy.id("wait")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        await c.post("/prompt", json={"prompt": slow, "client_id": comfy.tag, "prompt_id": run})
        await c.post("/prompt", json={"prompt": graph(comfy, "wait"), "client_id": comfy.tag, "prompt_id": wait})
        before = []
        with trio.fail_after(30):
            while True:
                m = json.loads(await ws.get_message())
                before.append((m["type"], m["data"]))
                if m["type"] == "executing" and m["data"]["node"] not in ("1", "2", "3"):
                    break
        assert (await c.get(f"/history/{run}")).json() == {}
        q = (await c.get("/queue")).json()
        assert [i[1] for i in q["queue_running"]] == [run] and [i[1] for i in q["queue_pending"]] == [wait]
        await c.post("/queue", json={"delete": [wait, run]})  # only pending items go
        q = (await c.get("/queue")).json()
        assert [i[1] for i in q["queue_running"]] == [run] and q["queue_pending"] == []
        await c.post("/interrupt", json={"prompt_id": comfy.id("someone-else")})  # not running: nothing
        await c.post("/interrupt", json={"prompt_id": run})
        seen = await events_until_done(ws, run, timeout=60)
        assert [k for k, _ in seen][-3:] == ["execution_interrupted", "status", "executing"]
        interrupted = dict(seen)["execution_interrupted"]
        # it lands in the node last announced: inside it (a progress step) or as it starts
        last = [d["node"] for k, d in before + seen if k == "executing" and d["node"] is not None][-1]
        assert interrupted["node_id"] == last and interrupted["node_id"].startswith("slow")
        assert interrupted["node_type"] == slow[last]["class_type"] and last not in interrupted["executed"]
        assert sorted(interrupted) == ["executed", "node_id", "node_type", "prompt_id", "timestamp"]
        entry = (await c.get(f"/history/{run}")).json()[run]
        assert (entry["status"]["status_str"], entry["status"]["completed"]) == ("error", False)
        assert entry["status"]["messages"][-1][0] == "execution_interrupted"
        assert entry["outputs"] == {}
        assert (await c.get(f"/history/{wait}")).json() == {}  # deleted from the queue: no trace at all


async def test_a_restart_loses_queue_and_history(comfy, restartable):
    pid = comfy.id("x")
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        await c.post("/prompt", json={"prompt": graph(comfy, "restart"), "prompt_id": pid})
        await wait_history(c, pid)
        await comfy.restart()
        assert (await c.get(f"/history/{pid}")).json() == {}
        assert (await c.get("/queue")).json() == {"queue_running": [], "queue_pending": []}
        assert (await c.get("/history")).json() == {}


async def test_upload_renames_a_clash_unless_overwrite_or_same_content(comfy):
    name = f"{comfy.tag}.png"
    stem = comfy.tag
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        r1 = await c.post("/upload/image", files={"image": (name, b"one", "image/png")})
        r2 = await c.post("/upload/image", files={"image": (name, b"two", "image/png")})
        r3 = await c.post("/upload/image", files={"image": (name, b"one", "image/png")})
        r4 = await c.post("/upload/image", files={"image": (name, b"new", "image/png")}, data={"overwrite": "true"})
        assert [r.json()["name"] for r in (r1, r2, r3, r4)] == [name, f"{stem} (1).png", name, name]
        assert r1.json() == {"name": name, "subfolder": "", "type": "input"}
        r = await c.get("/view", params={"filename": name, "type": "input"})
        assert r.content == b"new"

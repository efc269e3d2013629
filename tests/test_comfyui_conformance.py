"""Protocol details of ComfyUI that a client can observe, pinned with the answers a real
ComfyUI 0.3.64 gives (docs/comfyui-peer.md). Like tests/test_comfyui_peer.py these run
against the in-repo peer, or against a real ComfyUI when GENSERVICE_COMFYUI_URL is set."""

from __future__ import annotations

import hashlib
import io
import json
import re

import av
import httpx
import trio
from PIL import Image
from trio_websocket import open_websocket_url

from peers.comfyui_target import comfy, comfy_process  # noqa: F401 - fixtures
from peers.comfyui_target import events_until_done, graph, wait_history
from waiting import wait_until

TROUBLE = "500 Internal Server Error\n\nServer got itself in trouble"


def png(size=(20, 10), colour=(1, 2, 3, 128)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGBA", size, colour).save(buf, "PNG")
    return buf.getvalue()


def without_tracebacks(value):
    if isinstance(value, dict):
        return {k: without_tracebacks(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, list):
        return [without_tracebacks(v) for v in value]
    return value


async def wait_idle(c: httpx.AsyncClient) -> None:
    async def idle() -> bool:
        return (await c.get("/queue")).json() == {"queue_running": [], "queue_pending": []}

    await wait_until(idle, 60, every=0.05)


async def drain(ws, seconds: float = 0.5) -> list[dict]:
    got = []
    with trio.move_on_after(seconds):
        while True:
            got.append(json.loads(await ws.get_message()))
    return got


async def test_every_route_is_also_under_api_and_answers_like_aiohttp(comfy):
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        for path in ("/queue", "/prompt", "/history", "/features", "/system_stats", "/object_info/ImageScale"):
            plain, api = await c.get(path), await c.get("/api" + path)
            assert (plain.status_code, api.status_code) == (200, 200), path
            assert api.headers["content-type"] == "application/json; charset=utf-8"
        assert (await c.get("/api/queue")).text == '{"queue_running": [], "queue_pending": []}'
        r = await c.post("/api/prompt", json={"prompt": graph(comfy, "api"), "prompt_id": comfy.id("api")})
        assert r.status_code == 200 and r.text.startswith(f'{{"prompt_id": "{comfy.id("api")}", "number": ')
        await wait_history(c, comfy.id("api"))
        r = await c.post("/api/queue", json={})
        assert (r.status_code, r.content, r.headers.get("content-type")) == (200, b"", None)
        for method, path in (("GET", "/nope"), ("GET", "/interrupt")):  # any GET falls to the web root
            r = await c.request(method, path)
            assert (r.status_code, r.content) == (404, b""), (method, path)
        for method, path in (("DELETE", "/queue"), ("POST", "/nope")):
            r = await c.request(method, path)
            assert (r.status_code, r.text) == (405, "405: Method Not Allowed"), (method, path)
        info = (await c.get("/object_info/ImageScale")).json()["ImageScale"]
        assert info["input"]["required"]["width"] == ["INT", {"default": 512, "min": 0, "max": 16384, "step": 1}]
        assert (info["output"], info["output_node"], info["display_name"]) == (["IMAGE"], False, "Upscale Image")
        assert (await c.get("/object_info/Nope")).json() == {}
        assert (await c.get("/features")).json() == {"supports_preview_metadata": True, "max_upload_size": 104857600}


async def test_origin_check_compares_hosts_and_ports_only_for_a_loopback_host(comfy):
    port = comfy.url.rsplit(":", 1)[1]
    cases = [("http://evil.example", None, 403), (f"http://127.0.0.1:{port}", None, 200),
             ("http://127.0.0.1", None, 200),  # an Origin without a port is compared by host only
             ("http://localhost:1", None, 403), ("null", None, 200),
             ("http://LOCALHOST", "localhost:1234", 200), ("http://x.test", "example.com", 200)]
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        for origin, host, status in cases:
            headers = {"Origin": origin, **({"Host": host} if host else {})}
            r = await c.get("/queue", headers=headers)
            assert r.status_code == status, (origin, host)
        upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
        r = await c.get(f"/ws?clientId={comfy.tag}", headers={**upgrade, "Origin": "http://evil.example"})
        assert r.status_code == 403  # the socket too


async def test_validation_answers_match_comfyui(comfy):
    async def post(prompt, **kw):
        r = await c.post("/prompt", json={"prompt": prompt, **kw})
        return r.status_code, without_tracebacks(r.json())

    def failed(node_errors, details=""):
        return 400, {"error": {"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed "
                               "validation", "details": details, "extra_info": {}}, "node_errors": node_errors}

    image = ["IMAGE", {}]
    width = ["INT", {"default": 512, "min": 0, "max": 16384, "step": 1}]
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        g = graph(comfy, "v")
        del g["2"]["inputs"]["width"]
        assert await post(g) == failed({"2": {"errors": [{
            "type": "required_input_missing", "message": "Required input is missing", "details": "width",
            "extra_info": {"input_name": "width"}}], "dependent_outputs": ["4"], "class_type": "ImageScale"}})
        g = graph(comfy, "v")
        g["2"]["inputs"]["image"] = ["1"]
        assert await post(g) == failed({"2": {"errors": [{
            "type": "bad_linked_input", "message": "Bad linked input, must be a length-2 list of [node_id, "
            "slot_index]", "details": "image", "extra_info": {"input_name": "image", "input_config": image,
                                                                "received_value": ["1"]}}],
            "dependent_outputs": ["4"], "class_type": "ImageScale"}})
        g = graph(comfy, "v")
        g["2"]["inputs"]["image"] = ["9", 0]  # a missing node: filed under the node linking to it
        assert await post(g) == failed({"2": {"errors": [{
            "type": "exception_during_inner_validation", "message": "Exception when validating inner node",
            "details": "'9'", "extra_info": {"input_name": "image", "input_config": image, "exception_message": "'9'",
                                             "exception_type": "KeyError", "linked_node": ["2", 0]}}],
            "dependent_outputs": ["4"], "class_type": "ImageScale"}})
        g = graph(comfy, "v")
        g["4"]["inputs"]["images"] = ["3", 5]  # a bad slot on the output node itself
        assert await post(g) == failed({"4": {"errors": [{
            "type": "exception_during_validation", "message": "Exception when validating node",
            "details": "tuple index out of range", "extra_info": {"exception_type": "IndexError"}}],
            "dependent_outputs": ["4"], "class_type": "SaveImage"}},
            "Exception when validating node: tuple index out of range")
        g = graph(comfy, "v")
        g["3"]["inputs"]["image"] = ["5", 0]
        g["5"] = {"class_type": "ImageInvert", "inputs": {"image": ["3", 0]}}
        assert await post(g) == failed({})  # a cycle: invalid, with no reason given
        g = graph(comfy, "v")
        g["2"]["inputs"]["width"] = "abc"
        assert await post(g) == failed({"2": {"errors": [{
            "type": "invalid_input_type", "message": "Failed to convert an input value to a INT value",
            "details": "width, abc, invalid literal for int() with base 10: 'abc'",
            "extra_info": {"input_name": "width", "input_config": width, "received_value": "abc",
                           "exception_message": "invalid literal for int() with base 10: 'abc'"}}],
            "dependent_outputs": ["4"], "class_type": "ImageScale"}})
        g = graph(comfy, "v")
        g["2"]["inputs"]["width"] = 99999
        assert await post(g) == failed({"2": {"errors": [{
            "type": "value_bigger_than_max", "message": "Value 99999 bigger than max of 16384", "details": "width",
            "extra_info": {"input_name": "width", "input_config": width, "received_value": 99999}}],
            "dependent_outputs": ["4"], "class_type": "ImageScale"}})
        g = {"1": {"class_type": "LoadImage", "inputs": {"image": f"{comfy.tag}-nope.png"}},
             "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": comfy.tag}}}
        assert await post(g) == failed({"1": {"errors": [{
            "type": "custom_validation_failed", "message": "Custom validation failed for node",
            "details": f"image - Invalid image file: {comfy.tag}-nope.png", "extra_info": {"input_name": "image"}}],
            "dependent_outputs": ["2"], "class_type": "LoadImage"}})
        g = graph(comfy, "v")
        g["1"].pop("class_type")
        assert await post(g) == (400, {"error": {
            "type": "invalid_prompt", "message": "Cannot execute because a node is missing the class_type property.",
            "details": "Node ID '#1'", "extra_info": {}}, "node_errors": {}})
        no_outputs = (400, {"error": {"type": "prompt_no_outputs", "message": "Prompt has no outputs", "details": "",
                                      "extra_info": {}}, "node_errors": {}})
        assert await post({}) == no_outputs and await post([]) == no_outputs
        for body in ({}, [1]):
            r = await c.post("/prompt", json=body)
            assert (r.status_code, r.json()) == (400, {"error": {
                "type": "no_prompt", "message": "No prompt provided", "details": "No prompt provided",
                "extra_info": {}}, "node_errors": {}})
        r = await c.post("/prompt", json={"prompt": "x"})
        assert (r.status_code, r.text) == (500, TROUBLE)
        # literals are converted, and the queued prompt keeps the converted value
        g = graph(comfy, "conv")
        g["2"]["inputs"]["width"], g["1"]["inputs"]["width"] = "40", 64.7
        r = await c.post("/prompt", json={"prompt": g, "prompt_id": comfy.id("conv")})
        assert r.status_code == 200
        entry = await wait_history(c, comfy.id("conv"))
        assert (entry["prompt"][2]["2"]["inputs"]["width"], entry["prompt"][2]["1"]["inputs"]["width"]) == (40, 64)
        # one bad output of two: queued anyway, with its node_errors
        g = graph(comfy, "some")
        g["5"] = {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}}
        r = await c.post("/prompt", json={"prompt": g, "prompt_id": comfy.id("some")})
        assert r.status_code == 200 and r.json()["node_errors"] == {"5": {"errors": [{
            "type": "required_input_missing", "message": "Required input is missing", "details": "filename_prefix",
            "extra_info": {"input_name": "filename_prefix"}}], "dependent_outputs": ["5"], "class_type": "SaveImage"}}
        assert (await wait_history(c, comfy.id("some")))["prompt"][4] == ["4"]


async def test_prompt_id_and_number_rules(comfy):
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        answers = []
        for i, extra in enumerate(({"prompt_id": 5}, {"prompt_id": None}, {"number": 7}, {"front": True})):
            r = await c.post("/prompt", json={"prompt": graph(comfy, f"n{i}"), **extra})
            answers.append(r.json())
        assert answers[0]["prompt_id"] == "5" and answers[1]["prompt_id"] == "None"  # str() of what was sent
        assert answers[2]["number"] == 7.0 and isinstance(answers[2]["number"], float)
        assert answers[3]["number"] == -(answers[1]["number"] + 1)  # the counter, negated
        await wait_idle(c)
        await c.post("/history", json={"delete": ["5", "None"]})
        assert (await c.get("/history/5")).json() == {}


async def test_without_client_id_only_broadcasts_reach_sockets(comfy):
    pid = comfy.id("nc")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        await c.post("/prompt", json={"prompt": graph(comfy, "nc"), "prompt_id": pid})
        kinds = []
        with trio.fail_after(30):
            while kinds[-1:] != ["status"] or queue_remaining != 0:
                m = json.loads(await ws.get_message())
                kinds.append(m["type"])
                queue_remaining = m["data"]["status"]["exec_info"]["queue_remaining"] if m["type"] == "status" else None
        kinds += [m["type"] for m in await drain(ws, 0.3)]
        assert kinds == ["status", "status", *["progress_state"] * 8, "status"]  # no executing, no executed


async def test_an_execution_error(comfy):
    pid = comfy.id("err")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        up = (await c.post("/upload/image", files={"image": (f"{comfy.tag}.png", b"not an image", "image/png")})).json()
        g = {"1": {"class_type": "LoadImage", "inputs": {"image": up["name"]}},
             "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": comfy.tag}}}
        assert (await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": pid})).status_code == 200
        seen = await events_until_done(ws, pid)
        assert [k for k, _ in seen][-5:] == ["progress_state", "executing", "execution_error", "status", "executing"]
        err = dict(seen)["execution_error"]
        assert (err["node_id"], err["node_type"], err["executed"], err["exception_type"]) == (
            "1", "LoadImage", [], "PIL.UnidentifiedImageError")
        assert re.fullmatch(r"cannot identify image file '.*/" + re.escape(up["name"]) + r"'\n", err["exception_message"])
        assert err["current_inputs"] == {"image": [up["name"]]} and sorted(err["current_outputs"]) == ["1", "2"]
        entry = (await c.get(f"/history/{pid}")).json()[pid]
        assert (entry["outputs"], entry["status"]["status_str"], entry["status"]["completed"]) == ({}, "error", False)
        assert entry["status"]["messages"][-1] == ["execution_error", err]


async def test_outputs_subfolders_previews_and_view(comfy):
    pid = comfy.id("ok")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        up = (await c.post("/upload/image", files={"image": (f"{comfy.tag}ok.png", png(), "image/png")})).json()
        g = {"1": {"class_type": "LoadImage", "inputs": {"image": up["name"]}},
             "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": f"{comfy.tag}sub/x"}},
             "3": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}
        await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": pid})
        seen = await events_until_done(ws, pid)
        assert sorted(d["node"] for k, d in seen if k == "executed") == ["2", "3"]
        entry = (await c.get(f"/history/{pid}")).json()[pid]
        assert entry["outputs"]["2"] == {"images": [{"filename": "x_00001_.png", "subfolder": f"{comfy.tag}sub",
                                                     "type": "output"}]}
        preview = entry["outputs"]["3"]["images"][0]
        assert re.fullmatch(r"ComfyUI_temp_[a-z]{5}_00001_\.png", preview["filename"])
        assert (preview["subfolder"], preview["type"]) == ("", "temp")
        assert sorted(entry["meta"]) == ["2", "3"]
        r = await c.get("/view", params=entry["outputs"]["2"]["images"][0])
        assert r.headers["content-disposition"] == 'filename="x_00001_.png"'
        image = Image.open(io.BytesIO(r.content))
        written = json.loads(image.info["prompt"])  # the prompt, LoadImage with its file's hash
        assert written["1"].pop("is_changed") == [hashlib.sha256(png()).hexdigest()]
        assert (image.size, image.mode, written) == ((20, 10), "RGB", entry["prompt"][2])
        r = await c.get("/view", params={**preview, "preview": "webp;50"})
        assert (r.status_code, r.headers["content-type"]) == (200, "image/webp")
        r = await c.get("/view", params={**preview, "preview": "jpeg;80"})
        assert (r.status_code, r.headers["content-type"]) == (200, "image/jpeg")
        r = await c.get("/view", params={"filename": up["name"], "type": "input", "channel": "a"})
        assert r.headers["content-type"] == "image/png" and Image.open(io.BytesIO(r.content)).mode == "RGBA"
        r = await c.get("/view", params={"filename": f"{up['name']} [input]"})  # an annotated name
        assert r.status_code == 200 and r.content == png()


async def test_view_and_upload_refusals(comfy):
    name = f"{comfy.tag}.png"
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        r = await c.post("/upload/image", files={"image": (name, b"abc", "image/png")},
                         data={"type": "output", "subfolder": f"{comfy.tag}dir"})
        assert r.json() == {"name": name, "subfolder": f"{comfy.tag}dir", "type": "output"}
        r = await c.get("/view", params={"filename": name, "type": "output", "subfolder": f"{comfy.tag}dir"})
        assert (r.status_code, r.content, r.headers["content-type"]) == (200, b"abc", "image/png")
        cases = [({"filename": name, "type": "output", "subfolder": "../input"}, 403),
                 ({"filename": name, "type": "weird"}, 400), ({}, 404), ({"filename": "/etc/passwd"}, 400),
                 ({"filename": "../x.png"}, 400), ({"filename": ""}, 400), ({"filename": f"{comfy.tag}-no.png"}, 404)]
        for params, status in cases:
            r = await c.get("/view", params=params)
            assert (r.status_code, r.content) == (status, b""), params
        f = {"image": (name, b"abc", "image/png")}
        assert (await c.post("/upload/image", data={"x": "1"}, files={"other": ("a", b"b")})).status_code == 400
        assert (await c.post("/upload/image", files=f, data={"subfolder": "../x"})).status_code == 400
        r = await c.post("/upload/image", files=f, data={"type": "weird"})
        assert (r.status_code, r.text) == (500, TROUBLE)
        r = await c.post("/upload/image", files={"image": ("", b"abc", "image/png")})
        assert (r.status_code, r.text) == (500, TROUBLE)


async def test_history_paging_and_deleting(comfy):
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        for n in ("h1", "h2", "h3"):
            await c.post("/prompt", json={"prompt": graph(comfy, n), "prompt_id": comfy.id(n)})
            await wait_history(c, comfy.id(n))
        assert list((await c.get("/history", params={"max_items": 2})).json()) == [comfy.id("h2"), comfy.id("h3")]
        everything = list((await c.get("/history")).json())
        assert everything[-3:] == [comfy.id("h1"), comfy.id("h2"), comfy.id("h3")]
        start = len(everything) - 3
        page = (await c.get("/history", params={"max_items": 1, "offset": start + 1})).json()
        assert list(page) == [comfy.id("h2")]
        await c.post("/history", json={"delete": [comfy.id("h2")]})
        assert (await c.get(f"/history/{comfy.id('h2')}")).json() == {}
        assert comfy.id("h3") in (await c.get("/history")).json()


async def test_a_global_interrupt_and_a_reconnect_while_running(comfy):
    """An interrupt without a prompt id (or with an unreadable body) stops whatever runs; a
    socket that reconnects with the running prompt's clientId is told the running node."""
    g = {**graph(comfy, "gi"), **comfy.slow_node(["3", 0], 8, comfy.tag + "gi")}
    g["4"]["inputs"]["images"] = ["slow", 0]
    pid = comfy.id("gi")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as first:
        await first.get_message()
        await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": pid})
        with trio.fail_after(30):
            while True:
                m = json.loads(await first.get_message())
                if m["type"] == "executing" and m["data"]["node"].startswith("slow"):
                    break
        async with open_websocket_url(comfy.ws_url(comfy.tag)) as second:
            assert json.loads(await second.get_message())["type"] == "status"
            told = json.loads(await second.get_message())
            assert told["type"] == "executing" and list(told["data"]) == ["node"]
            assert told["data"]["node"].startswith("slow")
            await c.post("/interrupt", content=b"not json")
            seen = await events_until_done(second, pid)
            assert [k for k, _ in seen][-3:] == ["execution_interrupted", "status", "executing"]
        # the replaced socket stays open but hears nothing more of the prompt
        assert "execution_interrupted" not in [m["type"] for m in await drain(first, 0.3)]
        entry = (await c.get(f"/history/{pid}")).json()[pid]
        assert entry["status"]["messages"][-1][0] == "execution_interrupted"


async def test_loadimage_reruns_when_its_file_changes_and_free_memory_empties_the_cache(comfy):
    name = f"{comfy.tag}in.png"
    g = {"1": {"class_type": "LoadImage", "inputs": {"image": name}},
         "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
         "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": comfy.tag}}}
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()

        async def run(n: str) -> list:
            await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": comfy.id(n)})
            seen = await events_until_done(ws, comfy.id(n))
            return dict(seen)["execution_cached"]["nodes"]

        await c.post("/upload/image", files={"image": (name, png(colour=(9, 9, 9, 255)), "image/png")})
        assert await run("a") == []
        assert await run("b") == ["1", "2", "3"]
        await c.post("/upload/image", files={"image": (name, png(colour=(8, 8, 8, 255)), "image/png")},
                     data={"overwrite": "true"})
        assert await run("c") == []  # the file's hash is part of LoadImage's key
        await c.post("/free", json={"free_memory": True})
        await c.post("/prompt", json={"prompt": graph(comfy, "free"), "prompt_id": comfy.id("free")})
        await wait_history(c, comfy.id("free"))  # the cache is dropped after the next prompt
        assert await run("d") == []


async def test_feature_flags_are_answered_only_as_the_first_message(comfy):
    async with open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        await ws.send_message(json.dumps({"type": "feature_flags", "data": {"supports_preview_metadata": True}}))
        assert json.loads(await ws.get_message()) == {"type": "feature_flags", "data": {
            "supports_preview_metadata": True, "max_upload_size": 104857600}}
        await ws.send_message(json.dumps({"type": "feature_flags", "data": {}}))
        assert await drain(ws, 0.3) == []


async def test_queue_order_deletes_and_their_statuses_and_an_empty_id_interrupt(comfy):
    """Pending prompts are a heap on (number, prompt_id): `front` goes first. Each deleted
    item is one `status`, the last one two (ComfyUI wipes the queue, then reports); a
    delete that matches nothing says nothing. An empty prompt id interrupts globally."""
    g = {**graph(comfy, "q"), **comfy.slow_node(["3", 0], 8, comfy.tag + "q")}
    g["4"]["inputs"]["images"] = ["slow", 0]
    run = comfy.id("run")
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()
        await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": run})
        with trio.fail_after(30):
            while True:
                m = json.loads(await ws.get_message())
                if m["type"] == "executing" and m["data"]["node"].startswith("slow"):
                    break
        for name, extra in (("b", {}), ("c", {}), ("d", {"front": True})):
            await c.post("/prompt", json={"prompt": graph(comfy, name), "prompt_id": comfy.id(name), **extra})
        pending = [i[1] for i in (await c.get("/queue")).json()["queue_pending"]]
        assert pending[0] == comfy.id("d") and sorted(pending) == sorted(comfy.id(n) for n in "bcd")

        async def statuses_after(body: dict) -> list[int]:
            await drain(ws, 0.05)
            await c.post("/queue", json=body)
            return [m["data"]["status"]["exec_info"]["queue_remaining"] for m in await drain(ws, 1.0)
                    if m["type"] == "status"]

        assert await statuses_after({"delete": [comfy.id("c")]}) == [3]
        assert await statuses_after({"delete": [comfy.id("nothing")]}) == []
        assert await statuses_after({"delete": [comfy.id("b")]}) == [2]
        assert await statuses_after({"delete": [comfy.id("d")]}) == [1, 1]
        await c.post("/interrupt", json={"prompt_id": ""})
        seen = await events_until_done(ws, run)
        assert [k for k, _ in seen][-3:] == ["execution_interrupted", "status", "executing"]


async def test_video_is_reported_under_images_as_animated_and_its_combos_fail_only_at_run_time(comfy):
    def video(name: str, fmt: str = "auto", codec: str = "auto", fps=8.0) -> dict:
        return {"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 6,
                                                             "color": graph(comfy, name)["1"]["inputs"]["color"]}},
                "2": {"class_type": "CreateVideo", "inputs": {"images": ["1", 0], "fps": fps}},
                "3": {"class_type": "SaveVideo", "inputs": {"video": ["2", 0], "filename_prefix": f"{comfy.tag}/{name}",
                                                            "format": fmt, "codec": codec}}}

    async with httpx.AsyncClient(base_url=comfy.url) as c:
        r = await c.post("/prompt", json={"prompt": video("v", fps=500)})
        assert r.status_code == 400 and r.json()["node_errors"]["2"]["errors"][0]["extra_info"] == {
            "input_name": "fps", "input_config": ["FLOAT", {"default": 30.0, "min": 1.0, "max": 120.0, "step": 1.0}],
            "received_value": 500.0}
        await c.post("/prompt", json={"prompt": video("v"), "prompt_id": comfy.id("v")})
        entry = await wait_history(c, comfy.id("v"))
        assert entry["outputs"] == {"3": {"images": [{"filename": "v_00001_.mp4", "subfolder": comfy.tag,
                                                      "type": "output"}], "animated": [True]}}
        r = await c.get("/view", params=entry["outputs"]["3"]["images"][0])
        assert r.headers["content-type"] == "video/mp4"
        with av.open(io.BytesIO(r.content)) as f:
            stream = f.streams.video[0]
            assert (stream.codec_context.name, stream.width, stream.height, stream.average_rate, stream.frames) == (
                "h264", 64, 48, 8, 6)
            assert json.loads(f.metadata["prompt"]) == entry["prompt"][2]
        for name, fmt, codec, message in (("f", "gif", "auto", "'gif' is not a valid VideoContainer\n"),
                                          ("c", "mp4", "vp9", "Only H264 codec is supported for now\n")):
            r = await c.post("/prompt", json={"prompt": video(name, fmt, codec), "prompt_id": comfy.id(name)})
            assert r.status_code == 200  # a COMBO of a v3 node is not checked before the run
            entry = await wait_history(c, comfy.id(name))
            event, data = entry["status"]["messages"][-1]
            assert (event, data["node_id"], data["exception_type"], data["exception_message"]) == (
                "execution_error", "3", "ValueError", message)


async def test_extra_data_is_kept_in_the_history_but_for_comfy_org_keys(comfy):
    pid = comfy.id("extra")
    extra = {"api_key_comfy_org": "k-1", "auth_token_comfy_org": "t-1", "mine": [1, "a"]}
    async with httpx.AsyncClient(base_url=comfy.url) as c:
        r = await c.post("/prompt", json={"prompt": graph(comfy, "extra"), "prompt_id": pid, "extra_data": extra,
                                          "client_id": comfy.id("nobody")})
        assert r.status_code == 200
        entry = await wait_history(c, pid)
        assert entry["prompt"][3] == {"mine": [1, "a"], "client_id": comfy.id("nobody")}


async def test_the_cache_keys_on_inputs_not_ids_and_keeps_only_the_last_prompt(comfy):
    async with httpx.AsyncClient(base_url=comfy.url) as c, open_websocket_url(comfy.ws_url(comfy.tag)) as ws:
        await ws.get_message()

        async def run(n: str, g: dict) -> tuple[list, dict]:
            await c.post("/prompt", json={"prompt": g, "client_id": comfy.tag, "prompt_id": comfy.id(n)})
            seen = await events_until_done(ws, comfy.id(n))
            return dict(seen)["execution_cached"]["nodes"], (await c.get(f"/history/{comfy.id(n)}")).json()

        a = graph(comfy, "a")
        renamed = {str(int(k) + 10): {**v, "inputs": {i: ([str(int(x[0]) + 10), x[1]] if isinstance(x, list) else x)
                                                      for i, x in v["inputs"].items()}} for k, v in a.items()}
        first = f"{comfy.tag}_a_00001_.png"
        assert (await run("a1", a))[0] == []
        cached, history = await run("a-ids", renamed)
        assert cached == ["11", "12", "13", "14"]
        assert history[comfy.id("a-ids")]["outputs"]["14"]["images"][0]["filename"] == first
        assert (await run("b", graph(comfy, "b")))[0] == []
        cached, history = await run("a2", a)  # B's run dropped A's entries
        assert cached == [] and history[comfy.id("a2")]["outputs"]["4"]["images"][0]["filename"] == (
            f"{comfy.tag}_a_00002_.png")

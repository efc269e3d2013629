"""Backpressure a user can see: an engine model's `queue` in `GET /v1/generation/models`
(jobs waiting and running, servers up and down, median time to start) and the same figures
in `/metrics`, against the ComfyUI peer."""

from __future__ import annotations

import json


from engine_support import engine_node, free_port
from peers.comfyui import run_peer
from service.actors.jobs.queues import EngineQueues
from service.catalog.catalog import loads_catalog
from service.engines.table import tables
from service.engines.pool import Pool
from test_engines_comfyui import PATH, catalog, graph, rendering_on_peer, req
from test_generation_support import submit, wait_status
from waiting import wait_until

TOKEN = "metrics-token-for-queue-tests"


async def models(n, key) -> dict:
    r = await n.call("GET", "/v1/generation/models", key)
    assert r.status_code == 200
    return {m["id"]: m for m in (await r.get_json())["data"]}


async def metrics(n) -> list[str]:
    r = await n.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    return [line for line in (await r.get_data(as_text=True)).splitlines() if line.startswith("genservice_engine_")]


async def test_waiting_and_running_jobs_are_counted_and_the_start_time_kept(tmp_path):
    async with run_peer(tmp_path / "comfy") as peer:
        async with engine_node(tmp_path / "n", catalog(peer.url), files={"wf.json": json.dumps(graph(slow=30))},
                               metrics_token=TOKEN) as n:
            key = (await n.create_org())["api_key"]
            before = await models(n, key)
            assert before["comfy-image"]["queue"] == {"queued": 0, "running": 0, "servers_up": 1,
                                                      "servers_down": 0, "time_to_start_p50_s": None}
            first = (await submit(n, key, req(), path=PATH))["request_id"]
            await rendering_on_peer(peer, first)
            behind = [(await submit(n, key, req(), path=PATH))["request_id"] for _ in range(3)]
            queue = (await models(n, key))["comfy-image"]["queue"]
            assert (queue["queued"], queue["running"], queue["servers_up"], queue["servers_down"]) == (3, 1, 1, 0)
            assert queue["time_to_start_p50_s"] >= 0
            lines = await metrics(n)
            assert 'genservice_engine_jobs_queued{model="comfy-image"} 3.0' in lines
            assert 'genservice_engine_jobs_running{model="comfy-image"} 1.0' in lines
            assert 'genservice_engine_servers{model="comfy-image",state="up"} 1.0' in lines
            assert 'genservice_engine_servers{model="comfy-image",state="down"} 0.0' in lines
            assert any(line.startswith('genservice_engine_time_to_start_seconds{model="comfy-image"} ')
                       for line in lines)
            for rid in [first, *behind]:
                r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
                assert r.status_code == 200
            for rid in [first, *behind]:
                await wait_status(n, key, rid)
            queue = (await models(n, key))["comfy-image"]["queue"]
            assert (queue["queued"], queue["running"]) == (0, 0)


async def test_a_down_server_is_counted_and_built_in_models_carry_no_queue(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    async with engine_node(tmp_path / "n", catalog(dead) + BUILT_IN, files={"wf.json": json.dumps(graph())},
                           metrics_token=TOKEN) as n:
        key = (await n.create_org())["api_key"]
        assert "queue" not in (await models(n, key))["proc-image"]
        async def one_down() -> dict | None:
            q = (await models(n, key))["comfy-image"]["queue"]
            return q if q["servers_down"] == 1 else None

        q = await wait_until(one_down, 10, every=0.05)
        assert q == {"queued": 0, "running": 0, "servers_up": 0, "servers_down": 1, "time_to_start_p50_s": None}
        assert 'genservice_engine_servers{model="comfy-image",state="down"} 1.0' in await metrics(n)


class _Slots:
    def __init__(self, stats: dict[str, tuple[int, int]]) -> None:
        self._stats = stats

    def stats(self, model: str) -> tuple[int, int]:
        return self._stats.get(model, (0, 0))


BUILT_IN = """
[[models]]
id = "proc-image"
capability = "image.generate"
backend = "procedural_image"
resolutions = ["1k"]
concurrency = 1
prices = [{ resolution = "1k", credits = "1.00" }]
"""
HOSTED = """
[[models]]
id = "fal-flux"
capability = "image.generate"
backend = "fal"
resolutions = ["1k"]
concurrency = 4
prices = [{ resolution = "1k", credits = "2.00" }]
[models.engine]
app = "fal-ai/flux/schnell"
token_env = "FAL_KEY"
""" + BUILT_IN


def test_a_hosted_api_has_no_servers_and_a_job_waiting_for_a_live_server_is_queued(tmp_path):
    (tmp_path / "wf.json").write_text(json.dumps(graph()))
    cat = loads_catalog(HOSTED + catalog("http://gpu1:8188", concurrency=2).replace(
        'urls = ["http://gpu1:8188"]', 'urls = ["http://gpu1:8188", "http://gpu2:8188"]'), base_dir=tmp_path,
        engines=tables())
    pool = Pool("comfy-image", ["http://gpu1:8188", "http://gpu2:8188"], 2)
    pool.servers[0].busy, pool.servers[1].down = 2, True  # 4 slots held, 2 jobs on the one live server
    queues = EngineQueues(lambda: cat, _Slots({"fal-flux": (3, 5), "comfy-image": (4, 1)}), lambda: {"comfy-image": pool})
    for waited in (1.0, 9.0, 2.0):
        queues.started("comfy-image", waited)
    queues.started("proc-image", 50.0)  # a built-in: not kept
    assert queues.view("proc-image") is None
    assert queues.view("fal-flux") == {"queued": 5, "running": 3, "servers_up": None, "servers_down": None,
                                       "time_to_start_p50_s": None}
    assert queues.view("comfy-image") == {"queued": 3, "running": 2, "servers_up": 1, "servers_down": 1,
                                          "time_to_start_p50_s": 2.0}
    assert set(queues.all()) == {"fal-flux", "comfy-image"}

"""An engine added the documented way (docs/engines.md, "Adding an engine"): the test
engine of tests/engines/sketch.py is registered through `service.engines.table.register`
and nothing else, and a node runs jobs through it against its real HTTP server
(tests/peers/sketch.py, in-process): submit, poll, output, charge; cancel on the engine;
health checks; a failure's message; its `[models.engine]` table checked by the catalog."""

from __future__ import annotations

import pytest
import trio

from engine_support import engine_node
from engines.sketch import Sketch, SketchTable
from peers.sketch import run_peer
from service.catalog.catalog import CatalogError
from service.engines.table import ENGINES, Row, register
from service.node import read_catalog
from test_generation_support import balance, submit, wait_hold, wait_status

PATH = "/v1/generation/models/sketch-image"
INCOMPLETE = "Generation failed: the model backend could not complete the request. Credits were released."


def catalog(url: str, engine_extra: str = "") -> str:
    return f"""
[[models]]
id = "sketch-image"
capability = "image.generate"
backend = "sketch"
resolutions = ["1k"]
concurrency = 2
prices = [{{ resolution = "1k", credits = "1.50" }}]
[models.engine]
urls = ["{url}"]
{engine_extra}
[models.engine.bind]
prompt = "prompt"
seed = "seed"
width = "width"
height = "height"
"""


@pytest.fixture
def sketch():
    row = Row("sketch", SketchTable, Sketch)
    register(row)
    try:
        yield row
    finally:
        ENGINES.pop("sketch", None)


async def test_a_job_runs_end_to_end_through_an_added_engine(sketch, tmp_path):
    async with run_peer() as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a red fox", "seed": 7}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert st["status"] == "completed", st
        [out] = st["outputs"]
        assert (out["content_type"], out["width"], out["height"]) == ("image/png", 1024, 1024)
        assert (await wait_hold(n, key, rid, "captured"))["amount"] == "1.50"
        [job] = peer.jobs.values()
        assert {k: v for k, v in job["body"].items() if k != "id"} == {
            "prompt": "a red fox", "seed": 7, "width": 1024, "height": 1024}
        assert peer.puts == [job["body"]["id"]]  # one submit: the job id keys it


async def test_a_cancel_reaches_the_added_engine_and_releases_the_credits(sketch, tmp_path):
    async with run_peer() as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "a long one [hold]"}, path=PATH))["request_id"]
        with trio.fail_after(10):
            while [j["state"] for j in peer.jobs.values()] != ["running"]:
                await trio.sleep(0.02)
        r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
        assert r.status_code == 200 and (await r.get_json())["status"] == "canceled"
        await wait_hold(n, key, rid, "released")
        with trio.fail_after(10):
            while not peer.canceled:
                await trio.sleep(0.02)
        assert peer.canceled == list(peer.jobs)
        assert [j["state"] for j in peer.jobs.values()] == ["canceled"]
        assert (await balance(n, key))["available"] == "200.00"


async def test_a_failure_on_the_added_engine_ends_with_the_spec_message(sketch, tmp_path):
    async with run_peer() as peer, engine_node(tmp_path, catalog(peer.url)) as n:
        key = (await n.create_org())["api_key"]
        rid = (await submit(n, key, {"prompt": "[fail]"}, path=PATH))["request_id"]
        st = await wait_status(n, key, rid)
        assert (st["status"], st["error"]) == ("failed", INCOMPLETE)
        await wait_hold(n, key, rid, "released")


async def test_the_added_engines_health_check_makes_its_model_unavailable(sketch, tmp_path):
    async with run_peer() as peer:
        peer.ready = False  # known down from the first health round, before the first submit
        async with engine_node(tmp_path, catalog(peer.url)) as n:
            key = (await n.create_org())["api_key"]
            r = await n.call("POST", PATH, key, json={"prompt": "x"})
            assert r.status_code == 503
            e = (await r.get_json())["error"]
            assert (e["code"], e["message"]) == ("request.service_unavailable",
                                                 "Model sketch-image is not available on this deployment.")
            assert peer.jobs == {}


def test_the_catalog_checks_an_added_engine_by_its_table(sketch, tmp_path):
    path = tmp_path / "catalog.toml"
    path.write_text(catalog("http://gpu1:9000", 'colour = "red"'))
    with pytest.raises(CatalogError) as e:
        read_catalog(str(path))
    assert str(e.value) == f"{path}: model 'sketch-image': engine.colour: Extra inputs are not permitted"
    path.write_text(catalog("http://gpu1:9000").replace('backend = "sketch"', 'backend = "sketchy"')
                    .split("[models.engine]")[0])
    with pytest.raises(CatalogError) as e:
        read_catalog(str(path))
    assert str(e.value).endswith("unknown backend 'sketchy' (known: procedural_image, camera_move_video, "
                                 "lanczos_upscale, espeak_speech, selfie_segment, comfyui, cog, replicate, openai, "
                                 "fal, sketch)")


class AnotherSketch(Sketch):
    """A second client that would take a name already taken."""


def test_a_backend_name_is_registered_once(sketch):
    register(sketch)  # the same row again: nothing changes
    for name in ("sketch", "comfyui", "procedural_image"):
        with pytest.raises(ValueError) as e:
            register(Row(name, SketchTable, AnotherSketch))
        assert str(e.value) == f"backend {name!r} is already taken"
    assert ENGINES["sketch"] == sketch and "procedural_image" not in ENGINES

"""Catalog reload without a restart: `POST /operator/v1/catalog/reload`, the console's "Reload
catalog" button and SIGHUP. A good file is in force for new submits at once while jobs open
at that moment keep their model and price; a bad one (every start-up check) answers 422
with the reasons and the old catalog stays; engine pools follow the file."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from service.engines.pool import Pool
from service.reload import reload_on_sighup
from tests.conftest import until
from tests.pages import page
from tests.test_generation_support import running_node
from tests.test_operator_console import console_form, sign_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")


def model(mid: str, credits: str, backend: str = "procedural_image", extra: str = "") -> str:
    return (f'[[models]]\nid = "{mid}"\ncapability = "image.generate"\nbackend = "{backend}"\n'
            f'resolutions = ["1k"]\nconcurrency = 1\n'
            f'prices = [{{ resolution = "1k", credits = "{credits}" }}]\n{extra}\n')


COG = '[models.engine]\nurls = ["{url}"]\n[models.engine.bind]\nprompt = "prompt"\n'


@pytest.fixture
async def reloadable(tmp_path):
    path = tmp_path / "catalog.toml"
    path.write_text(model("painter", "1.00"))
    async with running_node(tmp_path / "node", test_mode=True, catalog_file=str(path)) as n:
        n.catalog_path = path
        yield n


async def models(node, key: str) -> dict:
    r = await node.call("GET", "/v1/generation/models", key)
    return {m["id"]: m["capabilities"][0]["prices"][0]["credits"] for m in (await r.get_json())["data"]}


async def submit(node, key: str, mid: str, prompt: str = "a hill [[delay:3600]]"):
    return await node.call("POST", f"/v1/generation/models/{mid}", key, json={"prompt": prompt})


async def test_a_good_file_is_in_force_for_new_submits_and_open_jobs_keep_theirs(reloadable):
    n = reloadable
    org = await n.create_org()
    key = org["api_key"]
    r = await submit(n, key, "painter")
    assert r.status_code == 202
    old_job = (await r.get_json())["request_id"]
    old_model = n.parts.catalog.model("painter")
    n.catalog_path.write_text(model("painter", "3.00", extra='timeout_s = 900') + model("sketcher", "0.50"))
    r = await n.op("POST", "/catalog/reload")
    assert r.status_code == 200
    assert await r.get_json() == {"data": {"models": ["painter", "sketcher"]}}
    assert await models(n, key) == {"painter": "3.00", "sketcher": "0.50"}
    r = await submit(n, key, "painter")
    new_job = (await r.get_json())["request_id"]
    assert (await r.get_json())["credits_estimate"] == "3.00"
    row = {r["id"]: r["price_uc"] for r in n.store.all("SELECT id, price_uc FROM jobs")}
    assert row[old_job] == 1_000_000 and row[new_job] == 3_000_000
    gen = n.parts.generation
    assert gen.model_for(old_job, "painter") is old_model and old_model.timeout_s == 600
    assert gen.model_for(new_job, "painter").timeout_s == 900
    # the old job still ends as it would have: cancel releases exactly its own price
    r = await n.call("POST", f"/v1/generation/requests/{old_job}/cancel", key)
    assert r.status_code == 200
    assert n.parts.console.last_reload.ok and n.parts.console.last_reload.who == "operator API"


@pytest.mark.parametrize("text, reason", [
    ("[[models]\nid = ", "not valid TOML"),
    (model("painter", "1.00", backend="no_such_backend"), "backend: unknown backend 'no_such_backend'"),
    (model("cogged", "1.00", backend="replicate",
           extra='[models.engine]\nmodel = "o/n"\ntoken_env = "GS_TEST_UNSET_TOKEN"\n'),
     "engine.token_env: the variable GS_TEST_UNSET_TOKEN is not set"),
    (model("comfy", "1.00", backend="comfyui",
           extra='[models.engine]\nurls = ["http://127.0.0.1:9"]\nworkflow = "missing.json"\n'), "missing.json"),
    (model("painter", "-1"), "models[0].prices[0].credits: credits cannot be negative"),
])
async def test_a_bad_file_answers_422_with_the_reason_and_changes_nothing(reloadable, text, reason):
    n = reloadable
    org = await n.create_org()
    os.environ.pop("GS_TEST_UNSET_TOKEN", None)
    n.catalog_path.write_text(text)
    before = n.parts.catalog
    r = await n.op("POST", "/catalog/reload")
    body = await r.get_json()
    assert r.status_code == 422 and body["error"]["code"] == "request.validation_failed"
    assert body["error"]["message"].startswith("The catalog file was not loaded: ")
    assert any(reason in p for p in body["error"]["details"]["problems"]), body
    assert n.parts.catalog is before and n.parts.generation.catalog is before
    assert await models(n, org["api_key"]) == {"painter": "1.00"}
    assert not n.parts.console.last_reload.ok


async def test_the_console_button_reloads_and_shows_a_refusal(reloadable):
    n = reloadable
    await sign_in(n.client)
    _, html = await page(n.client, "/operator/catalog")
    assert ">Reload catalog</button>" in html and "painter" in html and "1k: 1.00" in html
    n.catalog_path.write_text(model("painter", "1.00", backend="nope"))
    r = await console_form(n.client, "/operator/catalog/reload", {}, token_from="/operator/catalog")
    html = await r.get_data(as_text=True)
    assert r.status_code == 422 and "refused" in html and "unknown backend &#39;nope&#39;" in html
    n.catalog_path.write_text(model("painter", "2.00"))
    r = await console_form(n.client, "/operator/catalog/reload", {}, token_from="/operator/catalog")
    assert r.status_code == 303 and r.headers["Location"] == "/operator/catalog?note=reloaded"
    _, html = await page(n.client, "/operator/catalog?note=reloaded")
    assert "1k: 2.00" in html and "in force" in html
    actions = n.store.all("SELECT who, action, detail FROM operator_audit WHERE action = 'catalog.reload'")
    assert [a["detail"][:8] for a in actions] == ["refused:", "in force"]


async def test_sighup_reloads_the_catalog(reloadable):
    n = reloadable
    n.catalog_path.write_text(model("painter", "4.00"))
    async with trio.open_nursery() as nursery:
        await nursery.start(reload_on_sighup, n.parts)
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: n.parts.console.last_reload is not None)
        nursery.cancel_scope.cancel()
    assert n.parts.console.last_reload.who == "SIGHUP" and n.parts.console.last_reload.ok
    assert n.parts.catalog.model("painter").prices[0].uc == 4_000_000


async def test_engine_pools_follow_the_file(reloadable):
    n = reloadable
    n.catalog_path.write_text(model("painter", "1.00") +
                              model("cogged", "1.00", backend="cog", extra=COG.format(url="http://127.0.0.1:9")))
    r = await n.op("POST", "/catalog/reload")
    assert r.status_code == 200
    pool = n.parts.engines.pools["cogged"]
    await until(lambda: pool.servers[0].down)
    assert pool.servers[0].error
    await sign_in(n.client)
    _, html = await page(n.client, "/operator/engines")
    assert "cogged" in html and "http://127.0.0.1:9" in html and ">down</span>" in html
    assert f"Engine servers send their webhooks to {n.parts.settings.public_base_url}, this node's own address." in html
    _, html = await page(n.client, "/operator")
    assert "<strong>1</strong>engine servers down" in html
    n.catalog_path.write_text(model("painter", "1.00"))
    assert (await n.op("POST", "/catalog/reload")).status_code == 200
    assert pool.servers == [] and pool.all_down


async def test_a_pool_adds_new_servers_and_drains_removed_ones():
    pool = Pool("m", ["http://a", "http://b"], 1)
    async with pool.acquire() as busy:
        pool.resize(["http://b", "http://c"], 2)
        assert busy.url == "http://a"
        assert [(s.url, s.retired) for s in pool.servers] == [("http://a", True), ("http://b", False),
                                                             ("http://c", False)]
        assert pool.concurrency == 2
        taken = []
        for _ in range(2):
            cm = pool.acquire()
            taken.append((cm, await cm.__aenter__()))
        assert all(s.url != "http://a" for _, s in taken)
        for cm, _ in taken:
            await cm.__aexit__(None, None, None)
    assert [s.url for s in pool.servers] == ["http://b", "http://c"]
    pool.resize(["http://a", "http://b", "http://c"], 2)
    assert [s.url for s in pool.servers] == ["http://b", "http://c", "http://a"]
    pool.resize([], 2)
    assert pool.servers == [] and pool.all_down

"""Studio's queue badge for an engine-served model, against the ComfyUI peer with one slot:
one job rendering and three waiting show in the model card ("3 queued · 1 running · 1 server
up"), a Generate through htmx answers a pane that says how many wait for the model, and a
built-in model carries no badge."""

from __future__ import annotations

import json
import re

import pytest
from engine_support import engine_node
from peers.comfyui import run_peer
from test_engine_queue import BUILT_IN
from test_engines_comfyui import PATH, catalog, graph, rendering_on_peer, req
from test_generation_support import submit, wait_status

from tests.pages import csrf, page
from tests.test_dashboard_http import logged_in

pytestmark = pytest.mark.usefixtures("cheap_hashes")
HX = {"HX-Request": "true"}


def badge(html: str) -> str | None:
    m = re.search(r'<span class="badge[^"]*" id="queue">([^<]*)</span>', html)
    return m.group(1) if m else None


async def test_the_badge_and_the_pane_count_the_jobs_waiting_for_an_engine_model(tmp_path):
    async with run_peer(tmp_path / "comfy") as peer, \
            engine_node(tmp_path / "n", catalog(peer.url) + BUILT_IN, files={"wf.json": json.dumps(graph(slow=30))}) as n:
        org = await logged_in(n)
        key = org["api_key"]
        _, html = await page(n.client, "/studio?capability=image.generate&model=comfy-image")
        assert badge(html) == "0 queued · 0 running · 1 server up"
        first = (await submit(n, key, req(), path=PATH))["request_id"]
        await rendering_on_peer(peer, first)
        behind = [(await submit(n, key, req(), path=PATH))["request_id"] for _ in range(3)]
        _, html = await page(n.client, "/studio?capability=image.generate&model=comfy-image")
        assert badge(html) == "3 queued · 1 running · 1 server up"
        # the form alone (htmx re-renders it when the model changes) carries the same badge
        _, form_html = await page(n.client, "/studio/form?capability=image.generate&model=comfy-image")
        assert badge(form_html) == "3 queued · 1 running · 1 server up"
        # a job waiting behind the others, opened in the pane: how many wait and how soon it starts
        r = await n.client.get(f"/studio/jobs/{behind[0]}/pane")
        pane = await r.get_data(as_text=True)
        assert r.status_code == 200
        assert re.search(r"<span class=\"muted\" data-queue> · 3 waiting for comfy-image, usually starts in \d+ s</span>",
                         pane), pane
        # Generate through htmx behind them: the pane answers queued, four now waiting
        form = {"csrf_token": csrf(html), "form_token": "tok-q", "capability": "image.generate",
                "model": "comfy-image", "resolution": "96x64", "prompt": "x"}
        r = await n.client.post("/studio", form=form, headers=HX)
        body = await r.get_data(as_text=True)
        assert r.status_code == 200, body
        assert re.search(r'<strong data-status class="status-queued">queued</strong>', body)
        assert " · 4 waiting for comfy-image" in body
        mine = re.search(r'data-job="([0-9a-f-]{36})"', body).group(1)
        _, html = await page(n.client, "/studio?capability=image.generate&model=comfy-image")
        assert badge(html) == "4 queued · 1 running · 1 server up"
        # a built-in model has no queue: no badge
        _, html = await page(n.client, "/studio?capability=image.generate&model=proc-image")
        assert 'id="queue"' not in html
        for rid in [first, *behind, mine]:
            r = await n.call("POST", f"/v1/generation/requests/{rid}/cancel", key)
            assert r.status_code == 200
        for rid in [first, *behind, mine]:
            await wait_status(n, key, rid)
        _, html = await page(n.client, "/studio?capability=image.generate&model=comfy-image")
        assert badge(html) == "0 queued · 0 running · 1 server up"

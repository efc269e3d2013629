"""My generations in a real browser: the grid under Studio's form and on History, stored
thumbnails (not the outputs scaled down), pages loaded as the grid scrolls, filters by
capability and project, open a tile in the pane, use its settings again, download, hide.
Product runs draw their steps as a graph that fills in live."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.studio_shots import SIZES, doc_shot
from tests.browser.support import check_page, login_new_org


def make_jobs(node, key: str, n: int, prompt: str = "tile") -> list[str]:
    ids = []
    for i in range(n):
        r = node.api("POST", "/v1/generation/capabilities/image.generate", key, json={"prompt": f"{prompt} {i}"})
        assert r.status_code == 202, r.text
        ids.append(r.json()["request_id"])
    for job in ids:
        node.wait_job(key, job)
    return ids


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_the_grid_shows_stored_thumbnails_opens_reuses_and_hides(page, node, size):
    w, h = SIZES[size]
    page.set_viewport_size({"width": w, "height": h})
    org = login_new_org(page, node)
    key = org["api_key"]
    ids = make_jobs(node, key, 3, "a harbour")
    page.goto("/studio")
    tiles = page.locator("#generations [data-tile]")
    expect(tiles).to_have_count(3)
    assert tiles.first.get_attribute("data-tile") == ids[-1]  # newest first
    img = tiles.first.locator("img")
    src = img.get_attribute("src")
    assert re.fullmatch(r"/studio/thumbs/[0-9a-f-]{36}", src)
    page.wait_for_function("() => { const i = document.querySelector('#generations img'); return i.complete && i.naturalWidth > 0; }")
    thumb = page.request.get(src)
    assert thumb.status == 200 and thumb.headers["content-type"] == "image/webp"
    full = node.api("GET", f"/v1/generation/requests/{ids[-1]}/status", key).json()["outputs"][0]
    assert page.evaluate("() => document.querySelector('#generations img').naturalWidth") <= 320 < full["width"]
    assert len(thumb.body()) < 30_000 and page.request.get(src).body() == thumb.body()  # made once, same bytes
    check_page(page, f"studio-generations-{size}")
    doc_shot(page, "studio-generations", widths=(size,), element="#generations [data-tile]")

    page.evaluate("window.__same_page = true")
    tiles.first.get_by_role("link", name=re.compile("^Open job")).click()
    pane = page.locator("#pane-body")
    expect(pane.locator("[data-job]")).to_have_attribute("data-job", ids[-1])
    expect(pane).to_contain_text("a harbour 2")
    download = tiles.first.get_by_role("link", name=re.compile("^Download"))
    assert "sig=" in download.get_attribute("href")
    pane.get_by_role("link", name="Use these settings again").click()
    expect(page.get_by_label("Prompt")).to_have_value("a harbour 2")

    page.goto("/studio")
    page.evaluate("window.__same_page = true")
    tiles.first.get_by_role("button", name=re.compile("^Hide job")).click()
    expect(tiles).to_have_count(2)
    assert page.evaluate("window.__same_page") is True
    page.goto("/history")
    expect(page.locator("#generations [data-tile]")).to_have_count(2)  # the same grid on History
    r = node.api("GET", "/v1/generation/requests", key)
    assert ids[-1] in r.text  # hidden from view only: the API still lists it


def test_filters_and_pages_loaded_as_the_grid_scrolls(page, node):
    org = login_new_org(page, node)
    key = org["api_key"]
    make_jobs(node, key, 26)
    page.goto("/studio")
    tiles = page.locator("#generations [data-tile]")
    expect(tiles).to_have_count(24)  # the first page
    page.locator("#generations li.more").scroll_into_view_if_needed()
    expect(tiles).to_have_count(26)  # the next page, loaded when revealed
    expect(page.locator("#generations li.more")).to_have_count(0)
    page.locator("#gcap").select_option("video.generate")
    expect(tiles).to_have_count(0)
    expect(page.locator("#generations")).to_contain_text("Nothing here yet for video.generate")
    # htmx binds the swapped-in form's change trigger as the swap settles: a person cannot
    # change the filter again within those milliseconds, a test can
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    page.evaluate("window.scrollTo(0, 0)")  # the next page's marker out of view again
    page.locator("#gcap").select_option("")
    expect(tiles).to_have_count(24)
    r = node.api("POST", "/v1/projects", key, json={"name": "Other"})
    assert r.status_code == 201, r.text
    page.goto("/studio")
    page.locator("#gproject").select_option(label="Other")
    expect(tiles).to_have_count(0)


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_product_run_draws_its_steps_as_a_graph_that_fills_in(page, node, size):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    login_new_org(page, node)
    page.goto("/products/text-to-clip")
    page.get_by_label("Prompt").fill("a harbour at dawn [[delay:1]]")
    page.get_by_role("button", name="Run Text to clip").click()
    page.wait_for_url(re.compile(r"/products/runs/[0-9a-f-]{36}$"))
    page.evaluate("window.__same_page = true")
    nodes = page.locator("svg.graph [data-node]")
    count = nodes.count()
    assert count >= 3 and page.locator("svg.graph line.edge").count() >= count - 1
    doc_shot(page, "product-run-graph-live", widths=(size,))
    expect(page.locator("svg.graph [data-node][data-step-status='completed']")).to_have_count(count, timeout=60_000)
    assert page.evaluate("window.__same_page") is True
    check_page(page, f"product-run-graph-{size}")
    doc_shot(page, "product-run-graph", widths=(size,))
